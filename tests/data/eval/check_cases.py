#!/usr/bin/env python3
"""Structural sanity check for the data-driven evaluation suite (tests/data/eval/*.yaml).

Checks:
  - every file has description / validate / flags / segments / cases
  - flag and segment keys are unique within a file; flags have the required fields
  - case names are unique across ALL files
  - each case's flag exists in its file, or the case expects ERROR / FLAG_NOT_FOUND
  - `type` is a known requested type; `default` is a value of that type
  - reason-specific fields: rule_index (+ optional rule_id) only with RULE_MATCH,
    prerequisite_key only with PREREQUISITE_FAILED, error only with ERROR;
    `variation` absent exactly when the default is returned (ERROR)
  - ERROR cases expect value == default
  - expected values of a float request are written as floats (e.g. 42.0)
  - every scalar reads the same under YAML 1.1 and 1.2 (apart from the `on:` key), so
    that `NO`, `off`, `1.2`, timestamps etc. are quoted
  - flags, segments and their parts have exactly the fields the engine's serde shapes
    take (a field it does not know makes the Rust suite fail to load the file), with
    values of the right kind: targets, rules, clauses (`context_kind`), serves
    (exactly the fields `variation` / `rollout` / `schedule`), rollouts and schedules
    (`context_kind`, `steps` with `start` as RFC 3339 or whole Unix ms), segments
    (`included_contexts` / `excluded_contexts`, `salt`, weighted rules)
  - contexts are valid in the file form (one kind, or `kind: multi` with `contexts`:
    kind names, no kind twice), since an invalid one would stop the file loading
  - `now` (optional) is an RFC 3339 time or whole Unix ms; `schedule_step` appears
    exactly when the expected RULE_MATCH / FALLTHROUGH is served by a schedule, and
    then the case gives `now`

Prints the number of cases per file and the total; exits 1 on any problem.
With --evaluate, also runs every case through ref_eval.py (an independent Python
reading of docs/EVALUATION.md), reports disagreements and prints
`evaluated N cases`.

The files are YAML 1.2 (what serde_yaml reads): `on`, `yes`, `no` are strings and
timestamps are not a type. PyYAML defaults to YAML 1.1, so load() below uses a
1.2-core-style resolver.
"""

import glob
import os
import re
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))

REQUESTED_TYPES = {"bool", "string", "int", "float", "json"}
REASONS = {"OFF", "TARGET_MATCH", "RULE_MATCH", "FALLTHROUGH", "PREREQUISITE_FAILED", "ERROR"}
ERRORS = {"FLAG_NOT_FOUND", "WRONG_TYPE", "MALFORMED_FLAG"}
FLAG_REQUIRED = ["key", "type", "variations", "on", "off_variation", "fallthrough"]
FLAG_OPTIONAL = ["targets", "rules", "prerequisites", "salt", "version", "revision",
                 "description", "tags", "owner"]
CASE_FIELDS = {"name", "flag", "type", "default", "context", "expect"}
CASE_OPTIONAL = {"now"}
EXPECT_FIELDS = {"value", "variation", "reason", "rule_index", "rule_id", "prerequisite_key", "error",
                 "schedule_step"}
OPS = {"in", "starts_with", "ends_with", "contains", "matches", "lt", "lte", "gt", "gte", "eq",
       "semver_eq", "semver_lt", "semver_gt", "before", "after", "segment_match"}
