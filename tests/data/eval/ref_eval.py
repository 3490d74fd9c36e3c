#!/usr/bin/env python3
"""Independent Python reading of docs/EVALUATION.md, used to cross-check the
expectations in tests/data/eval/*.yaml (run `python3 check_cases.py --evaluate`).

Written from the spec only (not from the Rust engine). It is a test aid, not an SDK:
  - regexes use Python `re` (the suite only uses patterns that mean the same in RE2);
  - where the spec is ambiguous this file follows the resolutions listed in README.md
    (see also the comments marked AMBIGUITY).

Covers contexts (single- and multi-kind, the file form and its errors), attribute
references, clauses, individual targets per kind, segments (per-kind lists, nested
segments, weighted rules), rollouts, schedules and the evaluator's clock, malformed
data ("Malformed data"), and validates `validate: true` files against "Validation".
"""

import datetime
import math
import os
import re
import sys

import xxhash

# The imported bucketings' independent implementation (LaunchDarkly's SHA-1
# fraction, Unleash's normalised MurmurHash3), checked there against the
# values their sources publish.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "sdk", "core", "testdata"))
from imported_buckets import f32, ld_fraction, unleash_bucket  # noqa: E402

BUCKETS = 100_000
OPS = {"in", "starts_with", "ends_with", "contains", "matches", "lt", "lte", "gt", "gte", "eq",
       "semver_eq", "semver_lt", "semver_gt", "before", "after", "segment_match"}
TYPES = {"bool", "string", "int", "float", "json"}
MAX_CHAIN = 10
MAX_SEGMENT_DEPTH = 10
MAX_STEPS = 50
# `matches` patterns in one flag or segment (Limits::max_regex_patterns): more is malformed
# data, none of them compiled. The byte budgets (compiled size) are the engine's measure and
# have no reading here; the suite never comes near them.
MAX_REGEX_PATTERNS = 100
DEFAULT_KIND = "user"



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


# --------------------------------------------------------------------------- time

