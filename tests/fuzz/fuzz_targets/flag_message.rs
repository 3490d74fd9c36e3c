//! libFuzzer target: `flagstream_tests::inbound::flag_message`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    flagstream_tests::inbound::flag_message(data);
});
