//! Generates the flagstream.v1 messages (and, with the `grpc` feature, the
//! tonic services) with the vendored `protoc`, so a fresh machine needs no
//! system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // Handed to prost-build directly rather than through the PROTOC variable:
    // `set_var` is unsafe in edition 2024 and this workspace denies unsafe.
    let files = [
        "flagstream/v1/model.proto",
        "flagstream/v1/sync.proto",
        "flagstream/v1/admin.proto",
        "flagstream/v1/replication.proto",
        "flagstream/v1/mirror/sync_mirror.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    config.bytes(["."]);
    #[cfg(feature = "grpc")]
    tonic_prost_build::configure().build_client(true).build_server(true).compile_with_config(
        config,
        &files,
        &["."],
    )?;
    #[cfg(not(feature = "grpc"))]
    config.compile_protos(&files, &["."])?;
    Ok(())
}