# (required, optional) fields of each serde shape (deny_unknown_fields in sdk/src/model.rs)
SHAPES = {
    "target": ({"variation", "values"}, {"context_kind"}),
    "rule": ({"clauses", "serve"}, {"id"}),
    "clause": ({"op", "values"}, {"context_kind", "attribute", "negate"}),
    "serve": (set(), {"variation", "rollout", "schedule"}),
    "rollout": ({"variations"}, {"bucket_by", "context_kind", "seed", "bucketing"}),
    "weighted": ({"variation", "weight"}, set()),
    "schedule": ({"variation", "otherwise", "steps"}, {"bucket_by", "context_kind", "seed"}),
    "step": ({"start", "weight"}, set()),
    "prerequisite": ({"key", "variation"}, set()),
    "segment": ({"key"}, {"included", "excluded", "included_contexts", "excluded_contexts", "rules",
                          "salt", "version", "revision", "description"}),
    "kind_keys": ({"context_kind", "values"}, set()),
    "segment_rule": (set(), {"id", "clauses", "weight", "bucket_by", "rollout_context_kind", "bucketing"}),
    # exactly one of the two (a map with one key)
    "bucketing": (set(), {"launchdarkly", "unleash"}),
    "launchdarkly": ({"prefix"}, set()),
    "unleash": ({"group", "modulus"}, {"seed"}),
}
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_KIND = re.compile(r"^[A-Za-z0-9._-]{1,256}$")


class Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema implicit typing."""


Yaml12Loader.yaml_implicit_resolvers = {}
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""])
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$"), list("-+0123456789"))
Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."))


def _bool12(loader, node):
    return loader.construct_scalar(node).lower() == "true"


Yaml12Loader.add_constructor("tag:yaml.org,2002:bool", _bool12)


def load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=Yaml12Loader)


def yaml11_differences(a, b, path="$"):
    """Where a YAML 1.1 reader (PyYAML default) would see something else than a 1.2 reader.
    The `on:` mapping key is the one tolerated difference (1.1 reads it as true)."""
    out = []
    if isinstance(a, dict) and isinstance(b, dict):
        bkeys = {("on" if k is True else k): v for k, v in b.items()}
        if set(a) != set(bkeys):
            return [f"{path}: keys {sorted(map(str, a))} vs {sorted(map(str, bkeys))}"]
        for k in a:
            out += yaml11_differences(a[k], bkeys[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            out += yaml11_differences(x, y, f"{path}[{i}]")
        return out
    if type(a) is not type(b) or a != b:
        return [f"{path}: {a!r} (YAML 1.2) vs {b!r} (YAML 1.1)"]
    return out


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return (isinstance(v, (int, float))) and not isinstance(v, bool)


def value_of_type(v, t):
    if t == "bool":
        return isinstance(v, bool)
    if t == "string":
        return isinstance(v, str)
    if t == "int":
        return is_int(v) and -(2**63) <= v < 2**63
    if t == "float":
        return is_num(v)
    if t == "json":
        return True
    return False


def is_u32(v):
    return is_int(v) and 0 <= v < 2**32


def is_time(v):
    """A schedule `start` or a case's `now`: RFC 3339 or whole Unix milliseconds."""
    return (is_int(v) and -(2**63) <= v < 2**63) or (isinstance(v, str) and bool(_RFC3339.match(v)))


def kind_ok(k):
    return isinstance(k, str) and bool(_KIND.match(k)) and k not in ("kind", "multi")


def shape(bad, where, obj, name):
    """Fields of one serde shape: all required ones, nothing unknown. False if not a mapping."""
    if not isinstance(obj, dict):
        bad(f"{where}: must be a mapping ({name})")
        return False
    req, opt = SHAPES[name]
    for f in sorted(req - set(obj)):
        bad(f"{where}: missing `{f}`")
    for f in sorted(set(obj) - req - opt):
        bad(f"{where}: unknown field `{f}` ({name})")
    return True


def check_bucketing(bad, where, holder):
    """An imported bucketing, when there is one: exactly one mode, its fields."""
    b = holder.get("bucketing")
    if b is None:
        return
    if not shape(bad, f"{where}.bucketing", b, "bucketing"):
        return
    if len(b) != 1:
        bad(f"{where}.bucketing: exactly one of launchdarkly and unleash")
        return
    (mode, fields), = b.items()
    shape(bad, f"{where}.bucketing.{mode}", fields, mode)


