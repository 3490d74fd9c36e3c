"""The OpenFeature provider through openfeature-sdk: values, variants,
reasons and error codes as the Rust provider maps them."""

from __future__ import annotations

from openfeature import api
from openfeature.evaluation_context import EvaluationContext
from openfeature.flag_evaluation import ErrorCode, Reason

import flagstream
from conftest import STEP
from flagstream.openfeature import FlagstreamProvider, context

FLAGS = [
    {"key": "ramp", "type": "bool", "variations": [True, False], "on": True, "off_variation": 1,
     "rules": [{"id": "us", "clauses": [{"attribute": "country", "op": "in", "values": ["US"]}],
                "serve": {"variation": 0}}],
     "fallthrough": {"rollout": {"variations": [{"variation": 0, "weight": 50000},
                                                {"variation": 1, "weight": 50000}]}}},
    {"key": "off", "type": "string", "variations": ["a", "b"], "on": False, "off_variation": 1,
     "fallthrough": {"variation": 0}},
    {"key": "fixed", "type": "int", "variations": [1, 2], "on": True, "off_variation": 0,
     "fallthrough": {"variation": 1}},
    {"key": "obj", "type": "json", "variations": [{"a": 1}, [1, 2]], "on": True, "off_variation": 0,
     "fallthrough": {"variation": 0}},
]


def test_provider_maps_reasons_and_errors() -> None:
    client = flagstream.Client.test_data(FLAGS)
    api.set_provider(FlagstreamProvider(client))
    of = api.get_client()
    us = EvaluationContext("u1", {"country": "US"})
    d = of.get_boolean_details("ramp", False, us)
    assert (d.value, d.variant, d.reason) == (True, "0", Reason.TARGETING_MATCH)
    d = of.get_boolean_details("ramp", False, EvaluationContext("u1", {"country": "FR"}))
    assert d.reason == Reason.SPLIT and d.error_code is None
    d = of.get_string_details("off", "z", us)
    assert (d.value, d.variant, d.reason) == ("b", "1", Reason.DISABLED)
    d = of.get_integer_details("fixed", 0, us)
    assert (d.value, d.reason) == (2, Reason.DEFAULT)
    d = of.get_float_details("fixed", 0.5, us)
    assert (d.value, d.reason) == (2.0, Reason.DEFAULT)
    d = of.get_object_details("obj", {}, us)
    assert d.value == {"a": 1}
    d = of.get_boolean_details("missing", True, us)
    assert (d.value, d.reason, d.error_code) == (True, Reason.ERROR, ErrorCode.FLAG_NOT_FOUND)
    d = of.get_boolean_details("off", True, us)
    assert (d.value, d.error_code) == (True, ErrorCode.TYPE_MISMATCH)
    multi = EvaluationContext("", {"kind": "multi", "user": {"key": "u1", "country": "US"}, "org": {"key": "o"}})
    assert of.get_boolean_value("ramp", False, multi) is True
    too_many = EvaluationContext("u", {f"a{i}": i for i in range(1000)})
    d = of.get_boolean_details("ramp", False, too_many)
    assert d.error_code == ErrorCode.INVALID_CONTEXT, d
    api.shutdown()
    assert client.closed


# Observing evaluations (on_evaluation) ------------------------------------

US = EvaluationContext("u1", {"country": "US"})
FR = EvaluationContext("u1", {"country": "FR"})
BASE = {"feature_flag.provider.name": "flagstream"}


