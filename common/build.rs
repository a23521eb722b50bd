//! Compiles `proto/` with protox (no system protoc) into the tonic API.
use prost::Message;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = PathBuf::from("../proto");
    let file = "profd/v1/profd.proto";
    println!("cargo:rerun-if-changed=../proto");
    let fds = protox::compile([file], [&proto_dir])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("profd_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