def check_str_field(bad, where, obj, field):
    if field in obj and not isinstance(obj[field], str):
        bad(f"{where}.{field}: must be a string")


def check_clause_shape(bad, where, cl):
    if not shape(bad, where, cl, "clause"):
        return
    if cl.get("op") not in OPS:
        bad(f"{where}.op: unknown operator {cl.get('op')!r}")
    if not isinstance(cl.get("values"), list):
        bad(f"{where}.values: must be a list")
    check_str_field(bad, where, cl, "attribute")
    check_str_field(bad, where, cl, "context_kind")
    if "negate" in cl and not isinstance(cl["negate"], bool):
        bad(f"{where}.negate: must be true or false")


def check_serve_shape(bad, where, s):
    if not shape(bad, where, s, "serve"):
        return
    if "variation" in s and not is_u32(s["variation"]):
        bad(f"{where}.variation: must be a u32")
    if "rollout" in s:
        ro = s["rollout"]
        if shape(bad, f"{where}.rollout", ro, "rollout"):
            for i, wv in enumerate(ro.get("variations") or []):
                if shape(bad, f"{where}.rollout.variations[{i}]", wv, "weighted"):
                    if not (is_u32(wv.get("variation")) and is_u32(wv.get("weight"))):
                        bad(f"{where}.rollout.variations[{i}]: variation and weight are u32")
            check_bucketing(bad, f"{where}.rollout", ro)
            check_str_field(bad, f"{where}.rollout", ro, "bucket_by")
            check_str_field(bad, f"{where}.rollout", ro, "context_kind")
            if "seed" in ro and not (is_int(ro["seed"]) and 0 <= ro["seed"] < 2**64):
                bad(f"{where}.rollout.seed: must be a u64")
    if "schedule" in s:
        sc = s["schedule"]
        sp = f"{where}.schedule"
        if shape(bad, sp, sc, "schedule"):
            for f in ("variation", "otherwise"):
                if f in sc and not is_u32(sc[f]):
                    bad(f"{sp}.{f}: must be a u32")
            check_str_field(bad, sp, sc, "bucket_by")
            check_str_field(bad, sp, sc, "context_kind")
            if "seed" in sc and not (is_int(sc["seed"]) and 0 <= sc["seed"] < 2**64):
                bad(f"{sp}.seed: must be a u64")
            if not isinstance(sc.get("steps"), list):
                bad(f"{sp}.steps: must be a list")
            for i, st in enumerate(sc.get("steps") or []):
                if shape(bad, f"{sp}.steps[{i}]", st, "step"):
                    if not is_time(st.get("start")):
                        bad(f"{sp}.steps[{i}].start: an RFC 3339 time (quoted) or whole Unix ms")
                    if not is_u32(st.get("weight")):
                        bad(f"{sp}.steps[{i}].weight: must be a u32")


def check_flag_shape(bad, where, fl):
    for i, t in enumerate(fl.get("targets") or []):
        if shape(bad, f"{where}.targets[{i}]", t, "target"):
            if not is_u32(t.get("variation")):
                bad(f"{where}.targets[{i}].variation: must be a u32")
            if not (isinstance(t.get("values"), list) and all(isinstance(v, str) for v in t["values"])):
                bad(f"{where}.targets[{i}].values: a list of strings")
            check_str_field(bad, f"{where}.targets[{i}]", t, "context_kind")
    for i, r in enumerate(fl.get("rules") or []):
        rp = f"{where}.rules[{i}]"
        if shape(bad, rp, r, "rule"):
            check_str_field(bad, rp, r, "id")
            for j, cl in enumerate(r.get("clauses") or []):
                check_clause_shape(bad, f"{rp}.clauses[{j}]", cl)
            check_serve_shape(bad, f"{rp}.serve", r.get("serve"))
    if "fallthrough" in fl:
        check_serve_shape(bad, f"{where}.fallthrough", fl["fallthrough"])
    for i, p in enumerate(fl.get("prerequisites") or []):
        shape(bad, f"{where}.prerequisites[{i}]", p, "prerequisite")
    check_str_field(bad, where, fl, "salt")


