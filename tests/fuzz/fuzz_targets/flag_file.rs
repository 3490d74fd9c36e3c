//! libFuzzer target: `flagstream_tests::inbound::flag_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flagstream_tests::inbound::flag_file(data);
});
