//! Compiles `proto/` with protox (no system protoc): the tonic API of
//! `profd.v1`, and the plain messages of pprof's `perftools.profiles`.
use prost::Message;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = PathBuf::from("../proto");
    println!("cargo:rerun-if-changed=../proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);

    let fds = protox::compile(["profd/v1/profd.proto"], [&proto_dir])?;
    std::fs::write(out.join("profd_descriptor.bin"), fds.encode_to_vec())?;
    // Messages know their full names, which the strict decoder
    // (src/codec.rs) looks their descriptors up by.
    let mut config = tonic_prost_build::Config::new();
    config.enable_type_names();
    // No `ProfilerClient::connect`: callers bring their own channel, and
    // this crate needs no tonic transport.
    tonic_prost_build::configure()
        // The JSON report (src/export/json.rs) writes these as they are.
        .type_attribute("profd.v1.Totals", "#[derive(serde::Serialize)]")
        .type_attribute("profd.v1.TimeTotals", "#[derive(serde::Serialize)]")
        .type_attribute("profd.v1.ProcessSamples", "#[derive(serde::Serialize)]")
        .build_transport(false)
        .codec_path("crate::codec::StrictCodec")
        .compile_fds_with_config(fds, config)?;

    let pprof = protox::compile(["perftools/profiles/profile.proto"], [&proto_dir])?;
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(false)
        .compile_fds(pprof)?;
    Ok(())
}
