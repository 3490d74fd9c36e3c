// Drives the relay's status page in headless Chromium (Debian's package,
// through playwright-core) the way an operator would, and prints what the
// page showed as one JSON object on stdout; tests/tests/status_page.rs
// starts the relay tree, runs this and asserts on the result.
//
// Input: one JSON argument
//   { "url": "http://127.0.0.1:PORT/status", "token": "...",
//     "scoped_token": "...", "nodes": 2, "flags": ["kill-switch", ...],
//     "screenshot": "/path/status.png" }
// The page is logged in first with `scoped_token` (the relay refuses it:
// the page must show the refusal), then with `token`; the script then
// waits until the tree shows `nodes` relays and every flag in `flags` has
// a row, and takes a full-page screenshot.
import { chromium } from "playwright-core";

const cfg = JSON.parse(process.argv[2]);
const executablePath = process.env.FLAGSTREAM_CHROMIUM || "/usr/bin/chromium";
// Waits are on page state; this bounds each so a broken page fails the
// run instead of hanging it (the page polls every 2 s).
const WAIT_MS = 30000;

const browser = await chromium.launch({
  executablePath,
  // Without the background-networking flags Chromium keeps trying to
  // reach Google's hosts, which a closed network refuses.
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
const out = { console_errors: [], page_errors: [], requests_elsewhere: [], failed_responses: [] };
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("console", (m) => {
    // Failed loads are listed with their URLs in failed_responses.
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) out.console_errors.push(m.text());
  });
  page.on("response", (r) => {
    if (r.status() >= 400) out.failed_responses.push(`${r.status()} ${new URL(r.url()).pathname}`);
  });
  page.on("pageerror", (e) => out.page_errors.push(String(e)));
  const origin = new URL(cfg.url).origin;
  page.on("request", (r) => {
    if (new URL(r.url()).origin !== origin) out.requests_elsewhere.push(r.url());
  });

  // Where a token could be kept: both web storages, cookies, the address
  // and the form field.
  const storage = async () => ({
    ...(await page.evaluate(() => ({
      session: Object.fromEntries(Object.entries(sessionStorage)),
      local: Object.fromEntries(Object.entries(localStorage)),
      url: location.href,
      field: document.getElementById("token").value,
    }))),
    cookies: (await page.context().cookies()).length,
  });

  const resp = await page.goto(cfg.url);
  out.page_status = resp.status();
  out.csp = resp.headers()["content-security-policy"] || null;
  await page.locator("#login").waitFor({ state: "visible", timeout: WAIT_MS });

  // A token scoped to one environment: refused, and the page says why.
  await page.fill("#token", cfg.scoped_token);
  await page.click("#login button[type=submit]");
  await page.waitForFunction(() => document.getElementById("login-error").textContent.length > 0, null, {
    timeout: WAIT_MS,
  });
  out.login_error = await page.textContent("#login-error");
  out.stored_after_refusal = await storage();

  await page.fill("#token", cfg.token);
  await page.click("#login button[type=submit]");
  await page.waitForFunction(
    ({ nodes, flags }) => {
      if (!document.body.dataset.loaded) return false;
      if (document.querySelectorAll("#tree tbody tr").length !== nodes) return false;
      return flags.every((f) => document.querySelector(`table.flags tr[data-flag="${f}"]`));
    },
    { nodes: cfg.nodes, flags: cfg.flags },
    { timeout: WAIT_MS, polling: 200 },
  );
  out.stored_after_login = await storage();
  out.login_visible = await page.isVisible("#login");
  out.summary = await page.textContent("#summary");
  out.tree = await page.$$eval("#tree tbody tr", (rows) =>
    rows.map((r) => ({ id: r.dataset.nodeId, role: r.dataset.role, text: r.innerText })),
  );
  out.environments = await page.$$eval("section[data-environment]", (ss) =>
    ss.map((s) => ({
      name: s.dataset.environment,
      text: s.innerText,
      revisions: [...s.querySelectorAll("table.propagation tr")].slice(1).map((r) => Number(r.cells[0].textContent)),
      flags: [...s.querySelectorAll("table.flags tr[data-flag]")].map((r) => ({
        flag: r.dataset.flag,
        mismatch: r.dataset.mismatch === "true",
        text: r.innerText,
        cells: [...r.cells].map((c) => c.textContent),
      })),
    })),
  );
  out.images = await page.evaluate(() => document.querySelectorAll("img").length);
  out.title = await page.title();
  await page.screenshot({ path: cfg.screenshot, fullPage: true });

  // Forgetting the token returns to the login form and clears storage.
  await page.click("#forget");
  await page.locator("#login").waitFor({ state: "visible", timeout: WAIT_MS });
  out.stored_after_forget = await storage();
} finally {
  await browser.close();
}
console.log(JSON.stringify(out));
