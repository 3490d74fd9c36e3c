#!/usr/bin/env python3
"""Generator for tests/data/eval/rollouts.yaml.

Computes buckets with the algorithm of docs/EVALUATION.md "Rollouts and bucketing" (the
implementation in sdk/core/testdata/gen_bucket_vectors.py), picks contexts that land on each side of
the weights, and writes the YAML with each case's bucket in its name. Deterministic.
Requires `pip install xxhash`. Usage: python3 gen_rollouts.py
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "sdk", "core", "testdata"))
from gen_bucket_vectors import bucket  # noqa: E402

U64_MAX = 2**64 - 1
flags, cases = [], []

def b(salt, seed, value):
    return bucket(salt, seed, value)

def rollout_yaml(wvs, bucket_by=None, seed=None, indent="    "):
    s = f"{indent}  rollout:\n"
    if bucket_by is not None:
        s += f"{indent}    bucket_by: {bucket_by}\n"
    if seed is not None:
        s += f"{indent}    seed: {seed}\n"
    s += f"{indent}    variations:\n"
    for v, w in wvs:
        s += f"{indent}      - {{variation: {v}, weight: {w}}}\n"
    return s

def flag(key, variations, wvs, bucket_by=None, seed=None, salt=None, ftype="string", comment=None, rules=None):
    assert sum(w for _, w in wvs) == 100000
    s = ""
    if comment:
        s += f"  # {comment}\n"
    s += f"  - key: {key}\n    type: {ftype}\n    variations: {variations}\n    on: true\n    off_variation: 0\n"
    if salt is not None:
        s += f"    salt: {salt}\n"
    if rules:
        s += rules
    s += "    fallthrough:\n" + rollout_yaml(wvs, bucket_by, seed)
    flags.append(s)

def pick(wvs, bk):
    run = 0
    for v, w in wvs:
        run += w
        if run > bk:
            return v
    raise AssertionError

def yq(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

def case(name, fl, ctx, value, var, reason="FALLTHROUGH", extra="", comment=None, t="string", default="dflt"):
    s = ""
    if comment:
        s += f"  # {comment}\n"
    s += f"""  - name: {yq(name)}
    flag: {fl}
    type: {t}
    default: {default}
    context: {ctx}
    expect: {{value: {value}, variation: {var}, reason: {reason}{extra}}}
