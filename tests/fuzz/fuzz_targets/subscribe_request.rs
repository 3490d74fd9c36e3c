//! libFuzzer target: `flagstream_tests::inbound::subscribe_request`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flagstream_tests::inbound::subscribe_request(data);
});
