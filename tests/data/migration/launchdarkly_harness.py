#!/usr/bin/env python3
"""Writes tests/data/migration/launchdarkly/*.yaml from LaunchDarkly's SDK
test harness (github.com/launchdarkly/sdk-test-harness,
`data/data-files/server-side-eval/`): each file's suites, expanded as the
harness expands them (its `constants` and `parameters` substituted into
the text, then parsed), with each suite's SDK data and its evaluations
(flag, context, requested type, default, expected value, variation index
and reason), in this repository's own case format with their provenance.
`tests/tests/migration/launchdarkly_conformance.rs` imports each suite's
data with `flagctl import launchdarkly` into a real relay and compares the
Rust SDK's answers with these expectations.

Usage: python3 launchdarkly_harness.py HARNESS_DIR
  HARNESS_DIR holds the harness's YAML files and a PROVENANCE.md whose
  table rows read `| file | commit | size |`.
Needs PyYAML. Deterministic.
"""
import itertools
import json
import os
import re
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))


class Yaml12Loader(yaml.SafeLoader):
    """YAML 1.2's booleans, as the harness's parser reads them: only
    `true` and `false` (PyYAML's 1.1 default also takes `on`, `off`,
    `yes` and `no`, and `on:` is a flag's field here)."""


Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for first in "tTfF":
    Yaml12Loader.yaml_implicit_resolvers.setdefault(first, []).insert(
        0, ("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")))


def load(text):
    return yaml.load(text, Loader=Yaml12Loader)


def commits(harness_dir):
    out = {}
    for line in open(os.path.join(harness_dir, "PROVENANCE.md"), encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0].endswith(".yml") and re.fullmatch(r"[0-9a-f]{40}", cells[1]):
            out.setdefault(cells[0], cells[1])
    return out


def compact(v):
    return json.dumps(v, separators=(",", ":"))


def substitute(text, values):
    """The harness's substitution: a quoted placeholder becomes the value's
    JSON, a bare one the string's contents (or the JSON of anything else)."""
    text = text.replace("\\u003c", "<").replace("\\u003e", ">")
    for name, value in values.items():
        text = text.replace(f'"<{name}>"', compact(value))
        text = text.replace(f"<{name}>", value if isinstance(value, str) else compact(value))
    return text


def parameter_sets(params):
    """A list of maps, or a list of lists of maps (every combination, the
    first list varying fastest)."""
    if not params:
        return []
    if isinstance(params[0], dict):
        return params
    out = []
    for combo in itertools.product(*reversed(params)):
        merged = {}
        for d in reversed(combo):
            merged.update(d)
        out.append(merged)
    return out


def expand(text):
    top = load(text)
    constants = top.get("constants") or {}
    sets = parameter_sets(top.get("parameters") or [])
    if not sets:
        return [load(substitute(text, constants))]
    suites = []
    for p in sets:
        t = substitute(substitute(substitute(text, constants), p), constants)
        suites.append(load(t))
    return suites


def inferred(flags, ev):
    """The harness's default and requested type when a case leaves them
    out: the default from the flag's first variation's type, the type from
    the default."""
    declared = ev.get("default")
    default = declared
    if default is None:
        variations = (flags.get(ev["flagKey"]) or {}).get("variations") or [None]
        first = variations[0]
        if isinstance(first, bool):
            default = False
        elif isinstance(first, (int, float)):
            default = 0
        elif isinstance(first, str):
            default = ""
    value_type = ev.get("valueType")
    if not value_type:
        # As the harness: a number is "int" when the declared default is
        # an integral number, else (an inferred one too) "double".
        if isinstance(default, bool):
            value_type = "bool"
        elif isinstance(default, (int, float)):
            integral = isinstance(declared, (int, float)) and not isinstance(declared, bool) and float(declared).is_integer()
            value_type = "int" if integral else "double"
        elif isinstance(default, str):
            value_type = "string"
        else:
            value_type = "any"
    return default, value_type


def main(harness_dir):
    known = commits(harness_dir)
    total = 0
    for name in sorted(os.listdir(harness_dir)):
        if not name.endswith(".yml"):
            continue
        suites = []
        for s in expand(open(os.path.join(harness_dir, name), encoding="utf-8").read()):
            data = s.get("sdkData") or {}
            flags = data.get("flags") or {}
            cases = []
            for ev in s.get("evaluations") or []:
                default, value_type = inferred(flags, ev)
                want = ev.get("expect") or {}
                expect = {"value": want.get("value"), "reason": want.get("reason")}
                if "variationIndex" in want:
                    expect["variation"] = want["variationIndex"]
                cases.append({"name": ev.get("name") or ev["flagKey"], "flag": ev["flagKey"],
                              "context": ev.get("context") or {}, "value_type": value_type,
                              "default": default, "expect": expect})
            suites.append({"name": s.get("name", name), "document": {"flags": flags, "segments": data.get("segments") or {}},
                           "cases": cases})
            total += len(cases)
        doc = {
            "source": "launchdarkly",
            "provenance": f"launchdarkly/sdk-test-harness, data/data-files/server-side-eval/{name}, commit {known.get(name, 'unknown')}",
            "suites": suites,
        }
        out = os.path.join(HERE, "launchdarkly", name[:-4] + ".yaml")
        with open(out, "w", encoding="utf-8") as f:
            f.write("# Generated by tests/data/migration/launchdarkly_harness.py from LaunchDarkly's\n")
            f.write("# SDK test harness (see `provenance`); edit that script, not this file.\n")
            yaml.safe_dump(doc, f, sort_keys=False, allow_unicode=True, width=120)
        print(f"{out}: {len(suites)} suites, {sum(len(s['cases']) for s in suites)} cases")
    print(f"total: {total} cases")


if __name__ == "__main__":
    main(sys.argv[1])