def whole_ms(v):
    """A schedule `start` or a case's `now`: an RFC 3339 time or whole Unix milliseconds,
    taken to the millisecond, rounded down. None when it is neither."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if is_str(v):
        ms = instant_ms(v)
        return None if ms is None else math.floor(ms)
    return None


# --------------------------------------------------------------------------- kinds

_KIND = re.compile(r"^[A-Za-z0-9._-]+$")


def kind_problem(kind):
    """"Context kinds": 1-256 bytes of A-Z a-z 0-9 . _ -, not `kind` or `multi`."""
    if not is_str(kind):
        return f"{kind!r} is not a string"
    if kind == "":
        return "a context kind must not be empty"
    if len(kind.encode()) > 256:
        return f"{len(kind.encode())} bytes, limit 256"
    if kind in ("kind", "multi"):
        return f"{kind!r} is reserved"
    if not _KIND.match(kind):
        return f"{kind!r}: a context kind uses A-Z a-z 0-9 . _ -"
    return None


class ContextError(Exception):
    pass


class Kind:
    """One kind of a context: its name, key and attributes (nulls dropped)."""

    def __init__(self, name, key, attrs):
        self.name, self.key, self.attrs = name, key, attrs


def _one_kind(c, path):
    if not isinstance(c, dict):
        raise ContextError(f"{path}: not a mapping")
    extra = set(c) - {"key", "kind", "attributes", "contexts"}
    if extra:
        raise ContextError(f"{path}: unknown fields {sorted(extra)}")
    if c.get("contexts"):
        raise ContextError(f"{path}contexts: a kind of a multi-kind context cannot hold contexts")
    key = c.get("key", "")
    if key is None:
        key = ""
    if not is_str(key):
        raise ContextError(f"{path}key: not a string")
    name = DEFAULT_KIND
    if "kind" in c:
        p = kind_problem(c["kind"])
        if p:
            raise ContextError(f"{path}kind: {p}")
        name = c["kind"]
    attrs = {}
    for n, v in (c.get("attributes") or {}).items():
        # `key` and `kind` always name the key and the kinds; null is missing.
        if n in ("key", "kind") or v is None:
            continue
        attrs[n] = v
    return Kind(name, key, attrs)


def parse_context(c):
    """The file form of "Context kinds" -> a list of kinds (one for a single-kind context)."""
    if not isinstance(c, dict):
        raise ContextError("a context is a mapping")
    subs = c.get("contexts") or []
    if not subs:
        if c.get("kind") == "multi":
            raise ContextError("contexts: a multi-kind context needs at least one kind")
        return [_one_kind(c, "")]
    if c.get("key") or c.get("attributes") or ("kind" in c and c["kind"] != "multi"):
        raise ContextError("a multi-kind context has only `kind: multi` and `contexts`")
    kinds = []
    for i, sub in enumerate(subs):
        k = _one_kind(sub, f"contexts[{i}].")
        if any(x.name == k.name for x in kinds):
            raise ContextError(f"contexts[{i}].kind: kind {k.name!r} appears twice")
        kinds.append(k)
    return kinds  # a single entry is that single-kind context


def select(kinds, context_kind):
    """"Which kind is read": empty -> a single-kind context itself, a multi-kind context's
    user; a name -> that kind. None when the context does not have it."""
    if not context_kind:
        if len(kinds) == 1:
            return kinds[0]
        context_kind = DEFAULT_KIND
    for k in kinds:
        if k.name == context_kind:
            return k
    return None


# --------------------------------------------------------------------------- references

class RefError(Exception):
    pass


def parse_ref(attr):
    """"Attribute values and references" -> ("key",) | ("kinds",) | ("name", n) | ("path", parts).
    Raises RefError with the documented message."""
    if not is_str(attr):
        raise RefError(f"{attr!r} is not a string")
    if not attr.startswith("/"):
        if attr in ("", "key"):
            return ("key",)
        if attr == "kind":
            return ("kinds",)
        return ("name", attr)  # literal, slashes and tildes included
    body = attr[1:]
    if body == "":
        raise RefError('the reference "/" names nothing')
    parts = []
    for i, raw in enumerate(body.split("/")):
        if raw == "":
            raise RefError(f"component {i + 1} of the reference is empty (`//` or a trailing `/`)")
        out, j = [], 0
        while j < len(raw):
            ch = raw[j]
            if ch == "~":
                nxt = raw[j + 1] if j + 1 < len(raw) else ""
                if nxt == "0":
                    out.append("~")
                elif nxt == "1":
                    out.append("/")
                else:
                    raise RefError(f"component {i + 1} of the reference has a `~` not followed by 0 or 1")
                j += 2
            else:
                out.append(ch)
                j += 1
        parts.append("".join(out))
    if len(parts) == 1:
        if parts[0] == "key":
            return ("key",)
        if parts[0] == "kind":
            return ("kinds",)
        return ("name", parts[0])
    return ("path", parts)


def ref_ok(attr):
    try:
        parse_ref(attr)
        return True
    except RefError:
        return False


_MISSING = object()


def lookup(kind, ref):
    """The value a name or reference reads on one kind; _MISSING when it does not resolve.
    ("kinds" is handled by the callers.)"""
    if ref[0] == "key":
        return kind.key
    if ref[0] == "name":
        v = kind.attrs.get(ref[1])
        return _MISSING if v is None else v
    parts = ref[1]
    v = kind.attrs.get(parts[0])
    for p in parts[1:]:
        # each step needs an object holding the property; lists are not addressable
        if not isinstance(v, dict) or p not in v:
            return _MISSING
        v = v[p]
    return _MISSING if v is None else v


def clause_values(v):
    """A scalar is one value; a list its scalar elements; an object none."""
    if is_scalar(v):
        return [v]
    if isinstance(v, list):
        return [e for e in v if is_scalar(e)]
    return []


# --------------------------------------------------------------------------- operators

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


def value_problem(op, v):
    """Why a clause value is not of a kind its operator takes (None when it is)."""
    if op == "in":
        return None if is_scalar(v) else "in takes scalars"
    if op in ("starts_with", "ends_with", "contains", "segment_match"):
        return None if is_str(v) else f"{op} takes strings"
    if op == "matches":
        if not is_str(v):
            return "matches takes regex strings"
        try:
            re.compile(v)
        except re.error:
            return "invalid regex"
        return None
    if op in ("lt", "lte", "gt", "gte", "eq"):
        return None if is_num(v) and math.isfinite(v) else f"{op} takes numbers"
    if op.startswith("semver_"):
        return None if parse_semver(v) is not None else "version does not parse"
    if op in ("before", "after"):
        return None if instant_ms(v) is not None else "not a number or RFC 3339 string"
    return f"unknown operator {op!r}"


# --------------------------------------------------------------------------- malformed data

def clause_compiles(cl):
    """"Malformed data": a clause cannot be compiled when a value is not of a kind its
    operator takes, or its attribute is empty or a malformed reference (never for
    segment_match)."""
    op = cl.get("op")
    if op not in OPS:
        return False
    if any(value_problem(op, v) for v in cl.get("values") or []):
        return False
    attr = cl.get("attribute", "")
    if op != "segment_match" and (attr == "" or not ref_ok(attr)):
        return False
    return True


def schedule_compiles(sc):
    steps = sc.get("steps") or []
    if not steps:
        return False
    starts = [whole_ms(s.get("start")) for s in steps]
    weights = [s.get("weight") for s in steps]
    if any(t is None for t in starts) or any(w > BUCKETS for w in weights):
        return False
    for i in range(1, len(steps)):
        if not starts[i] > starts[i - 1] or weights[i] < weights[i - 1]:
            return False
    return ref_ok(sc.get("bucket_by", ""))


def serve_compiles(s):
    present = [k for k in ("variation", "rollout", "schedule") if s.get(k) is not None]
    if len(present) != 1:
        return False
    if present[0] == "rollout":
        return ref_ok(s["rollout"].get("bucket_by", ""))
    if present[0] == "schedule":
        return schedule_compiles(s["schedule"])
    return True


def variation_of_type(v, t):
    if t == "bool":
        return is_bool(v)
    if t == "string":
        return is_str(v)
    if t == "int":
        return isinstance(v, int) and not is_bool(v) and -(2**63) <= v < 2**63
    if t == "float":
        return is_num(v) and math.isfinite(v)
    return t == "json"


def regex_patterns(rules):
    """`matches` patterns in a flag's or segment's rules (every value of every clause)."""
    return sum(len(c.get("values") or []) for r in rules or [] for c in r.get("clauses") or []
               if c.get("op") == "matches")


def flag_malformed(flag):
    if regex_patterns(flag.get("rules")) > MAX_REGEX_PATTERNS:
        return True
    if not all(variation_of_type(v, flag["type"]) for v in flag["variations"]):
        return True
    for r in flag.get("rules") or []:
        if not all(clause_compiles(c) for c in r.get("clauses") or []):
            return True
        if not serve_compiles(r.get("serve") or {}):
            return True
    return not serve_compiles(flag.get("fallthrough") or {})


def segment_malformed(seg):
    if regex_patterns(seg.get("rules")) > MAX_REGEX_PATTERNS:
        return True
    for r in seg.get("rules") or []:
        cls = r.get("clauses") or []
        weighted = r.get("weight") is not None
        if not all(clause_compiles(c) for c in cls):
            return True
        if weighted and not ref_ok(r.get("bucket_by", "")):
            return True
        if not cls and not weighted:
            return True
    return False


# --------------------------------------------------------------------------- bucketing

def bucket_bytes(v):
    if is_str(v):
        return v.encode("utf-8")
    if is_num(v) and math.isfinite(v) and float(v) == int(v) and abs(v) <= 2**53:
        return str(int(v)).encode()
    return None  # missing, bool, list, object, fractional, too large


def xxh3(data, seed):
    return xxhash.xxh3_64_intdigest(data, seed=seed)


def salt_seed(salt):
    return xxh3(salt.encode("utf-8"), 0)


def bucket_if_any(kinds, context_kind, bucket_by, seed):
    """Steps 1-4 of "Rollouts and bucketing"; None when the context is not bucketable."""
    k = select(kinds, context_kind)
    if k is None:
        return None
    ref = parse_ref(bucket_by or "key")
    v = k.name if ref[0] == "kinds" else lookup(k, ref)
    if v is _MISSING:
        return None
    bv = bucket_bytes(v)
    if bv is None:
        return None
    return xxh3(bv, seed) % BUCKETS


def bucket_value(kinds, context_kind, bucket_by):
    """The bytes a context is bucketed by, None when not bucketable; and
    whether the context has the kind."""
    k = select(kinds, context_kind)
    if k is None:
        return None, False
    ref = parse_ref(bucket_by or "key")
    v = k.name if ref[0] == "kinds" else lookup(k, ref)
    if v is _MISSING:
        return None, True
    # Imported modes hash any 64-bit integer in decimal, as their sources.
    if is_num(v) and math.isfinite(v) and float(v) == int(v) and abs(v) < 2**63:
        return str(int(v)).encode(), True
    return bucket_bytes(v), True


def imported_pick(b, kinds, ro):
    """A rollout's variation under an imported bucketing (EVALUATION.md,
    "Imported bucketing")."""
    value, _ = bucket_value(kinds, ro.get("context_kind", ""), ro.get("bucket_by", ""))
    wvs = ro["variations"]
    if "launchdarkly" in b:
        frac = 0.0 if value is None else ld_fraction(b["launchdarkly"]["prefix"], value.decode("utf-8"))
        total = 0.0
        for wv in wvs:
            total = f32(total + f32(f32(wv["weight"]) / f32(100000.0)))
            if frac < total:
                return wv["variation"]
        return wvs[-1]["variation"]
    u = b["unleash"]
    if value is None:
        bk = 0  # without the value: the first variation with a weight
    else:
        bk = unleash_bucket(u["group"], value.decode("utf-8"), u.get("seed", 0), u["modulus"]) * (BUCKETS // u["modulus"])
    run = 0
    for wv in wvs:
        run += wv["weight"]
        if run > bk:
            return wv["variation"]
    return wvs[-1]["variation"]


def imported_inside(b, kinds, r):
    """A weighted segment rule under an imported bucketing."""
    value, has_kind = bucket_value(kinds, r.get("rollout_context_kind", ""), r.get("bucket_by", ""))
    w = r["weight"]
    if "launchdarkly" in b:
        if not has_kind:
            return False
        frac = 0.0 if value is None else ld_fraction(b["launchdarkly"]["prefix"], value.decode("utf-8"))
        return frac < f32(f32(w) / f32(100000.0))
    u = b["unleash"]
    if value is None:
        return False
    return unleash_bucket(u["group"], value.decode("utf-8"), u.get("seed", 0), u["modulus"]) * (BUCKETS // u["modulus"]) < w


def flag_seed(flag, explicit):
    if explicit is not None:
        return explicit
    return salt_seed(flag.get("salt") or flag["key"])


# --------------------------------------------------------------------------- evaluation

class Malformed(Exception):
    pass


class NeedsClock(Exception):
    pass


def fits(flag_type, req):
    return flag_type == req or (req == "float" and flag_type == "int") or req == "json"


class Env:
    def __init__(self, flags, segments):
        # on duplicate keys (unvalidated data) the first one wins
        self.flags, self.segments = {}, {}
        for f in flags:
            self.flags.setdefault(f["key"], f)
        for s in segments:
            self.segments.setdefault(s["key"], s)

    # ---- clauses and segments

    def clause(self, cl, kinds, seg_depth):
        """"Clauses". seg_depth: the depth at which a segment_match tests its segments."""
        neg = bool(cl.get("negate", False))
        if cl["op"] == "segment_match":
            # attribute and kind ignored; segments in listed order, first one in wins
            for s in cl.get("values") or []:
                if self.in_segment(s, kinds, seg_depth):
                    return not neg
            return neg
        ref = parse_ref(cl.get("attribute", ""))
        if ref[0] == "kinds":
            # every kind's name, whatever context_kind says; never missing
            vals = [k.name for k in kinds]
        else:
            k = select(kinds, cl.get("context_kind", ""))
            if k is None:
                return False  # missing kind: false even negated
            v = lookup(k, ref)
            if v is _MISSING:
                return False  # missing attribute: false even negated
            vals = clause_values(v)
        m = any(op_match(cl["op"], a, c) for a in vals for c in cl.get("values") or [])
        return m != neg

    def all_clauses(self, clauses, kinds, seg_depth):
        for c in clauses:  # in order, stopping at the first false one
            if not self.clause(c, kinds, seg_depth):
                return False
        return True

    def listed(self, kinds, default_keys, by_kind):
        k = select(kinds, "")
        if k is not None and k.key in (default_keys or []):
            return True
        for entry in by_kind or []:
            k = select(kinds, entry.get("context_kind", ""))
            if k is not None and k.key in (entry.get("values") or []):
                return True
        return False

    def in_segment(self, key, kinds, depth):
        """"Segments", steps 1-7."""
        if depth >= MAX_SEGMENT_DEPTH:
            raise Malformed()
        seg = self.segments.get(key)
        if seg is None:
            return False
        if segment_malformed(seg):
            raise Malformed()
        if self.listed(kinds, seg.get("included"), seg.get("included_contexts")):
            return True
        if self.listed(kinds, seg.get("excluded"), seg.get("excluded_contexts")):
            return False
        seed = salt_seed(seg.get("salt") or seg["key"])
        for r in seg.get("rules") or []:
            if not self.all_clauses(r.get("clauses") or [], kinds, depth + 1):
                continue
            w = r.get("weight")
            if w is None:
                return True
            if r.get("bucketing"):
                if imported_inside(r["bucketing"], kinds, r):
                    return True
                continue
            b = bucket_if_any(kinds, r.get("rollout_context_kind", ""), r.get("bucket_by", ""), seed)
            if (b < w) if b is not None else (w >= BUCKETS):
                return True
        return False

    # ---- serves

    def serve(self, flag, s, kinds, clock):
        """-> (variation index, schedule step or None)."""
        if s.get("variation") is not None:
            return s["variation"], None
        if s.get("rollout") is not None:
            ro = s["rollout"]
            if ro.get("bucketing"):
                return imported_pick(ro["bucketing"], kinds, ro), None
            b = bucket_if_any(kinds, ro.get("context_kind", ""), ro.get("bucket_by", ""),
                              flag_seed(flag, ro.get("seed")))
            b = 0 if b is None else b
            run = 0
            for wv in ro["variations"]:
                run += wv["weight"]
                if run > b:
                    return wv["variation"], None
            raise Malformed()  # weights short of 100000, bucket beyond their sum
        sc = s["schedule"]
        now = clock()
        steps = [(whole_ms(st["start"]), st["weight"]) for st in sc["steps"]]
        n = 0
        for i, (start, _) in enumerate(steps):
            if start <= now:
                n = i + 1  # the last step whose start <= now
        weight = steps[n - 1][1] if n else 0
        b = bucket_if_any(kinds, sc.get("context_kind", ""), sc.get("bucket_by", ""),
                          flag_seed(flag, sc.get("seed")))
        inside = (b < weight) if b is not None else (weight >= BUCKETS)
        return (sc["variation"] if inside else sc["otherwise"]), n

    # ---- the algorithm

    def eval_flag(self, key, kinds, depth, clock):
        """Steps 3-8 for a flag known to exist -> (index, reason dict). Raises Malformed."""
        flag = self.flags[key]
        if flag_malformed(flag):
            raise Malformed()
        if not flag["on"]:
            return flag["off_variation"], {"reason": "OFF"}
        for p in flag.get("prerequisites") or []:
            if depth >= MAX_CHAIN:
                raise Malformed()  # an edge out of depth 10: too deep, or a cycle
            pf = self.flags.get(p["key"])
            passed = False
            if pf is not None:
                idx, _ = self.eval_flag(p["key"], kinds, depth + 1, clock)
                passed = bool(pf["on"]) and idx == p["variation"]  # compared as it is
            if not passed:
                return flag["off_variation"], {"reason": "PREREQUISITE_FAILED", "prerequisite_key": p["key"]}
        for t in flag.get("targets") or []:
            k = select(kinds, t.get("context_kind", ""))
            if k is not None and k.key in (t.get("values") or []):
                return t["variation"], {"reason": "TARGET_MATCH"}
        for i, r in enumerate(flag.get("rules") or []):
            if self.all_clauses(r.get("clauses") or [], kinds, 0):
                idx, step = self.serve(flag, r["serve"], kinds, clock)
                reason = {"reason": "RULE_MATCH", "rule_index": i}
                if r.get("id"):
                    reason["rule_id"] = r["id"]
                if step is not None:
                    reason["schedule_step"] = step
                return idx, reason
        idx, step = self.serve(flag, flag["fallthrough"], kinds, clock)
        reason = {"reason": "FALLTHROUGH"}
        if step is not None:
            reason["schedule_step"] = step
        return idx, reason


def convert(v, flag_type, req):
    if req == "float":
        return float(v)
    return v


def evaluate(env, key, context, req, default, now=None):
    """The whole algorithm. `now`: the case's clock (RFC 3339 or Unix ms) or None."""
    kinds = parse_context(context)
    flag = env.flags.get(key)
    if flag is None:
        return {"value": default, "reason": "ERROR", "error": "FLAG_NOT_FOUND"}
    if not fits(flag["type"], req):
        return {"value": default, "reason": "ERROR", "error": "WRONG_TYPE"}
    read = []

    def clock():
        # read at most once per evaluation; one instant for every schedule reached
        if not read:
            if now is None:
                raise NeedsClock()
            read.append(whole_ms(now))
        return read[0]

    try:
        idx, reason = env.eval_flag(key, kinds, 0, clock)
        if not 0 <= idx < len(flag["variations"]):
            raise Malformed()  # step 9
    except Malformed:
        return {"value": default, "reason": "ERROR", "error": "MALFORMED_FLAG"}
    res = {"value": convert(flag["variations"][idx], flag["type"], req), "variation": idx}
    res.update(reason)
    return res


