// A static page that shows flags from a flagstream relay through
// OpenFeature's OFREP web provider, the way a browser app would use it.
// Its settings come from the page's address:
//   ?relay=http://127.0.0.1:8081   the relay's OFREP base URL (ofrep-listen)
//   &key=fs_client_...             a client-side key (flagctl key create --client)
//   &flags=theme:string,beta-banner:boolean   the flags to show, with their types
//   &user=browser-user              the context's targetingKey
// Bundled by serve.mjs (esbuild); the browser test drives it and reads
// `window.flagstreamDemo`.
import { OpenFeature, ProviderEvents } from "@openfeature/web-sdk";
import { OFREPWebProvider } from "@openfeature/ofrep-web-provider";

const q = new URLSearchParams(location.search);
const flags = (q.get("flags") || "theme:string,beta-banner:boolean")
  .split(",")
  .map((f) => f.split(":"))
  .map(([key, type]) => ({ key, type: type || "string" }));
const state = { ready: false, error: null, changes: 0, values: {}, details: {} };
window.flagstreamDemo = state;

const defaults = { boolean: false, string: "", number: 0, object: {} };

function render() {
  const client = OpenFeature.getClient();
  const list = document.getElementById("flags");
  list.replaceChildren();
  for (const { key, type } of flags) {
    const get = {
      boolean: (k, d) => client.getBooleanDetails(k, d),
      string: (k, d) => client.getStringDetails(k, d),
      number: (k, d) => client.getNumberDetails(k, d),
      object: (k, d) => client.getObjectDetails(k, d),
    }[type];
    const d = get(key, defaults[type]);
    state.values[key] = d.value;
    state.details[key] = { value: d.value, variant: d.variant, reason: d.reason, errorCode: d.errorCode };
    const li = document.createElement("li");
    li.id = `flag-${key}`;
    li.textContent = `${key}: ${JSON.stringify(d.value)}${d.errorCode ? ` (${d.errorCode})` : ""}`;
    list.append(li);
  }
}

OpenFeature.addHandler(ProviderEvents.ConfigurationChanged, () => {
  state.changes += 1;
  render();
});
OpenFeature.addHandler(ProviderEvents.Error, (e) => {
  state.error = (e && (e.message || e.errorCode)) || "provider error";
  render();
});

const provider = new OFREPWebProvider({
  baseUrl: q.get("relay"),
  headers: [["Authorization", `Bearer ${q.get("key")}`]],
  // Always what the relay says now (the default would start from
  // localStorage, which a test must not depend on).
  cacheMode: "disabled",
});
await OpenFeature.setContext({ targetingKey: q.get("user") || "browser-user" });
try {
  await OpenFeature.setProviderAndWait(provider);
  state.ready = true;
} catch (e) {
  state.error = String((e && e.message) || e);
}
render();
