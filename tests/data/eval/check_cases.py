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

Prints the number of cases per file and the total; exits 1 on any problem.
With --evaluate, also runs every case through ref_eval.py (an independent Python
reading of docs/EVALUATION.md) and reports disagreements.

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
EXPECT_FIELDS = {"value", "variation", "reason", "rule_index", "rule_id", "prerequisite_key", "error"}


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
    segs = set()
    for i, sg in enumerate(doc.get("segments") or []):
        if sg.get("key") in segs:
            bad(f"duplicate segment key {sg.get('key')!r}")
        segs.add(sg.get("key"))
        unknown = set(sg) - {"key", "included", "excluded", "rules", "version", "revision", "description"}
        if unknown:
            bad(f"segments[{i}]: unknown fields {sorted(unknown)}")

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
        unknown = set(c) - CASE_FIELDS
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
        ctx = c["context"]
        if not isinstance(ctx, dict) or set(ctx) - {"key", "kind", "attributes"}:
            bad(f"{where}: context must be a mapping of key/kind/attributes")
        elif "key" in ctx and not isinstance(ctx["key"], str):
            bad(f"{where}: context key must be a string")
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
    if "--evaluate" in argv:
        sys.path.insert(0, HERE)
        import ref_eval  # noqa: E402
        problems += ref_eval.run_all(files, load)
    for p in problems:
        print("PROBLEM:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
