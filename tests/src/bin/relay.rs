//! The relay binary, built inside the tests package so integration tests
//! can start it as a real process (`CARGO_BIN_EXE_relay`).

fn main() {
    flagstream_relay::main_blocking();
}
