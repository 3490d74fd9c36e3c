"""OpenFeature's OFREP provider for Python (openfeature-provider-ofrep with
openfeature-sdk) against running relays: one flag per evaluation, every
value type, a missing flag, a type mismatch, and the back-off after a 429;
prints the results as one JSON object on stdout.
tests/tests/bindings/ofrep_clients.rs starts the relays, runs this and
asserts on the result.

Input: one JSON argument
  {"ofrep": "http://127.0.0.1:P", "key": "fs_sdk_...",
   "limited_ofrep": "http://127.0.0.1:Q", "limited_key": "fs_sdk_..."}
(the limited relay allows 1 request a second per key).
"""

import json
import sys
import time

from openfeature import api
from openfeature.contrib.provider.ofrep import OFREPProvider
from openfeature.evaluation_context import EvaluationContext

cfg = json.loads(sys.argv[1])


def provider(base_url, key):
    return OFREPProvider(base_url, headers_factory=lambda: {"Authorization": f"Bearer {key}"})


def pick(d):
    return {
        "value": d.value,
        "variant": d.variant,
        "reason": str(d.reason.value if hasattr(d.reason, "value") else d.reason) if d.reason else None,
        "errorCode": d.error_code.value if d.error_code else None,
        "message": d.error_message,
    }


api.set_provider(provider(cfg["ofrep"], cfg["key"]))
api.set_provider(provider(cfg["limited_ofrep"], cfg["limited_key"]), domain="limited")
client = api.get_client()
pro = EvaluationContext("user-1", {"plan": "pro"})
out = {
    "bool": pick(client.get_boolean_details("beta-banner", False, pro)),
    "string": pick(client.get_string_details("theme", "none", EvaluationContext("user-42"))),
    "int": pick(client.get_integer_details("max-upload-mb", 0, pro)),
    "float": pick(client.get_float_details("ratio", 0.0, pro)),
    "object": pick(client.get_object_details("search-ranking", {}, pro)),
    "missing": pick(client.get_boolean_details("no-such-flag", True, pro)),
    "mismatch": pick(client.get_boolean_details("theme", True, pro)),
}

limited = api.get_client("limited")
out["limited"] = [pick(limited.get_string_details("theme", "fallback", pro)) for _ in range(6)]
# Back after the pause: a bounded wait on the provider's clock (it keeps
# the pause itself; there is no event to await).
deadline = time.monotonic() + 15
out["resumed"] = False
while time.monotonic() < deadline:
    if limited.get_string_details("theme", "fallback", pro).error_code is None:
        out["resumed"] = True
        break
    time.sleep(0.25)
print(json.dumps(out))
