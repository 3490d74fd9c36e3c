"""What observing evaluations costs through the OpenFeature provider, and
that it costs nothing when off.

Three providers over one client (test data: a bool flag with a 2-clause
rule, the context matching it), evaluated through openfeature-sdk's
client (``get_boolean_value``) and through the provider alone
(``resolve_boolean_details``):

- before: the provider's boolean path as it was before ``on_evaluation``
  existed (copied below: no hook, no metadata); ``before, again`` is a
  second one, timed as a case of its own: its ratio is the noise floor;
- off: ``FlagstreamProvider(client)``, no callback;
- no-op: ``FlagstreamProvider(client, on_evaluation=lambda a: None)``;
- empty hook (reference): ``before`` with an OpenFeature ``Hook()`` that
  does nothing as its provider hook: what the SDK spends on any one hook.

Rounds of every case interleaved in one process; per case the median ns
per evaluation over the rounds, and the median of the per-round ratios to
``before`` (a load change on a shared machine moves every case alike).

Needs only flagstream (a release wheel for meaningful numbers) and
openfeature-sdk on the path:

    PYTHONPATH=<site>:<openfeature-sdk> python3 sdk/python/bench/openfeature_hooks.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import timeit
from typing import Any, Callable, Dict, List, Optional

from openfeature import api
from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import InvalidContextError
from openfeature.flag_evaluation import FlagResolutionDetails
from openfeature.hook import Hook
from openfeature.provider import AbstractProvider, Metadata

import flagstream
from flagstream.openfeature import _ERRORS, FlagstreamProvider, context, reason

QUICK = "--quick" in sys.argv
ROUNDS = 7 if QUICK else 21
NUMBER = 5_000 if QUICK else 20_000


class BeforeProvider(AbstractProvider):
    """The provider's boolean path before on_evaluation (as released)."""

    def __init__(self, client: flagstream.Client) -> None:
        super().__init__()
        self.client = client

    def get_metadata(self) -> Metadata:
        return Metadata(name="flagstream")

    def get_provider_hooks(self) -> List[Any]:
        return []

    def _resolve(self, method: str, key: str, default: Any,
                 ctx: Optional[EvaluationContext]) -> FlagResolutionDetails[Any]:
        try:
            c = context(ctx)
            d = getattr(self.client, method)(key, c, default)
        except ValueError as e:
            raise InvalidContextError(str(e)) from e
        if d.error_kind is not None:
            raise _ERRORS[d.error_kind](d.error_kind)
        return FlagResolutionDetails(
            value=d.value,
            variant=None if d.variation is None else str(d.variation),
            reason=reason(d),
        )

    def resolve_boolean_details(self, flag_key: str, default_value: bool,
                                evaluation_context: Optional[EvaluationContext] = None
                                ) -> FlagResolutionDetails[bool]:
        return self._resolve("bool_detail", flag_key, default_value, evaluation_context)

    def resolve_string_details(self, *a: Any, **k: Any) -> Any:
        raise NotImplementedError

    resolve_integer_details = resolve_float_details = resolve_object_details = resolve_string_details


class EmptyHookProvider(BeforeProvider):
    """``before`` with one provider hook that does nothing."""

    def __init__(self, client: flagstream.Client) -> None:
        super().__init__(client)
        self._hooks = [Hook()]

    def get_provider_hooks(self) -> List[Any]:
        return self._hooks


def main() -> None:
    rule = {"id": "us-enterprise", "clauses": [
        {"attribute": "country", "op": "in", "values": ["US", "CA"]},
        {"attribute": "plan", "op": "in", "values": ["enterprise"]}], "serve": {"variation": 0}}
    client = flagstream.Client.test_data([{"key": "rule", "type": "bool", "variations": [True, False],
                                           "on": True, "off_variation": 1, "rules": [rule],
                                           "fallthrough": {"variation": 1}}])
    ctx = EvaluationContext("user-42", {"country": "US", "plan": "enterprise"})
    observed: List[Dict[str, Any]] = []
    providers = {
        "before": BeforeProvider(client),
        "before, again": BeforeProvider(client),
        "off": FlagstreamProvider(client),
        "no-op": FlagstreamProvider(client, on_evaluation=lambda a: None),
        "empty hook": EmptyHookProvider(client),
    }
    # One domain per provider: the same OpenFeature client code for each.
    cases: Dict[str, Callable[[], object]] = {}
    for name, p in providers.items():
        api.set_provider(p, name)
        of = api.get_client(name)
        assert of.get_boolean_value("rule", False, ctx) is True
        cases[f"OpenFeature get_boolean_value, {name}"] = (
            lambda of=of: of.get_boolean_value("rule", False, ctx))
    for name, p in providers.items():
        if name == "empty hook":
            continue  # the same provider call as before
        assert p.resolve_boolean_details("rule", False, ctx).value is True
        cases[f"provider.resolve_boolean_details, {name}"] = (
            lambda p=p: p.resolve_boolean_details("rule", False, ctx))
    # The observed provider really reports (checked once, off the clock).
    check = FlagstreamProvider(client, on_evaluation=observed.append)
    api.set_provider(check, "check")
    api.get_client("check").get_boolean_value("rule", False, ctx)
    assert observed and observed[0]["feature_flag.result.reason"] == "targeting_match", observed

    times: Dict[str, List[float]] = {k: [] for k in cases}
    names = list(cases)
    for r in range(ROUNDS):
        # A different order each round: no case always runs first.
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            times[k].append(timeit.timeit(cases[k], number=NUMBER) / NUMBER * 1e9)

    print(f"Python {sys.version.split()[0]}, flagstream {flagstream.__version__}; "
          f"{ROUNDS} interleaved rounds of {NUMBER:,} evaluations per case\n")
    print("| case | median ns/eval | min ns/eval | vs before (median of per-round ratios) |")
    print("|---|---:|---:|---:|")
    for k in names:
        path = k.split(", ")[0]
        base = times[f"{path}, before"]
        ratios = [t / b for t, b in zip(times[k], base)]
        print(f"| {k} | {statistics.median(times[k]):,.0f} | {min(times[k]):,.0f} | "
              f"{statistics.median(ratios):.3f} |")
    api.shutdown()


if __name__ == "__main__":
    main()
