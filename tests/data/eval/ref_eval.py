#!/usr/bin/env python3
"""Independent Python reading of docs/EVALUATION.md, used to cross-check the
expectations in tests/data/eval/*.yaml (run `python3 check_cases.py --evaluate`).

Written from the spec only (not from the Rust engine). It is a test aid, not an SDK:
  - regexes use Python `re` (the suite only uses patterns that mean the same in RE2);
  - where the spec is ambiguous this file follows the resolutions listed in README.md
    (see also the comments marked AMBIGUITY).

Also validates `validate: true` files against the spec's "Validation" section.
"""

import datetime
import math
import os
import re

import xxhash

BUCKETS = 100_000
OPS = {"in", "starts_with", "ends_with", "contains", "matches", "lt", "lte", "gt", "gte", "eq",
       "semver_eq", "semver_lt", "semver_gt", "before", "after", "segment_match"}
TYPES = {"bool", "string", "int", "float", "json"}
MAX_CHAIN = 10


# --------------------------------------------------------------------------- values

def is_bool(v):
    return isinstance(v, bool)


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def is_str(v):
    return isinstance(v, str)


def is_scalar(v):
    return is_bool(v) or is_num(v) or is_str(v)


# --------------------------------------------------------------------------- semver

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")
_SHORT = re.compile(r"^(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?$")


def parse_semver(s):
    if not is_str(s):
        return None
    m = _SHORT.match(s)
    if m:  # "1" -> 1.0.0, "1.2" -> 1.2.0
        return (int(m.group(1)), int(m.group(2) or 0), 0, None)
    m = _SEMVER.match(s)
    if not m:
        return None
    pre = m.group(4)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), pre.split(".") if pre else None)


def semver_cmp(a, b):
    if a[:3] != b[:3]:
        return -1 if a[:3] < b[:3] else 1
    pa, pb = a[3], b[3]
    if pa is None and pb is None:
        return 0
    if pa is None:
        return 1
    if pb is None:
        return -1
    for x, y in zip(pa, pb):
        if x == y:
            continue
        xn, yn = x.isdigit(), y.isdigit()
        if xn and yn:
            return -1 if int(x) < int(y) else 1
        if xn:
            return -1
        if yn:
            return 1
        return -1 if x < y else 1
    if len(pa) == len(pb):
        return 0
    return -1 if len(pa) < len(pb) else 1