def test_on_evaluation_reports_each_evaluation_with_the_otel_attribute_names() -> None:
    client = flagstream.Client.test_data(FLAGS)
    seen: list = []
    provider = FlagstreamProvider(client, on_evaluation=seen.append)
    assert len(provider.get_provider_hooks()) == 1
    api.set_provider(provider)
    of = api.get_client()
    # Test data comes from no store: an empty epoch, revision 0.
    assert client.epoch() == ""
    version = ":0"

    def one() -> dict:
        assert len(seen) == 1, seen
        return seen.pop()

    d = of.get_boolean_details("ramp", False, US)
    assert (d.value, d.variant, d.reason) == (True, "0", Reason.TARGETING_MATCH)
    assert d.flag_metadata == {"feature_flag.version": version}, "any hook can read the version"
    assert one() == {"feature_flag.key": "ramp", **BASE, "feature_flag.result.variant": "0",
                     "feature_flag.result.reason": "targeting_match", "feature_flag.version": version}
    d = of.get_boolean_details("ramp", False, FR)
    split = str(client.bool_detail("ramp", context(FR), False).variation)
    assert (d.reason, d.variant) == (Reason.SPLIT, split)
    assert one() == {"feature_flag.key": "ramp", **BASE, "feature_flag.result.variant": split,
                     "feature_flag.result.reason": "split", "feature_flag.version": version}
    assert of.get_integer_value("fixed", 0, US) == 2
    assert one() == {"feature_flag.key": "fixed", **BASE, "feature_flag.result.variant": "1",
                     "feature_flag.result.reason": "default", "feature_flag.version": version}
    assert of.get_string_value("off", "z", US) == "b"
    assert one() == {"feature_flag.key": "off", **BASE, "feature_flag.result.variant": "1",
                     "feature_flag.result.reason": "disabled", "feature_flag.version": version}
    # Errors: no variant, reason error, the error code; the version of the
    # data that had no such flag (or not of that type).
    d = of.get_boolean_details("missing", True, US)
    assert (d.value, d.error_code) == (True, ErrorCode.FLAG_NOT_FOUND)
    assert one() == {"feature_flag.key": "missing", **BASE, "feature_flag.result.reason": "error",
                     "error.type": "flag_not_found", "feature_flag.version": version}
    d = of.get_boolean_details("off", True, US)
    assert (d.value, d.error_code) == (True, ErrorCode.TYPE_MISMATCH)
    assert one() == {"feature_flag.key": "off", **BASE, "feature_flag.result.reason": "error",
                     "error.type": "type_mismatch", "feature_flag.version": version}
    # A context the client refuses: nothing was evaluated, so no version.
    too_many = EvaluationContext("u", {f"a{i}": i for i in range(1000)})
    assert of.get_boolean_details("ramp", False, too_many).error_code == ErrorCode.INVALID_CONTEXT
    assert one() == {"feature_flag.key": "ramp", **BASE, "feature_flag.result.reason": "error",
                     "error.type": "invalid_context"}
    assert "u1" not in repr(seen), "the targeting key is never reported"
    api.shutdown()


def test_without_on_evaluation_no_hook_and_no_metadata() -> None:
    client = flagstream.Client.test_data(FLAGS)
    provider = FlagstreamProvider(client)
    assert provider.get_provider_hooks() == []
    r = provider.resolve_boolean_details("ramp", False, US)
    assert (r.value, r.variant, r.flag_metadata) == (True, "0", {})
    api.set_provider(provider)
    d = api.get_client().get_boolean_details("ramp", False, US)
    assert (d.value, d.reason, d.flag_metadata) == (True, Reason.TARGETING_MATCH, {})
    api.shutdown()


def test_a_client_without_data_reports_no_version() -> None:
    client = flagstream.Client(endpoints=["http://127.0.0.1:9"], sdk_key="sdk-none")
    seen: list = []
    api.set_provider(FlagstreamProvider(client, on_evaluation=seen.append))
    assert client.epoch() == ""
    d = api.get_client().get_boolean_details("ramp", True, US)
    assert (d.value, d.error_code) == (True, ErrorCode.PROVIDER_NOT_READY)
    assert seen == [{"feature_flag.key": "ramp", **BASE, "feature_flag.result.reason": "error",
                     "error.type": "provider_not_ready"}]
    api.shutdown()


def test_a_raising_callback_changes_no_result_and_is_logged_once(caplog) -> None:
    calls = []

    def boom(attributes: dict) -> None:
        calls.append(attributes)
        raise RuntimeError("observer down")

    results = []
    for on_evaluation in (None, boom):
        api.set_provider(FlagstreamProvider(flagstream.Client.test_data(FLAGS), on_evaluation=on_evaluation))
        of = api.get_client()
        results.append([
            of.get_boolean_details("ramp", False, US),
            of.get_string_details("off", "z", US),
            of.get_boolean_details("missing", True, US),
            of.get_boolean_details("off", True, US),
        ])
        api.shutdown()
    plain, observed = results
    assert len(calls) == 4, "called for every evaluation despite raising"
    for a, b in zip(plain, observed):
        assert (a.value, a.variant, a.reason, a.error_code) == (b.value, b.variant, b.reason, b.error_code)
    warned = [r for r in caplog.records if "on_evaluation callback raised" in r.getMessage()]
    assert len(warned) == 1 and warned[0].name == "flagstream", caplog.records
    assert warned[0].exc_info is not None and "observer down" in str(warned[0].exc_info[1])


def test_the_version_is_the_relays_epoch_and_revision(relays) -> None:
    a = relays("a")
    with flagstream.Client(endpoints=[a.url], sdk_key=a.sdk_key) as c:
        assert c.wait_ready(STEP), c.status()
        seen: list = []
        api.set_provider(FlagstreamProvider(c, on_evaluation=seen.append))
        epoch = c.epoch()
        assert epoch != "", "a relay's data has an epoch"
        d = api.get_client().get_boolean_details("new-checkout", False,
                                                 EvaluationContext("user-42", {"country": "US", "plan": "enterprise"}))
        version = f"{epoch}:{c.status().revision}"
        assert (d.value, d.flag_metadata) == (True, {"feature_flag.version": version})
        assert seen == [{"feature_flag.key": "new-checkout", **BASE, "feature_flag.result.variant": "0",
                         "feature_flag.result.reason": "targeting_match", "feature_flag.version": version}]
        api.shutdown()
