#!/usr/bin/env python3
"""Writes the golden vectors of the imported bucketing modes
(docs/EVALUATION.md, "Imported bucketing"):

  launchdarkly_buckets.tsv  prefix, value, expected fraction (single-precision bits, hex)
  unleash_buckets.tsv       group, value, seed, modulus, expected bucket (0-based)

An implementation independent of the Rust one (Python's hashlib SHA-1, a
MurmurHash3 x86_32 written from its reference description), which first
reproduces every value the source systems publish:

- LaunchDarkly: go-server-sdk-evaluation, evaluator_bucketing_testdata_test.go
  and evaluator_bucketing_test.go ("hashKey"/"saltyA": userKeyA 0.42157587,
  userKeyB 0.6708485, userKeyC 0.10343106, "33333" 0.54771423, "99999"
  0.7309658; seed 61: 0.09801207, 0.14483777, 0.9242641);
- Unleash: client-specification and the SDKs' normalisation tests
  (normalized("gr1","123") = 73, ("groupX","999") = 25 with seed 0; 96 and 60
  with the variant seed 86028157).

Run: python3 sdk/core/testdata/imported_buckets.py (writes next to itself).
"""
import hashlib
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def ld_fraction(prefix, value):
    h = hashlib.sha1(f"{prefix}.{value}".encode()).hexdigest()[:15]
    # Single precision, as LaunchDarkly's Go, Rust and Java SDKs (a quotient
    # of two singles computed in double and rounded once is exact).
    return f32(f32(int(h, 16)) / f32(0xFFFFFFFFFFFFFFF))


def murmur3_32(data, seed=0):
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & 0xFFFFFFFF
    n = len(data) // 4
    for i in range(n):
        k = struct.unpack_from("<I", data, i * 4)[0]
        k = (k * c1) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
        h = ((h << 13) | (h >> 19)) & 0xFFFFFFFF
        h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    tail = data[n * 4 :]
    k = 0
    for i, b in enumerate(tail):
        k ^= b << (8 * i)
    if tail:
        k = (k * c1) & 0xFFFFFFFF
        k = ((k << 15) | (k >> 17)) & 0xFFFFFFFF
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


def unleash_bucket(group, value, seed, modulus):
    return murmur3_32(f"{group}:{value}".encode(), seed) % modulus


def check_published():
    published = [
        ("hashKey.saltyA", "userKeyA", 0.42157587),
        ("hashKey.saltyA", "userKeyB", 0.6708485),
        ("hashKey.saltyA", "userKeyC", 0.10343106),
        ("hashKey.saltyA", "33333", 0.54771423),
        ("hashKey.saltyA", "99999", 0.7309658),
        ("61", "userKeyA", 0.09801207),
        ("61", "userKeyB", 0.14483777),
        ("61", "userKeyC", 0.9242641),
    ]
    for prefix, value, want in published:
        got = ld_fraction(prefix, value)
        assert abs(got - want) <= 1e-7 * want, (prefix, value, got, want)
    for group, value, seed, want in [
        ("gr1", "123", 0, 73),
        ("groupX", "999", 0, 25),
        ("gr1", "123", 86028157, 96),
        ("groupX", "999", 86028157, 60),
    ]:
        got = unleash_bucket(group, value, seed, 100) + 1
        assert got == want, (group, value, seed, got, want)
    return published


def main():
    published = check_published()
    rnd = random.Random(20261206)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_@.é日"
    word = lambda: "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 24)))
    with open(os.path.join(HERE, "launchdarkly_buckets.tsv"), "w", encoding="utf-8") as f:
        f.write("prefix\tvalue\tfraction_f32_bits\n")
        rows = [(p, v) for p, v, _ in published]
        for i in range(1200):
            prefix = f"{word()}.{word()}" if i % 4 else str(rnd.randint(-(2**31), 2**31))
            value = word() if i % 5 else str(rnd.randint(-(10**12), 10**12))
            rows.append((prefix, value))
        for prefix, value in rows:
            f.write(f"{prefix}\t{value}\t{f32_bits(ld_fraction(prefix, value)):08x}\n")
    with open(os.path.join(HERE, "unleash_buckets.tsv"), "w", encoding="utf-8") as f:
        f.write("group\tvalue\tseed\tmodulus\tbucket\n")
        rows = [("gr1", "123", 0, 100), ("groupX", "999", 0, 100), ("gr1", "123", 86028157, 100), ("groupX", "999", 86028157, 100)]
        for i in range(1200):
            seed = 0 if i % 2 else 86028157
            modulus = 100 if i % 3 else 1000
            rows.append((word(), word() if i % 5 else str(rnd.randint(0, 10**9)), seed, modulus))
        for group, value, seed, modulus in rows:
            f.write(f"{group}\t{value}\t{seed}\t{modulus}\t{unleash_bucket(group, value, seed, modulus)}\n")


if __name__ == "__main__":
    main()
