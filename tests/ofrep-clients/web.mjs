// OpenFeature's OFREP web provider with @openfeature/web-sdk in headless
// Chromium (Debian's package, through playwright-core) against a running
// relay, from a page on another origin; prints what happened as one JSON
// object on stdout. tests/tests/bindings/ofrep_clients.rs starts the relay,
// runs this and asserts on the result.
//
// Input: one JSON argument
//   { "ofrep": "http://127.0.0.1:P", "relay": "http://127.0.0.1:G",
//     "token": "<admin token>", "flagctl": "/path/flagctl",
//     "client_key": "fs_client_..." }
// Steps: serve the demo page on two origins and let the demo environment
// list the first only (flagctl env cors); load it with the client key and
// read the flags it shows; turn a shown flag off with flagctl and time the
// change reaching the page (SSE event, then a re-fetch); load it from the
// refused origin; load it with a revoked client key.
import { execFileSync } from "node:child_process";
import { chromium } from "playwright-core";
import { build, serve } from "./page/serve.mjs";

const cfg = JSON.parse(process.argv[2]);
const executablePath = process.env.FLAGSTREAM_CHROMIUM || "/usr/bin/chromium";
// Each wait is on page state; this bounds it so a broken run fails
// instead of hanging.
const WAIT_MS = 20000;
const FLAGS = "theme:string,beta-banner:boolean,new-checkout:boolean,max-upload-mb:number";

function flagctl(...args) {
  return execFileSync(
    cfg.flagctl,
    ["--relay", cfg.relay, "--token", cfg.token, "--config", "/nonexistent/flagctl.toml", "-e", "demo", ...args],
    { encoding: "utf8" },
  );
}

const files = await build();
const allowed = await serve(files);
const refused = await serve(files);
flagctl("env", "cors", "demo", "--allow", allowed.origin, "--yes");

const browser = await chromium.launch({
  executablePath,
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
const out = { page_errors: [], ofrep_bodies: [] };

async function open(origin, key) {
  const page = await browser.newPage();
  page.on("pageerror", (e) => out.page_errors.push(String(e)));
  page.on("response", async (r) => {
    if (r.url().startsWith(cfg.ofrep) && r.request().method() === "POST") {
      try {
        out.ofrep_bodies.push(await r.text());
      } catch {
        // A 304 or a refused response has no body to read.
      }
    }
  });
  const q = new URLSearchParams({ relay: cfg.ofrep, key, flags: FLAGS, user: "browser-user" });
  await page.goto(`${origin}/?${q}`);
  await page.waitForFunction(() => window.flagstreamDemo && (window.flagstreamDemo.ready || window.flagstreamDemo.error), null, {
    timeout: WAIT_MS,
  });
  return page;
}

const state = (page) => page.evaluate(() => JSON.parse(JSON.stringify(window.flagstreamDemo)));

try {
  // The demo flags, shown by a page from an allowed origin.
  const page = await open(allowed.origin, cfg.client_key);
  out.initial = await state(page);
  out.shown_text = await page.locator("#flags").innerText();

  // A change made with flagctl reaches the open page: the relay's SSE
  // event, then the provider's re-fetch.
  const started = Date.now();
  flagctl("flag", "off", "theme", "--yes");
  await page.waitForFunction(() => window.flagstreamDemo.values.theme === "light", null, { timeout: WAIT_MS });
  out.change_ms = Date.now() - started;
  // Hidden from clients: the page's next answer no longer has it.
  flagctl("flag", "client-visible", "max-upload-mb", "false", "--yes");
  await page.waitForFunction(
    () => window.flagstreamDemo.details["max-upload-mb"].errorCode === "FLAG_NOT_FOUND",
    null,
    { timeout: WAIT_MS },
  );
  out.after_change = await state(page);
  await page.close();

  // From an origin the environment does not list: the browser refuses
  // the relay's answers to the page.
  const other = await open(refused.origin, cfg.client_key);
  out.refused_origin = await state(other);
  await other.close();

  // A revoked client key.
  const made = JSON.parse(flagctl("key", "create", "--client", "-o", "json"));
  flagctl("key", "revoke", made.id, "--yes");
  const revoked = await open(allowed.origin, made.secret);
  out.revoked_key = await state(revoked);
  await revoked.close();
} finally {
  await browser.close();
  allowed.server.close();
  refused.server.close();
}
console.log(JSON.stringify(out));