def check_segment_shape(bad, where, sg):
    if not shape(bad, where, sg, "segment"):
        return
    for f in ("included", "excluded"):
        if f in sg and not (isinstance(sg[f], list) and all(isinstance(v, str) for v in sg[f])):
            bad(f"{where}.{f}: a list of strings")
    for f in ("included_contexts", "excluded_contexts"):
        for i, e in enumerate(sg.get(f) or []):
            if shape(bad, f"{where}.{f}[{i}]", e, "kind_keys"):
                check_str_field(bad, f"{where}.{f}[{i}]", e, "context_kind")
    check_str_field(bad, where, sg, "salt")
    for i, r in enumerate(sg.get("rules") or []):
        rp = f"{where}.rules[{i}]"
        if shape(bad, rp, r, "segment_rule"):
            for j, cl in enumerate(r.get("clauses") or []):
                check_clause_shape(bad, f"{rp}.clauses[{j}]", cl)
            if "weight" in r and not is_u32(r["weight"]):
                bad(f"{rp}.weight: must be a u32")
            check_bucketing(bad, rp, r)
            check_str_field(bad, rp, r, "bucket_by")
            check_str_field(bad, rp, r, "rollout_context_kind")


def context_problem(ctx):
    """The file form of a context (docs/EVALUATION.md "Context kinds"); None when valid."""
    def one(c, path):
        if not isinstance(c, dict) or set(c) - {"key", "kind", "attributes"}:
            return f"{path}: a kind is a mapping of key/kind/attributes"
        if "key" in c and not isinstance(c["key"], str):
            return f"{path}.key must be a string"
        if "kind" in c and not kind_ok(c["kind"]):
            return f"{path}.kind {c['kind']!r} is not a valid kind name"
        if "attributes" in c and not isinstance(c["attributes"], dict):
            return f"{path}.attributes must be a mapping"
        return None

    if not isinstance(ctx, dict) or set(ctx) - {"key", "kind", "attributes", "contexts"}:
        return "context must be a mapping of key/kind/attributes (or kind: multi + contexts)"
    if "contexts" not in ctx:
        return one(ctx, "context")
    if set(ctx) - {"kind", "contexts"} or ctx.get("kind", "multi") != "multi":
        return "a multi-kind context has only `kind: multi` and `contexts`"
    subs = ctx["contexts"]
    if not isinstance(subs, list) or not subs:
        return "contexts must be a non-empty list"
    names = []
    for i, c in enumerate(subs):
        p = one(c, f"contexts[{i}]")
        if p:
            return p
        names.append(c.get("kind", "user"))
    if len(set(names)) != len(names):
        return f"a kind appears twice in contexts: {names}"
    return None


