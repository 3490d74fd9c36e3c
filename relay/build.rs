//! Generates the relay's own server side of `flagstream.v1.Sync`, in which
//! `SubscribeResponse` is the relay's pre-encoded message type
//! (`crate::encoded::Encoded`): each revision is encoded once and the same
//! bytes go to every subscriber. Every other type is the shared one from
//! `flagstream-proto`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let proto_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto");
    let sync = proto_dir.join("flagstream/v1/sync.proto");
    println!("cargo:rerun-if-changed={}", sync.display());
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .extern_path(".flagstream.v1.SubscribeResponse", "crate::encoded::Encoded")
        .extern_path(".flagstream.v1", "::flagstream_proto::v1")
        .compile_with_config(config, &[sync], &[proto_dir])?;
    Ok(())
}
