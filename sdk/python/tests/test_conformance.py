"""The whole data-driven evaluation suite (tests/data/eval/*.yaml) through
the public Python API: every case, the same value, variation and reason as
the Rust runner (tests/src/case.rs)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Tuple

import pytest
import yaml

import flagstream
from conftest import EVAL_DIR


class Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema implicit typing (as
    tests/data/eval/check_cases.py): `on` is a string, as serde_yaml reads it."""


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
Yaml12Loader.add_constructor(
    "tag:yaml.org,2002:bool", lambda loader, node: loader.construct_scalar(node).lower() == "true")


def load_files() -> List[Tuple[str, Dict[str, Any]]]:
    out = []
    for path in sorted(EVAL_DIR.glob("*.yaml")):
        with open(path) as f:
            out.append((path.name, yaml.load(f, Loader=Yaml12Loader)))
    return out


FILES = load_files()


def dict_context(c: Dict[str, Any]) -> Dict[str, Any]:
    """The file form ({key, kind, attributes} / {kind: multi, contexts})
    as the dict form the Python API takes."""
    if c.get("kind") == "multi" or "contexts" in c:
        return {"kind": "multi", **{k.get("kind", "user"): dict_context(k) for k in c["contexts"]}}
    out: Dict[str, Any] = {"key": c.get("key", "")}
    if "kind" in c:
        out["kind"] = c["kind"]
    for name, v in (c.get("attributes") or {}).items():
        if name not in ("key", "kind"):
            out[name] = v
    return out


def same(a: Any, b: Any) -> bool:
    """Equal with the same JSON types (True is not 1, 1 is not 1.0)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def observe(d: flagstream.EvaluationDetail) -> Dict[str, Any]:
    out = {"value": d.value, "reason": d.reason}
    for name in ("variation", "rule_index", "rule_id", "prerequisite_key", "schedule_step"):
        if getattr(d, name) is not None:
            out[name] = getattr(d, name)
    if d.error_kind is not None:
        out["error"] = d.error_kind
    return out


def run_case(client: flagstream.Client, case: Dict[str, Any], prebuilt: bool) -> List[str]:
    ctx: Any = dict_context(case["context"])
    if prebuilt:
        ctx = flagstream.Context(ctx)
    at = case.get("now")
    if isinstance(at, str):
        from datetime import datetime
        at = datetime.fromisoformat(at.replace("Z", "+00:00"))
    t, key, default = case["type"], case["flag"], case["default"]
    detail = getattr(client, f"{t}_detail")(key, ctx, default, at=at)
    want = dict(case["expect"])
    if want.get("rule_id") == "":
        del want["rule_id"]
    if t == "float" and isinstance(want["value"], int) and not isinstance(want["value"], bool):
        want["value"] = float(want["value"])
    got = observe(detail)
    problems = []
    if got.keys() != want.keys() or not all(same(got[k], want[k]) for k in want):
        problems.append(f"{case['name']}: expected {want}\n    got {got}")
    # The plain value call agrees with the detail (no `now`: the clock
    # matters only to schedule cases).
    if at is None:
        value = getattr(client, t)(key, ctx, default)
        if not same(value, detail.value):
            problems.append(f"{case['name']}: {t}() returned {value!r}, {t}_detail() {detail.value!r}")
    return problems


@pytest.mark.parametrize("prebuilt", [False, True], ids=["dict-context", "prebuilt-context"])
@pytest.mark.parametrize("name,file", FILES, ids=[n for n, _ in FILES])
def test_every_case(name: str, file: Dict[str, Any], prebuilt: bool) -> None:
    client = flagstream.Client.test_data(
        file.get("flags") or [], file.get("segments") or [], validate=file.get("validate", True))
    problems: List[str] = []
    for case in file["cases"]:
        problems += run_case(client, case, prebuilt)
    assert not problems, f"{len(problems)} of {len(file['cases'])} cases failed:\n" + "\n".join(problems)


def test_the_suite_is_whole() -> None:
    count = sum(len(f["cases"]) for _, f in FILES)
    assert len(FILES) >= 20 and count >= 1000, (len(FILES), count)


def test_errors_are_counted_not_raised() -> None:
    client = flagstream.Client.test_data([])
    assert client.bool("missing", {"key": "u"}, True) is True
    d = client.string_detail("missing", {"key": "u"}, "dflt")
    assert (d.value, d.reason, d.error_kind, d.variation) == ("dflt", "ERROR", "FLAG_NOT_FOUND", None)
    assert client.stats().default_not_found == 2