def check_file(path, seen_names, problems):
    rel = os.path.basename(path)

    def bad(msg):
        problems.append(f"{rel}: {msg}")

    doc = load(path)
    with open(path, encoding="utf-8") as f:
        for d in yaml11_differences(doc, yaml.safe_load(f)):
            bad(f"reads differently under YAML 1.1, quote it: {d}")
    if not isinstance(doc, dict):
        bad("top level is not a mapping")
        return 0
    for k in ("description", "validate", "flags", "segments", "cases"):
        if k not in doc:
            bad(f"missing top-level `{k}`")
    extra = set(doc) - {"description", "validate", "flags", "segments", "cases"}
    if extra:
        bad(f"unknown top-level fields {sorted(extra)}")
    if not isinstance(doc.get("validate"), bool):
        bad("`validate` must be true or false")
    if not isinstance(doc.get("description"), str) or "\n" in doc.get("description", "").strip():
        bad("`description` must be one line")

    flags = {}
    for i, fl in enumerate(doc.get("flags") or []):
        key = fl.get("key")
        for req in FLAG_REQUIRED:
            if req not in fl:
                bad(f"flags[{i}] ({key}): missing required `{req}`")
        unknown = set(fl) - set(FLAG_REQUIRED) - set(FLAG_OPTIONAL)
        if unknown:
            bad(f"flags[{i}] ({key}): unknown fields {sorted(unknown)}")
        if key in flags:
            bad(f"duplicate flag key {key!r}")
        flags[key] = fl
        check_flag_shape(bad, f"flags[{i}] ({key})", fl)
    segs = set()
    for i, sg in enumerate(doc.get("segments") or []):
        if sg.get("key") in segs:
            bad(f"duplicate segment key {sg.get('key')!r}")
        segs.add(sg.get("key"))
        check_segment_shape(bad, f"segments[{i}] ({sg.get('key')})", sg)

    cases = doc.get("cases") or []
    for i, c in enumerate(cases):
        name = c.get("name")
        where = f"cases[{i}] ({name!r})"
        if not isinstance(name, str) or not name:
            bad(f"{where}: missing name")
        elif name in seen_names:
            bad(f"{where}: duplicate case name (also in {seen_names[name]})")
        else:
            seen_names[name] = rel
        unknown = set(c) - CASE_FIELDS - CASE_OPTIONAL
        missing = CASE_FIELDS - set(c)
        if unknown:
            bad(f"{where}: unknown fields {sorted(unknown)}")
        if missing:
            bad(f"{where}: missing fields {sorted(missing)}")
            continue
        if not isinstance(c["flag"], str):
            bad(f"{where}: flag must be a string")
            continue
        t = c["type"]
        if t not in REQUESTED_TYPES:
            bad(f"{where}: unknown requested type {t!r}")
        if not value_of_type(c["default"], t):
            bad(f"{where}: default {c['default']!r} is not a {t}")
        cp = context_problem(c["context"])
        if cp:
            bad(f"{where}: {cp}")
        if "now" in c and not is_time(c["now"]):
            bad(f"{where}: now must be an RFC 3339 time (quoted) or whole Unix ms")
        exp = c["expect"]
        if not isinstance(exp, dict):
            bad(f"{where}: expect must be a mapping")
            continue
        if set(exp) - EXPECT_FIELDS:
            bad(f"{where}: unknown expect fields {sorted(set(exp) - EXPECT_FIELDS)}")
        reason = exp.get("reason")
        if reason not in REASONS:
            bad(f"{where}: unknown reason {reason!r}")
        if "value" not in exp:
            bad(f"{where}: expect.value missing")
        if c["flag"] not in flags and not (reason == "ERROR" and exp.get("error") == "FLAG_NOT_FOUND"):
            bad(f"{where}: flag {c['flag']!r} not defined in this file and case does not expect FLAG_NOT_FOUND")
        if c["flag"] in flags and exp.get("error") == "FLAG_NOT_FOUND":
            bad(f"{where}: expects FLAG_NOT_FOUND but flag {c['flag']!r} exists")
        # reason-specific fields
        if reason == "RULE_MATCH":
            if not is_int(exp.get("rule_index")) or exp["rule_index"] < 0:
                bad(f"{where}: RULE_MATCH needs a non-negative rule_index")
            elif c["flag"] in flags:
                rules = flags[c["flag"]].get("rules") or []
                if exp["rule_index"] < len(rules):
                    rid = rules[exp["rule_index"]].get("id")
                    if (rid or None) != exp.get("rule_id"):
                        bad(f"{where}: rule_id {exp.get('rule_id')!r} != id of rules[{exp['rule_index']}] ({rid!r})")
                else:
                    bad(f"{where}: rule_index out of range")
        else:
            for f in ("rule_index", "rule_id"):
                if f in exp:
                    bad(f"{where}: `{f}` only allowed with RULE_MATCH")
        if reason == "PREREQUISITE_FAILED":
            if not isinstance(exp.get("prerequisite_key"), str):
                bad(f"{where}: PREREQUISITE_FAILED needs prerequisite_key")
            elif c["flag"] in flags:
                pkeys = [p.get("key") for p in flags[c["flag"]].get("prerequisites") or []]
                if exp["prerequisite_key"] not in pkeys:
                    bad(f"{where}: prerequisite_key {exp['prerequisite_key']!r} is not a prerequisite of the flag")
        elif "prerequisite_key" in exp:
            bad(f"{where}: `prerequisite_key` only allowed with PREREQUISITE_FAILED")
        if reason == "ERROR":
            if exp.get("error") not in ERRORS:
                bad(f"{where}: ERROR needs error in {sorted(ERRORS)}")
            if "variation" in exp:
                bad(f"{where}: ERROR returns the default: omit variation")
            if exp.get("value") != c["default"] or type(exp.get("value")) is not type(c["default"]):
                bad(f"{where}: ERROR must expect the default value")
        else:
            if "error" in exp:
                bad(f"{where}: `error` only allowed with ERROR")
            if not is_int(exp.get("variation")):
                bad(f"{where}: non-error result needs a variation index")
            elif c["flag"] in flags:
                fl = flags[c["flag"]]
                n = len(fl.get("variations") or [])
                if not 0 <= exp["variation"] < n:
                    bad(f"{where}: expected variation {exp['variation']} out of range")
        # schedule_step: exactly when a schedule serves the expected RULE_MATCH / FALLTHROUGH
        served_by = None
        fl = flags.get(c["flag"])
        if fl is not None and reason == "RULE_MATCH" and is_int(exp.get("rule_index")):
            rules = fl.get("rules") or []
            if exp["rule_index"] < len(rules):
                served_by = rules[exp["rule_index"]].get("serve")
        elif fl is not None and reason == "FALLTHROUGH":
            served_by = fl.get("fallthrough")
        scheduled = isinstance(served_by, dict) and "schedule" in served_by and \
            "variation" not in served_by and "rollout" not in served_by
        if "schedule_step" in exp:
            if not scheduled:
                bad(f"{where}: `schedule_step` only when a schedule serves the expected RULE_MATCH / FALLTHROUGH")
            elif not is_int(exp["schedule_step"]) or exp["schedule_step"] < 0:
                bad(f"{where}: schedule_step must be a non-negative integer")
            elif exp["schedule_step"] > len(served_by["schedule"].get("steps") or []):
                bad(f"{where}: schedule_step beyond the schedule's steps")
        elif scheduled:
            bad(f"{where}: served by a schedule: expect its `schedule_step`")
        if scheduled and "now" not in c:
            bad(f"{where}: served by a schedule: give the clock (`now`), or the case depends on the time it runs")
        if "value" in exp and t in REQUESTED_TYPES and not value_of_type(exp["value"], t):
            bad(f"{where}: expected value {exp['value']!r} is not a {t}")
        if t == "float" and "value" in exp and not isinstance(exp["value"], float):
            bad(f"{where}: write float expectations with a fraction (e.g. 42.0)")
    return len(cases)


def main(argv):
    files = sorted(glob.glob(os.path.join(HERE, "*.yaml")))
    if not files:
        print("no yaml files found", file=sys.stderr)
        return 1
    problems, seen = [], {}
    total = 0
    for path in files:
        n = check_file(path, seen, problems)
        total += n
        print(f"{os.path.basename(path):32s} {n:4d}")
    print(f"{'TOTAL':32s} {total:4d}")
    if "--evaluate" in argv and problems:
        print("not evaluating: fix the problems below first")
    elif "--evaluate" in argv:
        sys.path.insert(0, HERE)
        import ref_eval  # noqa: E402
        disagreements, evaluated = ref_eval.run_all(files, load)
        problems += disagreements
        print(f"evaluated {evaluated} cases with ref_eval.py, {len(disagreements)} problems")
    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
