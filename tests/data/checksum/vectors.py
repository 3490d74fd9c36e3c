#!/usr/bin/env python3
"""Checksum test vectors for docs/PROTOCOL.md section 3.1 ("Checksum test
vectors").

Builds one flag and one segment by hand-encoding protobuf with the field
numbers of proto/flagstream/v1/model.proto, in the canonical form of
PROTOCOL.md section 3.2 (ascending field numbers, default-valued fields
without presence omitted, oneof members written even when default), then
computes

    item_hash(kind, key, bytes) = XXH3_64(kind_byte || key || 0x00 || bytes)
    checksum(state)             = sum of item_hash over all items (mod 2^64)

with XXH3_64 = 64-bit XXH3, seed 0, default secret (what sdk/src/checksum.rs
computes with xxhash_rust::xxh3::Xxh3::new()).

Needs the `xxhash` package (python3 -m pip install xxhash). Prints one
`name=value` line per vector, in a fixed order; the output is committed as
vectors.txt next to this file:

    python3 tests/data/checksum/vectors.py > tests/data/checksum/vectors.txt
"""

import xxhash

FLAG = 1  # kind byte of a flag (ITEM_KIND_FLAG)
SEGMENT = 2  # kind byte of a segment (ITEM_KIND_SEGMENT)

VARINT = 0
LEN = 2


def varint(n: int) -> bytes:
    """Shortest unsigned LEB128 encoding of n >= 0."""
    assert n >= 0
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tag(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def uint(field: int, value: int) -> bytes:
    """A varint field (uint32, uint64, bool, enum)."""
    return tag(field, VARINT) + varint(value)


def ld(field: int, payload: bytes) -> bytes:
    """A length-delimited field (string, bytes, message)."""
    return tag(field, LEN) + varint(len(payload)) + payload


def string(field: int, s: str) -> bytes:
    return ld(field, s.encode("utf-8"))


# --- flagstream.v1.Flag --------------------------------------------------
# key = "demo", type = FLAG_TYPE_BOOL, variations = [true, false], on = true,
# off_variation = 1, fallthrough = { variation: 0 }, version = 1,
# revision = 1. Every other field holds its default and is omitted.
FLAG_KEY = "demo"
FLAG_TYPE_BOOL = 1
flag_bytes = b"".join(
    [
        string(1, FLAG_KEY),  # key
        uint(2, FLAG_TYPE_BOOL),  # type
        ld(3, uint(1, 1)),  # variations[0] = Variation { bool_value: true }
        ld(3, uint(1, 0)),  # variations[1] = Variation { bool_value: false } (oneof: written)
        uint(4, 1),  # on = true
        uint(5, 1),  # off_variation = 1
        ld(8, uint(1, 0)),  # fallthrough = Serve { variation: 0 } (oneof: written)
        uint(11, 1),  # version = 1
        uint(12, 1),  # revision = 1
    ]
)

# --- flagstream.v1.Segment -----------------------------------------------
# key = "beta", included = ["alice", "bob"], version = 1, revision = 1.
SEGMENT_KEY = "beta"
segment_bytes = b"".join(
    [
        string(1, SEGMENT_KEY),  # key
        string(2, "alice"),  # included[0]
        string(2, "bob"),  # included[1]
        uint(5, 1),  # version = 1
        uint(6, 1),  # revision = 1
    ]
)


def item_hash(kind: int, key: str, item: bytes) -> int:
    assert b"\x00" not in key.encode("utf-8")
    return xxhash.xxh3_64_intdigest(bytes([kind]) + key.encode("utf-8") + b"\x00" + item, seed=0)


def h64(n: int) -> str:
    return "0x%016x" % n


flag_hash = item_hash(FLAG, FLAG_KEY, flag_bytes)
segment_hash = item_hash(SEGMENT, SEGMENT_KEY, segment_bytes)
checksum = (flag_hash + segment_hash) % 2**64

# Sanity: the published XXH3_64 of the empty input (seed 0).
assert xxhash.xxh3_64_intdigest(b"", seed=0) == 0x2D06800538D394C2

lines = [
    ("xxh3_64.empty", h64(xxhash.xxh3_64_intdigest(b"", seed=0))),
    ("flag.kind", str(FLAG)),
    ("flag.key", FLAG_KEY),
    ("flag.bytes", flag_bytes.hex()),
    ("flag.hash_input", (bytes([FLAG]) + FLAG_KEY.encode() + b"\x00" + flag_bytes).hex()),
    ("flag.item_hash", h64(flag_hash)),
    ("segment.kind", str(SEGMENT)),
    ("segment.key", SEGMENT_KEY),
    ("segment.bytes", segment_bytes.hex()),
    ("segment.hash_input", (bytes([SEGMENT]) + SEGMENT_KEY.encode() + b"\x00" + segment_bytes).hex()),
    ("segment.item_hash", h64(segment_hash)),
    ("environment.empty.checksum", h64(0)),
    ("environment.checksum", h64(checksum)),
]
for name, value in lines:
    print(f"{name}={value}")
