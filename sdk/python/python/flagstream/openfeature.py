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

Observing evaluations: ``FlagstreamProvider(client, on_evaluation=callback)``
calls ``callback(attributes)`` once per evaluation, on the evaluating
thread, from the provider's own OpenFeature hook (its ``after`` and
``error`` stages), with the OpenTelemetry semantic-convention attribute
names for feature-flag evaluation:

- ``feature_flag.key``: the flag key;
- ``feature_flag.provider.name``: ``"flagstream"``;
- ``feature_flag.result.variant``: the variation index served, as a string
  (absent when none was);
- ``feature_flag.result.reason``: the OpenFeature reason in lower case
  (``targeting_match``, ``split``, ``default``, ``disabled``, ``stale``,
  ``error``);
- ``feature_flag.version``: ``"<epoch>:<revision>"`` of the data evaluated
  (absent when the client has no data yet);
- ``error.type``, on an error: the OpenFeature error code in lower case
  (``flag_not_found``, ``type_mismatch``, ``parse_error``,
  ``provider_not_ready``, ``invalid_context``, ``general``).

The targeting key is never reported (personal data). Each result's
``flag_metadata`` then also holds ``feature_flag.version``, for any other
hook (OpenFeature's OpenTelemetry hooks among them). A callback that raises
does not change the evaluation: the first failure is logged on the
``flagstream`` logger, later ones are ignored. Without ``on_evaluation`` the
provider has no hook and builds no metadata: evaluations take exactly the
path they take without observation.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, Callable, Dict, List, Mapping, Optional, Union

from openfeature.evaluation_context import EvaluationContext
from openfeature.exception import (
    FlagNotFoundError,
    InvalidContextError,
    OpenFeatureError,
    ParseError,
    ProviderNotReadyError,
    TypeMismatchError,
)
from openfeature.flag_evaluation import FlagEvaluationDetails, FlagResolutionDetails, Reason
from openfeature.hook import Hook, HookContext, HookHints
from openfeature.provider import AbstractProvider, Metadata

from . import Client, EvaluationDetail

log = logging.getLogger("flagstream")

# The OpenTelemetry semantic-convention attribute names for feature-flag
# evaluation.
KEY = "feature_flag.key"
PROVIDER_NAME = "feature_flag.provider.name"
VARIANT = "feature_flag.result.variant"
REASON = "feature_flag.result.reason"
VERSION = "feature_flag.version"
ERROR_TYPE = "error.type"

EvaluationCallback = Callable[[Dict[str, Any]], None]

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


# The attribute of a raised OpenFeature error holding the version of the
# data the failed evaluation read (observation on): the error stage gets
# the exception, not the resolution.
_ERROR_VERSION = "_flagstream_version"


class _ObserveHook(Hook):
    """The provider's own hook when ``on_evaluation`` is set: one callback
    call per evaluation, from ``after`` or ``error``."""

    def __init__(self, callback: EvaluationCallback) -> None:
        self._callback = callback
        self._failed = False

    def _call(self, attributes: Dict[str, Any]) -> None:
        try:
            self._callback(attributes)
        except Exception:
            # Never the evaluation's failure; logged once, not counted.
            if not self._failed:
                self._failed = True
                log.warning("flagstream: the OpenFeature on_evaluation callback raised; evaluations "
                            "are unaffected (logged once, later failures are not)", exc_info=True)

    def after(self, hook_context: HookContext, details: FlagEvaluationDetails[Any],
              hints: HookHints) -> None:
        attributes: Dict[str, Any] = {KEY: details.flag_key, PROVIDER_NAME: "flagstream"}
        if details.variant is not None:
            attributes[VARIANT] = details.variant
        if details.reason is not None:
            attributes[REASON] = str(details.reason).lower()
        version = details.flag_metadata.get(VERSION)
        if version is not None:
            attributes[VERSION] = version
        self._call(attributes)

    def error(self, hook_context: HookContext, exception: Exception, hints: HookHints) -> None:
        code = exception.error_code if isinstance(exception, OpenFeatureError) else None
        attributes: Dict[str, Any] = {
            KEY: hook_context.flag_key,
            PROVIDER_NAME: "flagstream",
            REASON: "error",
            ERROR_TYPE: str(code).lower() if code else "general",
        }
        version = getattr(exception, _ERROR_VERSION, None)
        if version is not None:
            attributes[VERSION] = version
        self._call(attributes)


class FlagstreamProvider(AbstractProvider):
    """OpenFeature provider over a :class:`flagstream.Client`.

    ``on_evaluation``: called once per evaluation with its attributes (the
    OpenTelemetry names; see the module's documentation). Without it the
    provider has no hook and adds nothing to an evaluation.
    """

    def __init__(self, client: Client, *, on_evaluation: Optional[EvaluationCallback] = None) -> None:
        super().__init__()
        self.client = client
        self._hooks: List[Hook] = []
        if on_evaluation is not None:
            self._hooks.append(_ObserveHook(on_evaluation))
            # This instance resolves with the version; without a callback
            # the class's _resolve runs, not even a test added to it.
            self._resolve = self._resolve_observed  # type: ignore[method-assign]

    def get_metadata(self) -> Metadata:
        return Metadata(name="flagstream")

    def initialize(self, evaluation_context: EvaluationContext) -> None:
        # Data is waited for by the application (client.wait_ready); an
        # evaluation before it answers PROVIDER_NOT_READY.
        return None

    def shutdown(self) -> None:
        self.client.close()

    def get_provider_hooks(self) -> List[Hook]:
        return self._hooks

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

    def _resolve_observed(self, method: str, key: str, default: Any,
                          ctx: Optional[EvaluationContext]) -> FlagResolutionDetails[Any]:
        """``_resolve`` with observation on: the version of the data
        evaluated in the flag metadata (on an error, on the exception)."""
        try:
            c = context(ctx)
            d = getattr(self.client, method)(key, c, default)
        except ValueError as e:
            raise InvalidContextError(str(e)) from e
        kind = d.error_kind
        # No data, no version. The epoch is read right after the
        # evaluation (a new epoch, a resync from another store, is rare).
        version = None if kind == "NOT_READY" else f"{self.client.epoch()}:{d.revision}"
        if kind is not None:
            err = _ERRORS[kind](kind)
            if version is not None:
                setattr(err, _ERROR_VERSION, version)
            raise err
        metadata: Mapping[str, Any] = {VERSION: version}
        return FlagResolutionDetails(
            value=d.value,
            variant=None if d.variation is None else str(d.variation),
            reason=reason(d),
            flag_metadata=metadata,
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
