// OpenFeature's OFREP server provider for Node (@openfeature/ofrep-provider
// with @openfeature/server-sdk) against running relays: one flag per
// evaluation, every value type, a missing flag, a type mismatch, and the
// back-off after a 429; prints the results as one JSON object on stdout.
// tests/tests/bindings/ofrep_clients.rs starts the relays, runs this and
// asserts on the result.
//
// Input: one JSON argument
//   { "ofrep": "http://127.0.0.1:P", "key": "fs_sdk_...",
//     "limited_ofrep": "http://127.0.0.1:Q", "limited_key": "fs_sdk_..." }
// (the limited relay allows 1 request a second per key).
import { OpenFeature } from "@openfeature/server-sdk";
import { OFREPProvider } from "@openfeature/ofrep-provider";

const cfg = JSON.parse(process.argv[2]);
const provider = (baseUrl, key) => new OFREPProvider({ baseUrl, headers: [["Authorization", `Bearer ${key}`]] });
await OpenFeature.setProviderAndWait(provider(cfg.ofrep, cfg.key));
await OpenFeature.setProviderAndWait("limited", provider(cfg.limited_ofrep, cfg.limited_key));

const pick = (d) => ({ value: d.value, variant: d.variant, reason: d.reason, errorCode: d.errorCode ?? null });
const client = OpenFeature.getClient();
const pro = { targetingKey: "user-1", plan: "pro" };
const out = {
  bool: pick(await client.getBooleanDetails("beta-banner", false, pro)),
  string: pick(await client.getStringDetails("theme", "none", { targetingKey: "user-42" })),
  int: pick(await client.getNumberDetails("max-upload-mb", 0, pro)),
  float: pick(await client.getNumberDetails("ratio", 0, pro)),
  object: pick(await client.getObjectDetails("search-ranking", {}, pro)),
  missing: pick(await client.getBooleanDetails("no-such-flag", true, pro)),
  mismatch: pick(await client.getBooleanDetails("theme", true, pro)),
};

// Over the limited relay's rate: the provider pauses until Retry-After.
const limited = OpenFeature.getClient("limited");
out.limited = [];
for (let i = 0; i < 6; i++) {
  const d = await limited.getStringDetails("theme", "fallback", pro);
  out.limited.push({ value: d.value, errorCode: d.errorCode ?? null, message: d.errorMessage ?? null });
}
// Back after the pause: a bounded wait on the provider's clock (it keeps
// the pause itself; there is no event to await).
const deadline = Date.now() + 15000;
out.resumed = false;
while (Date.now() < deadline) {
  const d = await limited.getStringDetails("theme", "fallback", pro);
  if (!d.errorCode) {
    out.resumed = true;
    break;
  }
  await new Promise((r) => setTimeout(r, 250));
}
await OpenFeature.close();
console.log(JSON.stringify(out));