"""
    cases.append(s)

def users(prefix="user-", n=2000):
    return [f"{prefix}{i}" for i in range(1, n)]

# 1. 50/50 on the key, salt defaults to the flag key
W5050 = [(0, 50000), (1, 50000)]
flag("ro-5050", "[control, treatment]", W5050, comment="50/50 split on the context key; salt unset -> seed64 = XXH3_64(\"ro-5050\")")
lo = [u for u in users() if b("ro-5050", None, u) < 50000][:3]
hi = [u for u in users() if b("ro-5050", None, u) >= 50000][:3]
for u in lo + hi:
    bk = b("ro-5050", None, u); v = pick(W5050, bk)
    case(f"rollout 50/50: {u} (bucket {bk})", "ro-5050", f"{{key: {u}}}", ["control", "treatment"][v], v)
for u in ["ユーザー", "émile", "0f8fad5b-d9cb-469f-a165-70867728950e", "x" * 200]:
    bk = b("ro-5050", None, u); v = pick(W5050, bk)
    short = u if len(u) < 40 else u[:10] + f"... ({len(u)} chars)"
    case(f"rollout 50/50: key {short} (bucket {bk})", "ro-5050", f"{{key: {yq(u)}}}", ["control", "treatment"][v], v)

# explicit bucket_by: key behaves like the default; salt set to the other flag's key gives identical buckets
flag("ro-5050-explicit-key", "[control, treatment]", W5050, bucket_by="key", salt="ro-5050",
     comment="same as ro-5050 but bucket_by: key explicitly and salt: ro-5050 -> identical assignment")
for u in [lo[0], hi[0]]:
    bk = b("ro-5050", None, u); v = pick(W5050, bk)
    case(f"rollout explicit bucket_by key and shared salt: {u} same as ro-5050 (bucket {bk})", "ro-5050-explicit-key",
         f"{{key: {u}}}", ["control", "treatment"][v], v)
bk = b("ro-5050", None, lo[0]); v = pick(W5050, bk)
case(f"rollout bucket_by key ignores an attribute named key (bucket {bk})", "ro-5050-explicit-key",
     f"{{key: {lo[0]}, attributes: {{key: {hi[0]}}}}}", ["control", "treatment"][v], v)

# 2. three-way
W3 = [(0, 20000), (1, 30000), (2, 50000)]
flag("ro-three", "[a, b, c]", W3, comment="20% / 30% / 50%")
for want in (0, 1, 2):
    us = [u for u in users() if pick(W3, b("ro-three", None, u)) == want][:2]
    for u in us:
        bk = b("ro-three", None, u)
        case(f"rollout three-way: {u} (bucket {bk})", "ro-three", f"{{key: {u}}}", "abc"[want], want)

# 3. exact boundary: running sum must be strictly greater than the bucket
EDGE = "edge-user"
eb = b("boundary-salt", None, EDGE)
assert 1 < eb < 99998
flag("ro-boundary-eq", "[first, second]", [(0, eb), (1, 100000 - eb)], salt="boundary-salt",
     comment=f"bucket of {EDGE} under salt boundary-salt is {eb}: first weight == bucket -> second variation")
flag("ro-boundary-plus1", "[first, second]", [(0, eb + 1), (1, 100000 - eb - 1)], salt="boundary-salt",
     comment=f"first weight == bucket + 1 -> first variation")
flag("ro-boundary-zero-width", "[first, second, third]", [(0, eb), (1, 0), (2, 100000 - eb)], salt="boundary-salt",
     comment="a zero-weight variation exactly at the bucket is skipped")
case(f"rollout boundary: running sum equal to the bucket ({eb}) does not select", "ro-boundary-eq", f"{{key: {EDGE}}}", "second", 1)
case(f"rollout boundary: running sum one above the bucket ({eb}) selects", "ro-boundary-plus1", f"{{key: {EDGE}}}", "first", 0)
case(f"rollout boundary: zero-weight variation at the bucket ({eb}) is skipped", "ro-boundary-zero-width", f"{{key: {EDGE}}}", "third", 2)

# 4. monotonic growth and reordering (shared salt)
flag("ro-grow-10", "[new, old]", [(0, 10000), (1, 90000)], salt="grow-salt", comment="10% new; salt shared with ro-grow-20 and ro-reordered")
flag("ro-grow-20", "[new, old]", [(0, 20000), (1, 80000)], salt="grow-salt", comment="20% new: only moves contexts into `new`")
flag("ro-reordered", "[new, old]", [(1, 90000), (0, 10000)], salt="grow-salt", comment="same weights as ro-grow-10, listed in the other order")
g1 = next(u for u in users() if b("grow-salt", None, u) < 10000)
g2 = next(u for u in users() if 10000 <= b("grow-salt", None, u) < 20000)
g3 = next(u for u in users() if b("grow-salt", None, u) >= 20000)
for u, a, c in [(g1, 0, 0), (g2, 1, 0), (g3, 1, 1)]:
    bk = b("grow-salt", None, u)
    case(f"rollout grow 10%: {u} (bucket {bk})", "ro-grow-10", f"{{key: {u}}}", ["new", "old"][a], a)
    case(f"rollout grow 20%: {u} (bucket {bk})", "ro-grow-20", f"{{key: {u}}}", ["new", "old"][c], c)
bk = b("grow-salt", None, g1)
case(f"rollout reordered list reshuffles: {g1} (bucket {bk}) now lands in the first listed (old)", "ro-reordered", f"{{key: {g1}}}", "old", 1)
bk3 = b("grow-salt", None, g3)
v3 = pick([(1, 90000), (0, 10000)], bk3)
case(f"rollout reordered list: {g3} (bucket {bk3})", "ro-reordered", f"{{key: {g3}}}", ["new", "old"][v3], v3)

# 5. shared salt across two flags
flag("ro-salt-a", "[x, y]", W5050, salt="shared-salt", comment="two flags with the same salt bucket identically")
flag("ro-salt-b", "[x, y]", W5050, salt="shared-salt")
sa = next(u for u in users() if b("shared-salt", None, u) < 50000)
sb = next(u for u in users() if b("shared-salt", None, u) >= 50000)
for u in (sa, sb):
    bk = b("shared-salt", None, u); v = pick(W5050, bk)
    case(f"rollout shared salt, flag a: {u} (bucket {bk})", "ro-salt-a", f"{{key: {u}}}", "xy"[v], v)
    case(f"rollout shared salt, flag b: {u} (bucket {bk})", "ro-salt-b", f"{{key: {u}}}", "xy"[v], v)
# different salt for the same key reshuffles: find a user where ro-salt-a and ro-5050 disagree
d = next(u for u in users() if pick(W5050, b("shared-salt", None, u)) != pick(W5050, b("ro-5050", None, u)))
bk = b("ro-5050", None, d); v = pick(W5050, bk)
case(f"rollout salt changes assignment: {d} differs between salts (bucket {bk} under ro-5050)", "ro-5050", f"{{key: {d}}}", ["control", "treatment"][v], v)
bk = b("shared-salt", None, d); v = pick(W5050, bk)
case(f"rollout salt changes assignment: {d} under shared-salt (bucket {bk})", "ro-salt-a", f"{{key: {d}}}", "xy"[v], v)

# 6. explicit seeds
for seed, key in [(42, "ro-seed-42"), (0, "ro-seed-0"), (U64_MAX, "ro-seed-max")]:
    flag(key, "[x, y]", W5050, seed=seed, comment=f"explicit seed {seed}; salt/key irrelevant")
    # choose a user where the explicit seed and the salt-derived seed disagree -> proves the seed is used
    u = next(u for u in users() if pick(W5050, b(key, seed, u)) != pick(W5050, b(key, None, u)))
    bk = b(key, seed, u); v = pick(W5050, bk)
    case(f"rollout explicit seed {seed}: {u} (bucket {bk}; the salt-derived seed would give the other variation)", key,
         f"{{key: {u}}}", "xy"[v], v)
    u2 = next(x for x in users() if pick(W5050, b(key, seed, x)) != v)
    bk = b(key, seed, u2); v2 = pick(W5050, bk)
    case(f"rollout explicit seed {seed}: {u2} (bucket {bk})", key, f"{{key: {u2}}}", "xy"[v2], v2)
flag("ro-seed-42-salted", "[x, y]", W5050, seed=42, salt="ignored-salt", comment="seed 42 with a salt: the seed wins")
u = next(u for u in users() if pick(W5050, b("x", 42, u)) != pick(W5050, b("ignored-salt", None, u)))
bk = b("x", 42, u); v = pick(W5050, bk)
case(f"rollout explicit seed overrides salt: {u} (bucket {bk})", "ro-seed-42-salted", f"{{key: {u}}}", "xy"[v], v)

# 7. exact-bucket flags: only bucket == B serves the middle variation
def exact_flag(key, bucket_by, B, seed=None, comment=None):
    assert 0 < B < 99999
    flag(key, "[below, exact, above]", [(0, B), (1, 1), (2, 100000 - B - 1)], bucket_by=bucket_by, seed=seed, comment=comment)

B42 = b("ro-num", None, "42")
exact_flag("ro-num", "account_id", B42, comment=f'bucket_by a number attribute; weights select exactly bucket {B42} = bucket of "42"')
# salt ro-num is the key
case("rollout number attribute 42 hashes as \"42\"", "ro-num", "{key: user-1, attributes: {account_id: 42}}", "exact", 1)
case("rollout number attribute 42.0 hashes as \"42\"", "ro-num", "{key: user-1, attributes: {account_id: 42.0}}", "exact", 1)
case("rollout string attribute \"42\" hashes the same bytes as the number 42", "ro-num", "{key: user-1, attributes: {account_id: \"42\"}}", "exact", 1)
bk = b("ro-num", None, "43"); v = pick([(0, B42), (1, 1), (2, 100000 - B42 - 1)], bk)
assert v != 1
case(f"rollout number attribute 43 hashes as \"43\" (bucket {bk})", "ro-num", "{key: user-1, attributes: {account_id: 43}}", ["below", "exact", "above"][v], v)

BN7 = b("ro-num-neg", None, "-7")
exact_flag("ro-num-neg", "n", BN7, comment=f'weights select exactly bucket {BN7} = bucket of "-7"')
case("rollout number attribute -7 hashes as \"-7\"", "ro-num-neg", "{key: user-1, attributes: {n: -7}}", "exact", 1)
case("rollout number attribute -7.0 hashes as \"-7\" (no .0)", "ro-num-neg", "{key: user-1, attributes: {n: -7.0}}", "exact", 1)

B53 = b("ro-num-big", None, "9007199254740992")
exact_flag("ro-num-big", "n", B53, comment=f'weights select exactly bucket {B53} = bucket of "9007199254740992"')
case("rollout number attribute 2^53 is bucketable, no exponent", "ro-num-big", "{key: user-1, attributes: {n: 9007199254740992}}", "exact", 1)
case("rollout number attribute 2^53 written as a float is bucketable", "ro-num-big", "{key: user-1, attributes: {n: 9007199254740992.0}}", "exact", 1)
BM53 = b("ro-num-big-neg", None, "-9007199254740992")
exact_flag("ro-num-big-neg", "n", BM53, comment=f'weights select exactly bucket {BM53} = bucket of "-9007199254740992"')
case("rollout number attribute -2^53 is bucketable", "ro-num-big-neg", "{key: user-1, attributes: {n: -9007199254740992}}", "exact", 1)

BE = b("ro-empty-key", None, "")
exact_flag("ro-empty-key", None, BE, comment=f"weights select exactly bucket {BE} = bucket of the empty key")
case("rollout empty context key is bucketable (empty bytes)", "ro-empty-key", "{key: \"\"}", "exact", 1)

BS = b("ro-seeded-exact", 7, "org-7")
exact_flag("ro-seeded-exact", "org", BS, seed=7, comment=f'seed 7, bucket_by org; exactly bucket {BS} = bucket of "org-7" with seed 7')
case("rollout seeded, bucket_by string attribute", "ro-seeded-exact", "{key: user-1, attributes: {org: org-7}}", "exact", 1)
case("rollout seeded, same attribute value with another key", "ro-seeded-exact", "{key: user-2, attributes: {org: org-7}}", "exact", 1)

# 8. not bucketable -> bucket 0 detector
WZ = [(0, 1), (1, 99999)]
flag("ro-zero", "[bucket-zero, other]", WZ, bucket_by="v", comment="only bucket 0 serves bucket-zero")
for nm, attrs in [("missing attribute", "{}"), ("null attribute", "{v: null}"), ("bool true", "{v: true}"),
                  ("bool false", "{v: false}"), ("list", "{v: [a, b]}"), ("empty list", "{v: []}"),
                  ("fractional number", "{v: 1.5}"), ("number above 2^53", "{v: 9007199254740994}"),
                  ("number below -2^53", "{v: -9007199254740994}"), ("fractional number 42.5", "{v: 42.5}"),
                  ("negative fractional number", "{v: -0.5}"),
                  ("huge number", "{v: 1.0e+20}")]:
    case(f"rollout unbucketable {nm} -> bucket 0", "ro-zero", f"{{key: user-1, attributes: {attrs}}}", "bucket-zero", 0)
for nm, attrs, val in [("string", "{v: abc}", "abc"), ("integer", "{v: 7}", "7"), ("zero", "{v: 0}", "0")]:
    bk = b("ro-zero", None, val); v = pick(WZ, bk)
    assert v == 1
    case(f"rollout bucketable {nm} (bucket {bk})", "ro-zero", f"{{key: user-1, attributes: {attrs}}}", "other", 1)

flag("ro-zero-first", "[never, always]", [(0, 0), (1, 100000)], bucket_by="v", comment="a zero-weight first variation is never served, not even for bucket 0")
case("rollout zero-weight first variation, unbucketable context", "ro-zero-first", "{key: user-1}", "always", 1)
case("rollout zero-weight first variation, bucketable context", "ro-zero-first", "{key: user-1, attributes: {v: abc}}", "always", 1)
flag("ro-single", "[only, unused]", [(0, 100000)], comment="a single variation takes every bucket")
case("rollout single variation", "ro-single", "{key: user-1}", "only", 0)
case("rollout single variation, empty key", "ro-single", "{key: \"\"}", "only", 0)

# 9. bucket_by custom string attribute and kind
WO = [(0, 50000), (1, 50000)]
flag("ro-org", "[x, y]", WO, bucket_by="org", comment="bucket_by org: contexts with the same org get the same variation")
oa = next(f"org-{i}" for i in range(1000) if b("ro-org", None, f"org-{i}") < 50000)
ob = next(f"org-{i}" for i in range(1000) if b("ro-org", None, f"org-{i}") >= 50000)
for o in (oa, ob):
    bk = b("ro-org", None, o); v = pick(WO, bk)
    for u in ("user-1", "user-2"):
        case(f"rollout bucket_by org {o} for {u} (bucket {bk})", "ro-org", f"{{key: {u}, attributes: {{org: {o}}}}}", "xy"[v], v)
flag("ro-kind", "[x, y]", WO, bucket_by="kind", salt="kind-salt", comment="bucket_by the built-in kind")
for kind, ctx in [("user", "{key: user-1}"), ("user", "{key: user-1, attributes: {kind: organization}}"), ("organization", "{key: user-1, kind: organization}")]:
    bk = b("kind-salt", None, kind); v = pick(WO, bk)
    case(f"rollout bucket_by kind {ctx} (bucket {bk} of {kind!r})", "ro-kind", ctx, "xy"[v], v)

# 10. rollout served by a rule
rules = """    rules:
      - id: us-split
        clauses:
          - {attribute: country, op: in, values: [US]}
        serve:
          rollout:
            variations:
              - {variation: 1, weight: 50000}
              - {variation: 2, weight: 50000}
