//! The checked-in C header is what cbindgen makes of the crate now: a
//! wrapper never compiles against a header that drifted from the library.

#[test]
fn the_checked_in_header_is_current() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let config = cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("cbindgen.toml");
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate")
        .write(&mut made);
    let made = String::from_utf8(made).expect("UTF-8 header");
    let path = format!("{dir}/include/flagstream.h");
    if std::env::var("FLAGSTREAM_WRITE_HEADER").as_deref() == Ok("1") {
        std::fs::write(&path, &made).expect("write the header");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default(); // absent: stale, said below
    assert!(
        checked_in == made,
        "sdk/ffi/include/flagstream.h is stale: run `FLAGSTREAM_WRITE_HEADER=1 cargo test -p flagstream-ffi --test header` and commit it"
    );
}
