#!/usr/bin/env python3
"""Generate sdk/core/testdata/bucket_vectors.tsv: golden vectors for rollout bucketing.

Implements docs/EVALUATION.md, "Rollouts and bucketing", steps 2-4, independently of
the Rust engine:

    seed64 = rollout seed                when set
           = XXH3_64(salt, seed=0)       otherwise (salt = flag salt, or key when empty)
    bucket = XXH3_64(value_bytes, seed=seed64) mod 100000

Columns: salt <TAB> seed <TAB> value <TAB> bucket
  - salt:  always non-empty (it defaults to the flag key)
  - seed:  "-" when unset, else the explicit u64 seed in decimal
  - value: the bucketing value as it is hashed (UTF-8). Number attributes appear
           already formatted per step 1 ("42", "-7", "9007199254740992").
           Never contains a tab or newline; may be empty.
  - bucket: integer in [0, 100000)

Deterministic: uses a fixed random seed. Requires `pip install xxhash` (xxHash >= 0.8).

Usage: python3 gen_bucket_vectors.py [output.tsv]
"""

import os
import random
import sys

import xxhash

U64_MAX = 2**64 - 1
BUCKETS = 100_000


def seed64(salt: str, seed):
    """Step 2: the explicit seed when set, else XXH3_64(salt) with seed 0."""
    if seed is not None:
        return seed
    return xxhash.xxh3_64_intdigest(salt.encode("utf-8"), seed=0)


def bucket(salt: str, seed, value: str) -> int:
    """Steps 3-4."""
    h = xxhash.xxh3_64_intdigest(value.encode("utf-8"), seed=seed64(salt, seed))
    return h % BUCKETS


def format_number(n) -> str:
    """Step 1 for numbers: integral and |n| <= 2^53 -> decimal digits, else None (bucket 0)."""
    f = float(n)
    if f != f or f in (float("inf"), float("-inf")):
        return None
    if f != int(f) or abs(f) > 2**53:
        return None
    return str(int(f))


# ---------------------------------------------------------------------------
# Corpus

SALTS_FIXED = [
    "new-checkout",
    "a",
    "0",
    "checkout.v2",
    "beta_users",
    "dark-mode",
    "search-ranking-experiment-2024",
    "Flag.With.MixedCase_and-dashes",
    "x" * 256,  # max key length
    "promo-banner",
    "payments.retry-policy",
    "9lives",
]

SEEDS_FIXED = [0, 1, 42, 2**32 - 1, 2**32, 2**53, 2**63 - 1, 2**63, U64_MAX - 1, U64_MAX]

VALUES_FIXED = [
    "",
    "user-1",
    "user-2",
    "user-10",
    "alice",
    "bob@example.com",
    "ユーザー",
    "émile",
    "Émile",
    "emile",
    "naïve café",
    "Zoë",
    "日本語のキー",
    "😀",
    "user 😀 with emoji",
    "Ωmega",
    " ",
    "  leading and trailing  ",
    "a\\b",  # literal backslash
    '"quoted"',
    "0",
    "1",
    "42",
    "-7",
    "-1",
    "100000",
    "9007199254740992",
    "-9007199254740992",
    "9007199254740991",
    "3.5",  # a *string* that looks like a number
    "true",
    "false",
    "null",
    "00000000-0000-0000-0000-000000000000",
    "org:acme",
    "x" * 200,
    "long-" + "abcdefghij" * 25,
    "é" * 150,  # 300 bytes
    "ユ" * 100,  # 300 bytes
]

KEY_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
SALT_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
UNICODE_POOL = "ユーザーéèêëàâçôûüßñøåæœΩπλ日本語中文한국어😀🚀✓—€"


def rand_salt(rng: random.Random) -> str:
    n = rng.choice([1, 2, 3, 5, 8, 12, 16, 24, 40, 64])
    first = rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
    return first + "".join(rng.choice(SALT_ALPHABET) for _ in range(n - 1))


def rand_uuid(rng: random.Random) -> str:
    h = "%032x" % rng.getrandbits(128)
    return f"{h[0:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[rng.randrange(4)]}{h[17:20]}-{h[20:32]}"


