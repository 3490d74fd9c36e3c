"""An OpenFeature provider (``openfeature-sdk``) backed by a flagstream
client, with the reasons and error codes of the Rust provider
(``flagstream::openfeature``):

- OFF, PREREQUISITE_FAILED -> DISABLED; TARGET_MATCH, RULE_MATCH ->
  TARGETING_MATCH; a rollout's FALLTHROUGH -> SPLIT, another -> DEFAULT;
  stale data -> STALE.
- FLAG_NOT_FOUND -> FLAG_NOT_FOUND, WRONG_TYPE -> TYPE_MISMATCH,
  MALFORMED_FLAG -> PARSE_ERROR, NOT_READY -> PROVIDER_NOT_READY; a context
  over the limits -> INVALID_CONTEXT.

    from openfeature import api
    from flagstream.openfeature import FlagstreamProvider

    api.set_provider(FlagstreamProvider(client))
    api.get_client().get_boolean_value("new-checkout", False, EvaluationContext("user-42", {"country": "US"}))

The targeting key is the context key; the attribute ``kind`` sets the kind;
``kind: "multi"`` with dict attributes named after kinds is a multi-kind
context.
"""

from __future__ import annotations

import datetime
from typing import Any, Callable, Dict, List, Optional, Union

from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import (
    FlagNotFoundError,
    InvalidContextError,
    ParseError,
    ProviderNotReadyError,
    TypeMismatchError,
)
from openfeature.flag_evaluation import FlagResolutionDetails, Reason
from openfeature.provider import AbstractProvider, Metadata

from . import Client, EvaluationDetail

_ERRORS: Dict[str, Callable[[str], Exception]] = {
    "FLAG_NOT_FOUND": FlagNotFoundError,
    "WRONG_TYPE": TypeMismatchError,
    "MALFORMED_FLAG": ParseError,
    "NOT_READY": ProviderNotReadyError,
}


def reason(d: EvaluationDetail) -> str:
    """The OpenFeature reason of a flagstream result."""
    if d.stale:
        return Reason.STALE
    if d.reason in ("OFF", "PREREQUISITE_FAILED"):
        return Reason.DISABLED
    if d.reason in ("TARGET_MATCH", "RULE_MATCH"):
        return Reason.TARGETING_MATCH
    if d.reason == "FALLTHROUGH":
        return Reason.SPLIT if d.in_rollout else Reason.DEFAULT
    return Reason.ERROR


def _attr(v: Any) -> Any:
    if isinstance(v, datetime.datetime):
        return v.timestamp() * 1000.0  # as the Rust provider: Unix ms
    return v


def context(ctx: Optional[EvaluationContext]) -> Dict[str, Any]:
    """The flagstream context (dict form) of an OpenFeature context."""
    if ctx is None:
        return {"key": ""}
    attrs = dict(ctx.attributes or {})
    if attrs.get("kind") == "multi":
        out: Dict[str, Any] = {"kind": "multi"}
        for name, v in attrs.items():
            if isinstance(v, dict):
                out[name] = {k: _attr(x) for k, x in v.items()}
        if len(out) == 1:
            return {"key": ctx.targeting_key or ""}
        return out
    out = {k: _attr(v) for k, v in attrs.items()}
    out["key"] = ctx.targeting_key or ""
    return out


class FlagstreamProvider(AbstractProvider):
    """OpenFeature provider over a :class:`flagstream.Client`."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self.client = client

    def get_metadata(self) -> Metadata:
        return Metadata(name="flagstream")

    def initialize(self, evaluation_context: EvaluationContext) -> None:
        # Data is waited for by the application (client.wait_ready); an
        # evaluation before it answers PROVIDER_NOT_READY.
        return None

    def shutdown(self) -> None:
        self.client.close()

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

    def resolve_string_details(self, flag_key: str, default_value: str,
                               evaluation_context: Optional[EvaluationContext] = None
                               ) -> FlagResolutionDetails[str]:
        return self._resolve("string_detail", flag_key, default_value, evaluation_context)

    def resolve_integer_details(self, flag_key: str, default_value: int,
                                evaluation_context: Optional[EvaluationContext] = None
                                ) -> FlagResolutionDetails[int]:
        return self._resolve("int_detail", flag_key, default_value, evaluation_context)

    def resolve_float_details(self, flag_key: str, default_value: float,
                              evaluation_context: Optional[EvaluationContext] = None
                              ) -> FlagResolutionDetails[float]:
        return self._resolve("float_detail", flag_key, default_value, evaluation_context)

    def resolve_object_details(self, flag_key: str, default_value: Union[Dict[str, Any], List[Any]],
                               evaluation_context: Optional[EvaluationContext] = None
                               ) -> FlagResolutionDetails[Union[Dict[str, Any], List[Any]]]:
        return self._resolve("json_detail", flag_key, default_value, evaluation_context)
