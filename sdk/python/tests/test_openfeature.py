"""The OpenFeature provider through openfeature-sdk: values, variants,
reasons and error codes as the Rust provider maps them."""

from __future__ import annotations

from openfeature import api
from openfeature.evaluation_context import EvaluationContext
from openfeature.flag_evaluation import ErrorCode, Reason

import flagstream
from flagstream.openfeature import FlagstreamProvider

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
