//! Bad macro input is a compile error pointing at the parameter.

#[test]
fn macro_errors_point_at_the_parameter() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
