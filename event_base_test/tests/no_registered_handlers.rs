//! A binary that names no `#[handler]` crate registers nothing: asking for the registered
//! handlers then fails with an error that names the fix, instead of a bus that refuses every
//! send. (This file defines no `#[handler]` on purpose.)

use event_base::CoreError;

#[tokio::test]
async fn registered_handlers_that_are_not_there_are_an_error_naming_the_fix() {
    let err = event_base::builder()
        .with_registered_handlers()
        .build()
        .await
        .unwrap_err();
    assert!(matches!(&err, CoreError::Config(_)), "{err}");
    assert!(err.to_string().contains("use my_handlers as _;"), "{err}");
}