"""
flags.append("  # rule serving a rollout; fallthrough fixed\n  - key: ro-rule\n    type: string\n    variations: [fixed, rule-a, rule-b]\n    on: true\n    off_variation: 0\n" + rules + "    fallthrough: {variation: 0}\n")
WR = [(1, 50000), (2, 50000)]
for want in (1, 2):
    u = next(u for u in users() if pick(WR, b("ro-rule", None, u)) == want)
    bk = b("ro-rule", None, u)
    case(f"rollout in a rule: {u} (bucket {bk})", "ro-rule", f"{{key: {u}, attributes: {{country: US}}}}",
         ["fixed", "rule-a", "rule-b"][want], want, reason="RULE_MATCH", extra=", rule_index: 0, rule_id: us-split")
case("rollout in a rule: rule not matched, fixed fallthrough", "ro-rule", "{key: user-1, attributes: {country: FR}}", "fixed", 0)

# 11. int-typed rollout requested as float
flag("ro-int", "[100, 200, 300, 400]", [(0, 25000), (1, 25000), (2, 25000), (3, 25000)], ftype="int", comment="four equal quarters of an int flag")
for want in range(4):
    u = next(u for u in users() if pick([(0, 25000), (1, 25000), (2, 25000), (3, 25000)], b("ro-int", None, u)) == want)
    bk = b("ro-int", None, u)
    case(f"rollout int quarters as int: {u} (bucket {bk})", "ro-int", f"{{key: {u}}}", str(100 * (want + 1)), want, t="int", default="-1")
u = next(u for u in users() if pick([(0, 25000), (1, 25000), (2, 25000), (3, 25000)], b("ro-int", None, u)) == 2)
bk = b("ro-int", None, u)
case(f"rollout int quarters as float: {u} (bucket {bk})", "ro-int", f"{{key: {u}}}", "300.0", 2, t="float", default="-1.0")

out = ("description: percentage rollouts and bucketing (default and custom bucket_by, number formatting, unbucketable values -> bucket 0, salt, explicit seeds, boundaries)\n"
       "validate: true\n"
       "# Expected variations were computed with the algorithm in docs/EVALUATION.md \"Rollouts and bucketing\"\n"
       "# (see sdk/core/testdata/gen_bucket_vectors.py); the bucket of each case is given in its name.\n"
       "flags:\n" + "".join(flags) + "segments: []\ncases:\n" + "".join(cases))
open(os.path.join(HERE, "rollouts.yaml"), "w", encoding="utf-8").write(out)
print(f"wrote {len(cases)} cases")
