//! The environment checksum of PROTOCOL.md §3.1: the wrapping sum, over all
//! live items, of XXH3-64 of `kind_byte ‖ key ‖ 0x00 ‖ item bytes`. Order
//! independent and maintained incrementally by relays and SDKs alike.

use xxhash_rust::xxh3::Xxh3;

/// Kind byte of a flag.
pub const FLAG: u8 = 1;
/// Kind byte of a segment.
pub const SEGMENT: u8 = 2;

/// One item's contribution to the checksum.
pub fn item_hash(kind: u8, key: &str, bytes: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(&[kind]);
    h.update(key.as_bytes());
    h.update(&[0]);
    h.update(bytes);
    h.digest()
}
