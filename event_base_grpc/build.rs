//! Compiles `proto/event_base/admin/v1/admin.proto` with `protox` (a protobuf compiler in
//! Rust, so no system `protoc` is needed) and generates the tonic server and client with
//! `tonic-prost-build`. Also writes the encoded descriptor set for server reflection:
//! `compile_fds` does not write one itself.

use std::path::PathBuf;

use protox::prost::Message as _;

const PROTO: &str = "proto/event_base/admin/v1/admin.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    let fds = protox::compile([PROTO], ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("event_base_admin_v1.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        // Payloads stay `bytes::Bytes`: no copy between the bus and the wire.
        .bytes(".event_base.admin.v1")
        .compile_fds(fds)?;
    Ok(())
}
