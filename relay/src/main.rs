//! `flagstream-relay`: the relay server binary.

fn main() {
    flagstream_relay::main_blocking();
}