# --------------------------------------------------------------------------- dates

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def instant_ms(v):
    """AMBIGUITY: numbers and RFC 3339 strings are both converted to instants, so a
    number attribute can be compared with an RFC 3339 clause value and vice versa."""
    if is_num(v):
        return float(v)
    if not is_str(v):
        return None
    m = _RFC3339.match(v)
    if not m:
        return None
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    try:
        dt = datetime.datetime(y, mo, d, h, mi, s, tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    frac = m.group(7)
    ms = dt.timestamp() * 1000 + (float("0" + frac) * 1000 if frac else 0)
    tz = m.group(8)
    if tz not in ("Z", "z"):
        sign = 1 if tz[0] == "+" else -1
        ms -= sign * (int(tz[1:3]) * 60 + int(tz[4:6])) * 60_000
    return ms


# --------------------------------------------------------------------------- context

def resolve(ctx, attr):
    if attr == "key":
        return ctx.get("key", "") or ""
    if attr == "kind":
        return ctx.get("kind") or "user"
    return (ctx.get("attributes") or {}).get(attr)  # None == missing == null


def op_match(op, a, c):
    if op == "in":
        if is_bool(a) or is_bool(c):
            return is_bool(a) and is_bool(c) and a == c
        if is_num(a) and is_num(c):
            return float(a) == float(c)
        return is_str(a) and is_str(c) and a == c
    if op in ("starts_with", "ends_with", "contains", "matches"):
        if not (is_str(a) and is_str(c)):
            return False
        if op == "starts_with":
            return a.encode().startswith(c.encode())
        if op == "ends_with":
            return a.encode().endswith(c.encode())
        if op == "contains":
            return c.encode() in a.encode()
        return re.search(c, a) is not None
    if op in ("lt", "lte", "gt", "gte", "eq"):
        if not (is_num(a) and is_num(c)):
            return False
        a, c = float(a), float(c)
        return {"lt": a < c, "lte": a <= c, "gt": a > c, "gte": a >= c, "eq": a == c}[op]
    if op.startswith("semver_"):
        va, vc = parse_semver(a), parse_semver(c)
        if va is None or vc is None:
            return False
        r = semver_cmp(va, vc)
        return {"semver_eq": r == 0, "semver_lt": r < 0, "semver_gt": r > 0}[op]
    if op in ("before", "after"):
        ia, ic = instant_ms(a), instant_ms(c)
        if ia is None or ic is None:
            return False
        return ia < ic if op == "before" else ia > ic
    raise ValueError(op)


class Env:
    def __init__(self, flags, segments):
        self.flags = {f["key"]: f for f in flags}
        self.segments = {s["key"]: s for s in segments}

    def clause(self, cl, ctx):
        neg = bool(cl.get("negate", False))
        if cl["op"] == "segment_match":
            # the attribute is ignored; an unknown segment is not a match
            m = any(self.in_segment(s, ctx) for s in cl["values"])
            return m != neg
        v = resolve(ctx, cl.get("attribute", ""))
        if v is None:
            return False
        items = v if isinstance(v, list) else [v]
        m = any(op_match(cl["op"], a, c) for a in items for c in cl["values"])
        return m != neg

    def in_segment(self, key, ctx):
        seg = self.segments.get(key)
        if seg is None:
            return False
        ck = ctx.get("key", "") or ""
        if ck in (seg.get("included") or []):
            return True
        if ck in (seg.get("excluded") or []):
            return False
        return any(all(self.clause(c, ctx) for c in r["clauses"]) for r in seg.get("rules") or [])


def bucket_value(v):
    if is_str(v):
        return v.encode("utf-8")
    if is_num(v) and math.isfinite(v) and float(v) == int(v) and abs(v) <= 2**53:
        return str(int(v)).encode()
    return None  # missing, bool, list, fractional, too large


def bucket_of(flag, rollout, ctx):
    bv = bucket_value(resolve(ctx, rollout.get("bucket_by") or "key"))
    if bv is None:
        return 0
    seed = rollout.get("seed")
    if seed is None:
        salt = flag.get("salt") or flag["key"]
        seed = xxhash.xxh3_64_intdigest(salt.encode("utf-8"), seed=0)
    return xxhash.xxh3_64_intdigest(bv, seed=seed) % BUCKETS


def serve_index(flag, serve, ctx):
    if "variation" in serve:
        return serve["variation"]
    ro = serve["rollout"]
    b = bucket_of(flag, ro, ctx)
    run = 0
    for wv in ro["variations"]:
        run += wv["weight"]
        if run > b:
            return wv["variation"]
    return None  # weights short of 100000 (validation bypassed): treated as malformed


class Malformed(Exception):
    pass


def fits(flag_type, req):
    return flag_type == req or (req == "float" and flag_type == "int") or req == "json"


def evaluate_raw(env, key, ctx, stack):
    """Steps 3-7 for a flag known to exist. Returns (index, reason dict). Raises Malformed."""
    flag = env.flags[key]
    n = len(flag["variations"])

    def out(idx, reason):
        if idx is None or not 0 <= idx < n:
            raise Malformed()
        return idx, reason

    if not flag["on"]:
        return out(flag["off_variation"], {"reason": "OFF"})
    for p in flag.get("prerequisites") or []:
        pk = p["key"]
        if pk in stack or pk == key or len(stack) + 1 > MAX_CHAIN:
            raise Malformed()  # cycle or chain deeper than 10
        passed = False
        pf = env.flags.get(pk)
        if pf is not None and pf["on"]:
            idx, _ = evaluate_raw(env, pk, ctx, stack + [key])
            passed = idx == p["variation"]
        if not passed:
            return out(flag["off_variation"], {"reason": "PREREQUISITE_FAILED", "prerequisite_key": pk})
    ck = ctx.get("key", "") or ""
    for t in flag.get("targets") or []:
        if ck in t["values"]:
            return out(t["variation"], {"reason": "TARGET_MATCH"})
    for i, r in enumerate(flag.get("rules") or []):
        if all(env.clause(c, ctx) for c in r["clauses"]):
            reason = {"reason": "RULE_MATCH", "rule_index": i}
            if r.get("id"):
                reason["rule_id"] = r["id"]
            return out(serve_index(flag, r["serve"], ctx), reason)
    return out(serve_index(flag, flag["fallthrough"], ctx), {"reason": "FALLTHROUGH"})


def convert(v, flag_type, req):
    if req == "float":
        return float(v)
    return v


def evaluate(env, key, ctx, req, default):
    flag = env.flags.get(key)
    if flag is None:
        return {"value": default, "reason": "ERROR", "error": "FLAG_NOT_FOUND"}
    if not fits(flag["type"], req):
        return {"value": default, "reason": "ERROR", "error": "WRONG_TYPE"}
    try:
        idx, reason = evaluate_raw(env, key, ctx, [])
    except Malformed:
        return {"value": default, "reason": "ERROR", "error": "MALFORMED_FLAG"}
    res = {"value": convert(flag["variations"][idx], flag["type"], req), "variation": idx}
    res.update(reason)
    return res


# --------------------------------------------------------------------------- validation

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$")


def validate(flags, segments):
    errs = []
    seg_keys = set()
    flag_map = {}
    for s in segments:
        if not _KEY.match(s.get("key", "")):
            errs.append(f"segment key {s.get('key')!r}")
        seg_keys.add(s["key"])
    for f in flags:
        flag_map[f["key"]] = f

    def check_clause(path, cl, allow_segment):
        op = cl.get("op")
        vals = cl.get("values") or []
        if op not in OPS:
            errs.append(f"{path}.op: unknown operator {op!r}")
            return
        if not vals:
            errs.append(f"{path}.values: at least one value")
        attr = cl.get("attribute", "")
        if op != "segment_match" and not (isinstance(attr, str) and 0 < len(attr.encode()) <= 256):
            errs.append(f"{path}.attribute: bad name {attr!r}")
        for j, v in enumerate(vals):
            p = f"{path}.values[{j}]"
            if op == "in" and not is_scalar(v):
                errs.append(f"{p}: in takes scalars")
            elif op in ("starts_with", "ends_with", "contains") and not is_str(v):
                errs.append(f"{p}: {op} takes strings")
            elif op == "matches":
                try:
                    if not is_str(v):
                        raise re.error("not a string")
                    re.compile(v)
                except re.error:
                    errs.append(f"{p}: regex does not compile")
            elif op in ("lt", "lte", "gt", "gte", "eq") and not is_num(v):
                errs.append(f"{p}: {op} takes numbers")
            elif op.startswith("semver_") and parse_semver(v) is None:
                errs.append(f"{p}: version does not parse")
            elif op in ("before", "after") and instant_ms(v) is None:
                errs.append(f"{p}: not a number or RFC 3339 string")
            elif op == "segment_match":
                if not allow_segment:
                    errs.append(f"{p}: segment_match not allowed in a segment rule")
                elif v not in seg_keys:
                    errs.append(f"{p}: unknown segment {v!r}")

    def check_rules(path, rules, allow_segment):
        for i, r in enumerate(rules or []):
            cls = r.get("clauses") or []
            if not 1 <= len(cls) <= 50:
                errs.append(f"{path}.rules[{i}].clauses: 1..=50")
            for j, cl in enumerate(cls):
                check_clause(f"{path}.rules[{i}].clauses[{j}]", cl, allow_segment)

    for s in segments:
        check_rules(f"segments[{s['key']!r}]", s.get("rules"), False)

    for f in flags:
        path = f"flags[{f['key']!r}]"
        if not _KEY.match(f["key"]):
            errs.append(f"{path}.key")
        t = f.get("type")
        if t not in TYPES:
            errs.append(f"{path}.type")
        vs = f.get("variations") or []
        n = len(vs)
        if not 1 <= n <= 100:
            errs.append(f"{path}.variations: 1..=100")
        for i, v in enumerate(vs):
            ok = {"bool": is_bool, "string": is_str,
                  "int": lambda x: isinstance(x, int) and not is_bool(x) and -(2**63) <= x < 2**63,
                  "float": lambda x: is_num(x) and math.isfinite(x),
                  "json": lambda x: True}.get(t, lambda x: False)(v)
            if not ok:
                errs.append(f"{path}.variations[{i}]: not a {t}")

        def idx_ok(p, i):
            if not (isinstance(i, int) and not is_bool(i) and 0 <= i < n):
                errs.append(f"{p}: variation index {i!r} out of range")

        def check_serve(p, s):
            if ("variation" in s) == ("rollout" in s):
                errs.append(f"{p}: exactly one of variation / rollout")
                return
            if "variation" in s:
                idx_ok(p + ".variation", s["variation"])
                return
            ro = s["rollout"]
            wvs = ro.get("variations") or []
            if not wvs:
                errs.append(f"{p}.rollout.variations: at least one")
            for k, wv in enumerate(wvs):
                idx_ok(f"{p}.rollout.variations[{k}]", wv["variation"])
                if wv["weight"] < 0:
                    errs.append(f"{p}.rollout.variations[{k}].weight negative")
            if sum(wv["weight"] for wv in wvs) != BUCKETS:
                errs.append(f"{p}.rollout: weights sum to {sum(wv['weight'] for wv in wvs)}")
            seed = ro.get("seed")
            if seed is not None and not (isinstance(seed, int) and 0 <= seed < 2**64):
                errs.append(f"{p}.rollout.seed: not a u64")

        idx_ok(f"{path}.off_variation", f.get("off_variation"))
        for i, tg in enumerate(f.get("targets") or []):
            idx_ok(f"{path}.targets[{i}].variation", tg["variation"])
        rules = f.get("rules") or []
        if len(rules) > 1000:
            errs.append(f"{path}.rules: > 1000")
        ids = [r.get("id") for r in rules if r.get("id")]
        if len(ids) != len(set(ids)):
            errs.append(f"{path}.rules: duplicate ids")
        check_rules(path, rules, True)
        for i, r in enumerate(rules):
            check_serve(f"{path}.rules[{i}].serve", r["serve"])
        check_serve(f"{path}.fallthrough", f["fallthrough"])
        prereqs = f.get("prerequisites") or []
        if len(prereqs) > 10:
            errs.append(f"{path}.prerequisites: > 10")
        for i, p in enumerate(prereqs):
            pf = flag_map.get(p["key"])
            if p["key"] == f["key"]:
                errs.append(f"{path}.prerequisites[{i}]: names the flag itself")
            elif pf is None:
                errs.append(f"{path}.prerequisites[{i}]: unknown flag {p['key']!r}")
            elif not 0 <= p["variation"] < len(pf["variations"]):
                errs.append(f"{path}.prerequisites[{i}].variation out of range")

    # cycles and chain depth (depth = longest number of prerequisite hops)
    memo = {}

    def depth(k, stack):
        if k in stack:
            raise ValueError("cycle through " + k)
        if k in memo:
            return memo[k]
        f = flag_map.get(k)
        d = 0
        for p in (f.get("prerequisites") or []) if f else []:
            if p["key"] in flag_map:
                d = max(d, 1 + depth(p["key"], stack | {k}))
        memo[k] = d
        return d

    for k in flag_map:
        try:
            if depth(k, frozenset()) > MAX_CHAIN:
                errs.append(f"flags[{k!r}].prerequisites: chain deeper than {MAX_CHAIN}")
        except ValueError as e:
            errs.append(f"flags[{k!r}].prerequisites: {e}")
    return errs


# --------------------------------------------------------------------------- driver

def run_all(files, load):
    problems = []
    for path in files:
        rel = os.path.basename(path)
        doc = load(path)
        flags, segs = doc.get("flags") or [], doc.get("segments") or []
        verrs = validate(flags, segs)
        if doc.get("validate") and verrs:
            problems += [f"{rel}: validation: {e}" for e in verrs]
        if not doc.get("validate") and not verrs:
            problems.append(f"{rel}: validate: false but every flag passes validation")
        env = Env(flags, segs)
        for c in doc.get("cases") or []:
            got = evaluate(env, c["flag"], c["context"], c["type"], c["default"])
            exp = dict(c["expect"])
            same = got == exp and type(got["value"]) is type(exp["value"])
            if not same:
                problems.append(f"{rel}: case {c['name']!r}: expected {exp} but reference gives {got}")
    return problems