def rand_value(rng: random.Random) -> str:
    kind = rng.randrange(10)
    if kind == 0:
        return "user-%d" % rng.randrange(1_000_000)
    if kind == 1:
        return rand_uuid(rng)
    if kind == 2:
        return "".join(rng.choice(KEY_ALPHABET) for _ in range(rng.randrange(1, 33)))
    if kind == 3:  # integral number formatted per spec
        n = rng.choice([
            rng.randrange(-1000, 1000),
            rng.randrange(-(2**31), 2**31),
            rng.randrange(-(2**53), 2**53 + 1),
        ])
        s = format_number(n)
        assert s is not None
        return s
    if kind == 4:  # number given as a float with no fractional part, e.g. -7.0
        n = float(rng.randrange(-100000, 100000))
        return format_number(n)
    if kind == 5:
        return "".join(rng.choice(UNICODE_POOL) for _ in range(rng.randrange(1, 12)))
    if kind == 6:  # long ASCII
        return "".join(rng.choice(KEY_ALPHABET + "-_.@") for _ in range(rng.randrange(200, 600)))
    if kind == 7:  # long mixed
        return "".join(rng.choice(KEY_ALPHABET + UNICODE_POOL) for _ in range(rng.randrange(120, 300)))
    if kind == 8:
        return "%s@%s.example" % (
            "".join(rng.choice(KEY_ALPHABET) for _ in range(rng.randrange(1, 12))),
            rng.choice(["mail", "corp", "test"]),
        )
    # kind 9: lengths around XXH3's internal size thresholds (0-3, 4-8, 9-16, 17-128, 129-240, >240)
    n = rng.choice([1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 127, 128, 129, 239, 240, 241, 255, 256, 1024])
    return "".join(rng.choice(KEY_ALPHABET) for _ in range(n))


def build_rows():
    rng = random.Random(20240601)
    rows = []

    def add(salt, seed, value):
        assert salt != ""
        assert "\t" not in value and "\n" not in value and "\r" not in value
        assert "\t" not in salt and "\n" not in salt
        rows.append((salt, seed, value, bucket(salt, seed, value)))

    # 1. Every fixed value against a handful of fixed salts, unseeded.
    for salt in SALTS_FIXED[:6]:
        for value in VALUES_FIXED:
            add(salt, None, value)
    # 2. Every fixed seed against some fixed values (explicit seed; salt must not matter).
    for seed in SEEDS_FIXED:
        for value in ["", "user-1", "ユーザー", "émile", "42", "-7", "9007199254740992", "x" * 200]:
            add("new-checkout", seed, value)
    # 3. Same seed, different salts: bucket must be identical (salt ignored when seed set).
    for salt in ["salt-a", "salt-b", "zz"]:
        for seed in (0, U64_MAX):
            add(salt, seed, "user-1")
    # 4. Input length sweep (exercises every XXH3 size class) for one unseeded and one seeded salt.
    for n in list(range(0, 20)) + [31, 32, 33, 63, 64, 65, 127, 128, 129, 200, 239, 240, 241, 256, 300, 1000, 1024, 4096]:
        value = "".join(KEY_ALPHABET[i % len(KEY_ALPHABET)] for i in range(n))
        add("length-sweep", None, value)
        add("length-sweep", 7, value)

    # 5. Random rows until we have plenty; ~25% of all rows carry an explicit seed.
    target = 1500
    while len(rows) < target:
        seeded_so_far = sum(1 for r in rows if r[1] is not None)
        want_seed = seeded_so_far < 0.25 * (len(rows) + 1) and rng.random() < 0.6
        if want_seed:
            seed = rng.choice([rng.choice(SEEDS_FIXED), rng.getrandbits(64), rng.getrandbits(32)])
        else:
            seed = None
        if rng.random() < 0.3:
            salt = rng.choice(SALTS_FIXED)
        else:
            salt = rand_salt(rng)
        value = rand_value(rng) if rng.random() < 0.85 else rng.choice(VALUES_FIXED)
        add(salt, seed, value)
    return rows


def self_test():
    # Known XXH3_64 answers (xxHash 0.8 reference): empty input, seed 0.
    assert xxhash.xxh3_64_intdigest(b"", seed=0) == 0x2D06800538D394C2
    assert format_number(42) == "42"
    assert format_number(-7.0) == "-7"
    assert format_number(2**53) == "9007199254740992"
    assert format_number(2**53 + 2) is None
    assert format_number(1.5) is None


def main():
    self_test()
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "bucket_vectors.tsv")
    rows = build_rows()
    with open(out, "w", encoding="utf-8", newline="\n") as f:
        f.write("salt\tseed\tvalue\tbucket\n")
        for salt, seed, value, b in rows:
            f.write(f"{salt}\t{'-' if seed is None else seed}\t{value}\t{b}\n")
    seeded = sum(1 for r in rows if r[1] is not None)
    print(f"wrote {len(rows)} rows ({seeded} with explicit seed) to {out}")


if __name__ == "__main__":
    main()
