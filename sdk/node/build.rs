//! Links the addon against the N-API symbols the Node process provides.

fn main() {
    napi_build::setup();
}
