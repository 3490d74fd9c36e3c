//! libFuzzer target: `flagstream_tests::inbound::admin_batch`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flagstream_tests::inbound::admin_batch(data);
});