# --------------------------------------------------------------------------- validation

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$")


def validate(flags, segments):
    """"Validation"; returns a list of problems (paths as in the spec, wording approximate)."""
    errs = []
    seg_keys = set()
    flag_map = {}
    for s in segments:
        if not _KEY.match(s.get("key", "")):
            errs.append(f"segment key {s.get('key')!r}")
        if s["key"] in seg_keys:
            errs.append(f"segments[{s['key']!r}]: duplicate segment key")
        seg_keys.add(s["key"])
    for f in flags:
        if f["key"] in flag_map:
            errs.append(f"flags[{f['key']!r}]: duplicate flag key")
        flag_map[f["key"]] = f

    def check_kind(path, kind):
        if kind:
            p = kind_problem(kind)
            if p:
                errs.append(f"{path}: {p}")

    def check_attr(path, attr):
        if not is_str(attr) or len(attr.encode()) > 256:
            errs.append(f"{path}: bad attribute {attr!r}")
            return
        try:
            parse_ref(attr)
        except RefError as e:
            errs.append(f"{path}: {attr!r}: {e}")

    def check_clause(path, cl):
        op = cl.get("op")
        vals = cl.get("values") or []
        if op not in OPS:
            errs.append(f"{path}.op: unknown operator {op!r}")
            return
        if not vals:
            errs.append(f"{path}.values: at least one value is required")
        if len(vals) > 10_000:
            errs.append(f"{path}.values: {len(vals)} values, limit 10000")
        check_kind(f"{path}.context_kind", cl.get("context_kind", ""))
        if op != "segment_match":
            attr = cl.get("attribute", "")
            if attr == "":
                errs.append(f"{path}.attribute: must not be empty")
            else:
                check_attr(f"{path}.attribute", attr)
        for j, v in enumerate(vals):
            p = value_problem(op, v)
            if p:
                errs.append(f"{path}.values[{j}]: {p}")
            elif op == "segment_match" and v not in seg_keys:
                errs.append(f"{path}.values[{j}]: unknown segment {v!r}")

    def check_clauses(path, cls, empty_ok):
        if not cls and not empty_ok:
            errs.append(f"{path}.clauses: at least one clause is required")
        if len(cls) > 50:
            errs.append(f"{path}.clauses: {len(cls)} clauses, limit 50")
        for j, cl in enumerate(cls):
            check_clause(f"{path}.clauses[{j}]", cl)

    # segments
    for s in segments:
        path = f"segments[{s['key']!r}]"
        lists = (s.get("included_contexts") or []) + (s.get("excluded_contexts") or [])
        nkeys = len(s.get("included") or []) + len(s.get("excluded") or []) + sum(
            len(e.get("values") or []) for e in lists)
        if nkeys > 100_000:
            errs.append(f"{path}.included: {nkeys} keys, limit 100000")
        for field in ("included_contexts", "excluded_contexts"):
            for i, e in enumerate(s.get(field) or []):
                if not e.get("context_kind"):
                    errs.append(f"{path}.{field}[{i}].context_kind: must not be empty")
                else:
                    check_kind(f"{path}.{field}[{i}].context_kind", e["context_kind"])
        rules = s.get("rules") or []
        if len(rules) > 1000:
            errs.append(f"{path}.rules: {len(rules)} rules, limit 1000")
        if regex_patterns(rules) > MAX_REGEX_PATTERNS:
            errs.append(f"{path}: {regex_patterns(rules)} regex patterns, limit {MAX_REGEX_PATTERNS}")
        for i, r in enumerate(rules):
            rpath = f"{path}.rules[{i}]"
            w = r.get("weight")
            check_clauses(rpath, r.get("clauses") or [], w is not None)
            if w is not None and not (isinstance(w, int) and 0 <= w <= BUCKETS):
                errs.append(f"{rpath}.weight: {w} is over {BUCKETS}")
            if (r.get("bucket_by") or r.get("rollout_context_kind")) and w is None:
                errs.append(f"{rpath}: bucket_by and rollout_context_kind only apply with a weight")
            check_attr(f"{rpath}.bucket_by", r.get("bucket_by", ""))
            check_kind(f"{rpath}.rollout_context_kind", r.get("rollout_context_kind", ""))

    # segment nesting: no cycle, at most 10 deep (a segment without segment_match is 1 deep)
    def children(s):
        return [v for r in s.get("rules") or [] for c in r.get("clauses") or []
                if c.get("op") == "segment_match" for v in c.get("values") or [] if is_str(v)]

    seg_map = {s["key"]: s for s in segments}
    depth_memo = {}

    def seg_depth(k, stack):
        if k in stack:
            raise ValueError(" -> ".join(stack[stack.index(k):] + [k]))
        if k in depth_memo:
            return depth_memo[k]
        s = seg_map.get(k)
        if s is None:
            return 0  # unknown: reported above
        d = 1 + max([seg_depth(c, stack + [k]) for c in children(s)] or [0])
        depth_memo[k] = d
        return d

    cycles = set()
    for k in sorted(seg_map):
        try:
            d = seg_depth(k, [])
            if d > MAX_SEGMENT_DEPTH:
                errs.append(f"segments[{k!r}].rules: segments nested {d} deep, limit {MAX_SEGMENT_DEPTH}")
        except ValueError as e:
            if str(e) not in cycles:
                cycles.add(str(e))
                errs.append(f"segments[{k!r}].rules: segment cycle: {e}")

    # flags
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
            if not variation_of_type(v, t):
                errs.append(f"{path}.variations[{i}]: not a {t}")
        if regex_patterns(f.get("rules")) > MAX_REGEX_PATTERNS:
            errs.append(f"{path}: {regex_patterns(f.get('rules'))} regex patterns, limit {MAX_REGEX_PATTERNS}")

        def idx_ok(p, i):
            if not (isinstance(i, int) and not is_bool(i) and 0 <= i < n):
                errs.append(f"{p}: variation index {i!r} out of range")

        def check_serve(p, s):
            present = [k for k in ("variation", "rollout", "schedule") if s.get(k) is not None]
            if not present:
                errs.append(f"{p}: set variation, rollout or schedule")
                return
            if len(present) > 1:
                errs.append(f"{p}: set exactly one of variation, rollout and schedule")
                return
            if "variation" in present:
                idx_ok(p + ".variation", s["variation"])
                return
            if "rollout" in present:
                ro = s["rollout"]
                wvs = ro.get("variations") or []
                if not wvs:
                    errs.append(f"{p}.rollout.variations: at least one")
                for k, wv in enumerate(wvs):
                    idx_ok(f"{p}.rollout.variations[{k}].variation", wv["variation"])
                    if wv["weight"] < 0:
                        errs.append(f"{p}.rollout.variations[{k}].weight negative")
                if wvs and sum(wv["weight"] for wv in wvs) != BUCKETS:
                    errs.append(f"{p}.rollout.variations: weights sum to {sum(wv['weight'] for wv in wvs)}")
                seed = ro.get("seed")
                if seed is not None and not (isinstance(seed, int) and 0 <= seed < 2**64):
                    errs.append(f"{p}.rollout.seed: not a u64")
                check_attr(f"{p}.rollout.bucket_by", ro.get("bucket_by", ""))
                check_kind(f"{p}.rollout.context_kind", ro.get("context_kind", ""))
                return
            sc = s["schedule"]
            sp = f"{p}.schedule"
            idx_ok(f"{sp}.variation", sc.get("variation"))
            idx_ok(f"{sp}.otherwise", sc.get("otherwise"))
            check_attr(f"{sp}.bucket_by", sc.get("bucket_by", ""))
            check_kind(f"{sp}.context_kind", sc.get("context_kind", ""))
            seed = sc.get("seed")
            if seed is not None and not (isinstance(seed, int) and 0 <= seed < 2**64):
                errs.append(f"{sp}.seed: not a u64")
            steps = sc.get("steps") or []
            if not steps:
                errs.append(f"{sp}.steps: a schedule needs at least one step")
            if len(steps) > MAX_STEPS:
                errs.append(f"{sp}.steps: {len(steps)} steps, limit {MAX_STEPS}")
            for k, st in enumerate(steps):
                if whole_ms(st.get("start")) is None:
                    errs.append(f"{sp}.steps[{k}].start: not a time")
                if not (isinstance(st.get("weight"), int) and 0 <= st["weight"] <= BUCKETS):
                    errs.append(f"{sp}.steps[{k}].weight: {st.get('weight')} is over {BUCKETS}")
                if k > 0:
                    a, b = whole_ms(steps[k - 1].get("start")), whole_ms(st.get("start"))
                    if a is not None and b is not None and b <= a:
                        errs.append(f"{sp}.steps[{k}].start: starts must strictly increase from step to step")
                    if st.get("weight", 0) < steps[k - 1].get("weight", 0):
                        errs.append(f"{sp}.steps[{k}].weight: below the previous step's: a schedule only grows")

        idx_ok(f"{path}.off_variation", f.get("off_variation"))
        for i, tg in enumerate(f.get("targets") or []):
            idx_ok(f"{path}.targets[{i}].variation", tg["variation"])
            check_kind(f"{path}.targets[{i}].context_kind", tg.get("context_kind", ""))
        if sum(len(tg.get("values") or []) for tg in f.get("targets") or []) > 100_000:
            errs.append(f"{path}.targets: > 100000 target values")
        rules = f.get("rules") or []
        if len(rules) > 1000:
            errs.append(f"{path}.rules: > 1000")
        ids = [r.get("id") for r in rules if r.get("id")]
        if len(ids) != len(set(ids)):
            errs.append(f"{path}.rules: duplicate ids")
        for i, r in enumerate(rules):
            check_clauses(f"{path}.rules[{i}]", r.get("clauses") or [], False)
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

    # prerequisite cycles and chain depth (depth = longest number of prerequisite hops)
    memo = {}

    def depth(k, stack):
        if k in stack:
            raise ValueError("cycle through " + k)
        if k in memo:
            return memo[k]
        f = flag_map.get(k)
        d = 0
        for p in (f.get("prerequisites") or []) if f else []:
            if p["key"] in flag_map and p["key"] != k:
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
    """Re-derives every case of every file. Returns (problems, number of cases evaluated)."""
    problems = []
    evaluated = 0
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
            try:
                got = evaluate(env, c["flag"], c["context"], c["type"], c["default"], c.get("now"))
            except ContextError as e:
                problems.append(f"{rel}: case {c['name']!r}: the context is rejected: {e}")
                continue
            except NeedsClock:
                problems.append(f"{rel}: case {c['name']!r}: reaches a schedule but gives no `now`")
                continue
            evaluated += 1
            exp = dict(c["expect"])
            same = got == exp and type(got["value"]) is type(exp["value"])
            if not same:
                problems.append(f"{rel}: case {c['name']!r}: expected {exp} but reference gives {got}")
    return problems, evaluated
