//! libFuzzer target: `flagstream_tests::inbound::cache_blob`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flagstream_tests::inbound::cache_blob(data);
});
