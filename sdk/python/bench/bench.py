"""Per-evaluation cost from Python: flagstream against the SDKs users would
otherwise pick, fed the same flags from local data (no network).

Cases: an on/off flag; a 2-clause rule (country in [US, CA] and plan in
[enterprise]) with a dict context built per call; the same rule with a
prebuilt context; a random flag of 10,000 (each with that rule).

Peers: launchdarkly-server-sdk (file data source, events off),
UnleashClient (bootstrapped from a dict, no fetch, no metrics) and flagd's
in-process provider (openfeature-provider-flagd with openfeature-sdk,
offline: a flagd flag-definition JSON file, no flagd server; the rule as
json-logic targeting). Each case is timed with timeit, best of 5 repeats,
in ns per evaluation.

Run by run.sh (which builds the release wheel and installs the peers in a
venv). Prints a Markdown table.
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import tempfile
import timeit
import tracemalloc
from typing import Callable, Dict, List

N_FLAGS = 10_000
CTX = {"key": "user-42", "country": "US", "plan": "enterprise"}
rng = random.Random(7)
KEYS = [f"flag-{rng.randrange(N_FLAGS)}" for _ in range(4096)]


def timed(fn: Callable[[], object], number: int) -> float:
    """Best ns per call of 5 repeats."""
    fn()
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e9


def timed_cycle(fn: Callable[[str], object], number: int) -> float:
    """As `timed`, over the random keys (the cost of cycling included)."""
    keys = KEYS
    n = len(keys)
    state = [0]

    def one() -> None:
        i = state[0]
        fn(keys[i])
        state[0] = (i + 1) % n

    return timed(one, number)


# ---------------------------------------------------------------- flagstream


def flagstream_cases() -> Dict[str, float]:
    import flagstream

    rule = {"id": "us-enterprise", "clauses": [
        {"attribute": "country", "op": "in", "values": ["US", "CA"]},
        {"attribute": "plan", "op": "in", "values": ["enterprise"]}], "serve": {"variation": 0}}

    def flag(key: str, rules: List[dict]) -> dict:
        return {"key": key, "type": "bool", "variations": [True, False], "on": True, "off_variation": 1,
                "rules": rules, "fallthrough": {"variation": 1}}

    flags = [flag("onoff", []), flag("rule", [rule])] + [flag(f"flag-{i}", [rule]) for i in range(N_FLAGS)]
    c = flagstream.Client.test_data(flags)
    pre = flagstream.Context(CTX)
    assert c.bool("onoff", {"key": "user-42"}, True) is False
    assert c.bool("rule", CTX, False) is True and c.bool("rule", pre, False) is True
    assert c.bool("flag-7", CTX, False) is True
    # The answers every peer is checked against (flagd_cases asserts the same).
    assert c.bool("rule", {**CTX, "country": "FR"}, True) is False
    assert all(c.bool(k, pre, False) is True for k in KEYS)
    user = {"key": "user-42"}
    out = {
        "on/off flag": timed(lambda: c.bool("onoff", user, True), 1_000_000),
        "2-clause rule, dict context": timed(lambda: c.bool("rule", CTX, False), 1_000_000),
        "2-clause rule, prebuilt context": timed(lambda: c.bool("rule", pre, False), 1_000_000),
        "random flag of 10,000": timed_cycle(lambda k: c.bool(k, CTX, False), 500_000),
    }
    # Python objects allocated by an evaluation with a prebuilt context:
    # the interpreter's count of allocated memory blocks before and after
    # 100,000 evaluations (any per-call object would add up), and
    # tracemalloc's count of traced allocations over the same loop.
    ev = c.bool
    gc.collect()
    gc.disable()
    before = sys.getallocatedblocks()
    for _ in range(100_000):
        ev("rule", pre, False)
    blocks = sys.getallocatedblocks() - before
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    for _ in range(100_000):
        ev("rule", pre, False)
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    gc.enable()
    grown = sum(s.count_diff for s in snap1.compare_to(snap0, "filename") if s.count_diff > 0
                and "tracemalloc" not in str(s.traceback))
    out["_blocks"] = blocks
    out["_tracemalloc"] = grown
    c.close()
    return out


# -------------------------------------------------------------- LaunchDarkly


def launchdarkly_cases() -> Dict[str, float]:
    import ldclient
    from ldclient import Context
    from ldclient.config import Config
    from ldclient.integrations import Files

    clauses = [{"attribute": "country", "op": "in", "values": ["US", "CA"], "negate": False, "contextKind": "user"},
               {"attribute": "plan", "op": "in", "values": ["enterprise"], "negate": False, "contextKind": "user"}]

    def flag(key: str, rules: List[dict]) -> dict:
        return {"key": key, "version": 1, "on": True, "variations": [True, False], "offVariation": 1,
                "fallthrough": {"variation": 1}, "rules": rules, "targets": [], "prerequisites": [],
                "salt": key}

    rule = {"id": "us-enterprise", "clauses": clauses, "variation": 0}
    flags = {"onoff": flag("onoff", []), "rule": flag("rule", [rule])}
    for i in range(N_FLAGS):
        flags[f"flag-{i}"] = flag(f"flag-{i}", [rule])
    path = os.path.join(tempfile.mkdtemp(), "ld.json")
    with open(path, "w") as f:
        json.dump({"flags": flags}, f)
    client = ldclient.LDClient(Config("bench-key", update_processor_class=Files.new_data_source(paths=[path]),
                                      send_events=False, diagnostic_opt_out=True), start_wait=10)
    assert client.is_initialized()
    ctx_dict = {"kind": "user", **CTX}
    pre = Context.from_dict(ctx_dict)
    user = Context.from_dict({"kind": "user", "key": "user-42"})
    assert client.variation("rule", pre, False) is True
    assert client.variation("onoff", user, True) is False
    out = {
        "on/off flag": timed(lambda: client.variation("onoff", user, True), 50_000),
        "2-clause rule, dict context": timed(
            lambda: client.variation("rule", Context.from_dict(ctx_dict), False), 50_000),
        "2-clause rule, prebuilt context": timed(lambda: client.variation("rule", pre, False), 50_000),
        "random flag of 10,000": timed_cycle(lambda k: client.variation(k, Context.from_dict(ctx_dict), False),
                                             50_000),
    }
    client.close()
    return out


# ------------------------------------------------------------------- Unleash


def unleash_cases() -> Dict[str, float]:
    from UnleashClient import UnleashClient
    from UnleashClient.cache import FileCache

    constraints = [{"contextName": "country", "operator": "IN", "values": ["US", "CA"]},
                   {"contextName": "plan", "operator": "IN", "values": ["enterprise"]}]

    def feature(name: str, cons: List[dict]) -> dict:
        return {"name": name, "enabled": True, "strategies": [
            {"name": "default", "parameters": {}, "constraints": cons}]}

    features = [feature("onoff", []), feature("rule", constraints)]
    features += [feature(f"flag-{i}", constraints) for i in range(N_FLAGS)]
    cache = FileCache("flagstream-bench", directory=tempfile.mkdtemp())
    cache.bootstrap_from_dict({"version": 1, "features": features})
    client = UnleashClient(url="http://127.0.0.1:9", app_name="flagstream-bench", disable_metrics=True,
                           disable_registration=True, cache=cache, refresh_interval=3600)
    client.initialize_client(fetch_toggles=False)
    uctx = {"userId": "user-42", "properties": {"country": "US", "plan": "enterprise"}}
    assert client.is_enabled("rule", uctx) is True
    assert client.is_enabled("flag-7", uctx) is True
    user = {"userId": "user-42"}
    out = {
        "on/off flag": timed(lambda: client.is_enabled("onoff", user), 50_000),
        # Unleash takes a dict context only.
        "2-clause rule, dict context": timed(lambda: client.is_enabled("rule", uctx), 50_000),
        "2-clause rule, prebuilt context": float("nan"),
        "random flag of 10,000": timed_cycle(lambda k: client.is_enabled(k, uctx), 50_000),
    }
    client.destroy()
    return out


# --------------------------------------------------------------------- flagd


def flagd_cases() -> Dict[str, float]:
    from openfeature import api
    from openfeature.contrib.provider.flagd import FlagdProvider
    from openfeature.contrib.provider.flagd.config import ResolverType
    from openfeature.evaluation_context import EvaluationContext

    # The same flags as flagd flag definitions: the 2-clause rule as
    # json-logic targeting, "off" (false) when it does not match.
    targeting = {"if": [{"and": [{"in": [{"var": "country"}, ["US", "CA"]]},
                                 {"in": [{"var": "plan"}, ["enterprise"]]}]}, "on", "off"]}

    def flag(rule: bool) -> dict:
        f = {"state": "ENABLED", "variants": {"on": True, "off": False}, "defaultVariant": "off"}
        if rule:
            f["targeting"] = targeting
        return f

    flags = {"onoff": flag(False), "rule": flag(True)}
    for i in range(N_FLAGS):
        flags[f"flag-{i}"] = flag(True)
    path = os.path.join(tempfile.mkdtemp(), "flagd.json")
    with open(path, "w") as f:
        json.dump({"flags": flags}, f)
    # In-process resolver with an offline flag source: the provider reads
    # the file (FILE resolver), no flagd server, no network.
    provider = FlagdProvider(resolver_type=ResolverType.IN_PROCESS, offline_flag_source_path=path)
    api.set_provider_and_wait(provider)
    client = api.get_client()
    attrs = {"country": "US", "plan": "enterprise"}
    pre = EvaluationContext("user-42", attrs)
    user = EvaluationContext("user-42")
    # The same answers as flagstream for the bench contexts (and a
    # non-matching one) before timing.
    d = client.get_boolean_details("rule", False, pre)
    assert d.value is True and d.error_code is None and d.variant == "on", d
    assert client.get_boolean_value("onoff", True, user) is False
    assert client.get_boolean_value("rule", False, EvaluationContext("user-42", attrs)) is True
    assert client.get_boolean_value("rule", True, EvaluationContext("user-42", {**attrs, "country": "FR"})) is False
    assert all(client.get_boolean_value(k, False, pre) is True for k in KEYS)
    out = {
        "on/off flag": timed(lambda: client.get_boolean_value("onoff", True, user), 10_000),
        "2-clause rule, dict context": timed(
            lambda: client.get_boolean_value("rule", False, EvaluationContext("user-42", attrs)), 10_000),
        "2-clause rule, prebuilt context": timed(lambda: client.get_boolean_value("rule", False, pre), 10_000),
        "random flag of 10,000": timed_cycle(
            lambda k: client.get_boolean_value(k, False, EvaluationContext("user-42", attrs)), 10_000),
    }
    api.shutdown()
    return out


def main() -> None:
    results = {"flagstream": flagstream_cases(), "launchdarkly-server-sdk": launchdarkly_cases(),
               "UnleashClient": unleash_cases(), "openfeature-provider-flagd": flagd_cases()}
    fs = results["flagstream"]
    cases = [k for k in fs if not k.startswith("_")]
    from importlib.metadata import version

    pins = ", ".join(f"{p} {version(p)}" for p in ("launchdarkly-server-sdk", "UnleashClient",
                                                   "openfeature-sdk", "openfeature-provider-flagd"))
    print(f"Python {sys.version.split()[0]}, ns per evaluation (best of 5); {pins}\n")
    print("| case | " + " | ".join(results) + " | flagstream vs fastest peer | flagstream vs flagd |")
    print("|---|" + "---:|" * (len(results) + 2))
    for case in cases:
        peers = [results[p][case] for p in results if p != "flagstream" and results[p][case] == results[p][case]]
        ratio = min(peers) / fs[case] if peers else float("nan")
        vs_flagd = results["openfeature-provider-flagd"][case] / fs[case]
        cells = " | ".join("n/a" if r[case] != r[case] else f"{r[case]:,.0f}" for r in results.values())
        print(f"| {case} | {cells} | {ratio:.1f}x | {vs_flagd:.0f}x |")
    print(f"\nprebuilt context, 100,000 evaluations: sys.getallocatedblocks() grew by {fs['_blocks']}, "
          f"tracemalloc counted {fs['_tracemalloc']} new live allocations")


if __name__ == "__main__":
    main()
