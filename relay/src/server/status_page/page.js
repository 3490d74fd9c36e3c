// The status page: asks for a read token (kept in sessionStorage only),
// then polls /status.json every 2 seconds. Everything is rendered with
// textContent: reported names and flag values are never parsed as HTML.
"use strict";

const KEY = "flagstream-status-token";
const POLL_MS = 2000;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}

function num(v) { return el("td", v, "num"); }

function duration(ms) {
  const s = Math.floor(ms / 1000);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
}

function mib(bytes) { return bytes ? (bytes / 1048576).toFixed(1) + " MiB" : "-"; }

// Nodes in tree order: each root, then its children depth first.
function ordered(nodes) {
  const ids = new Set(nodes.map((n) => n.id));
  const children = new Map();
  const roots = [];
  for (const n of nodes) {
    if (n.parent_id && ids.has(n.parent_id)) {
      if (!children.has(n.parent_id)) children.set(n.parent_id, []);
      children.get(n.parent_id).push(n);
    } else {
      roots.push(n);
    }
  }
  const out = [];
  const shown = new Set();
  const walk = (n, depth) => {
    if (shown.has(n.id)) return;
    shown.add(n.id);
    out.push([n, depth]);
    for (const c of children.get(n.id) || []) walk(c, depth + 1);
  };
  for (const r of roots) walk(r, 0);
  // Parents that form a circle (merged from different reports): shown as
  // roots rather than not at all.
  for (const n of nodes) walk(n, 0);
  return out;
}

function renderTree(data) {
  const body = document.querySelector("#tree tbody");
  body.replaceChildren();
  for (const [n, depth] of ordered(data.tree)) {
    const name = el("td", (depth ? "  ".repeat(depth - 1) + "└─ " : "") + n.name, "tree-name");
    const envs = el("td");
    for (const e of n.environments) {
      const lag = e.lag === null ? "other epoch" : "lag " + e.lag;
      const span = el("span", `${e.name} r${e.revision} (${lag}, ${duration(e.staleness_ms)}, ${e.subscribers} SDKs)`,
        e.lag ? "warn" : "");
      envs.appendChild(span);
      envs.appendChild(document.createElement("br"));
    }
    const tr = row([name, el("td", n.role), el("td", n.version), num(duration(n.uptime_ms)), num(mib(n.rss_bytes)),
      num(n.streams), envs]);
    tr.dataset.nodeId = n.id;
    tr.dataset.role = n.role;
    body.appendChild(tr);
  }
  const omitted = document.getElementById("tree-omitted");
  omitted.hidden = !data.tree_omitted;
  omitted.textContent = data.tree_omitted ? data.tree_omitted + " relays not shown (over the bound)" : "";
}

function renderEnvironment(env, now) {
  const s = el("section");
  s.dataset.environment = env.name;
  const h = el("h2", "Environment " + env.name);
  s.appendChild(h);
  s.appendChild(el("p", `head revision ${env.head_revision}, ${env.subscribers} SDKs here, revision drift in the tree ${env.drift}`,
    env.drift ? "warn" : "note"));

  s.appendChild(el("h3", "Propagation of the latest revisions"));
  const prop = el("table");
  prop.className = "propagation";
  prop.appendChild(row(["Revision", "Committed", "Acked", "p50", "p99", "Max", "Relays reporting"].map((t) => el("th", t))));
  for (const r of env.revisions) {
    prop.appendChild(row([num(r.revision), num(r.committed_unix_ms ? duration(now - r.committed_unix_ms) + " ago" : "-"),
      el("td", `${r.acked} / ${r.subscribers}`, r.acked < r.subscribers ? "warn" : "ok"),
      num(r.p50_ms + " ms"), num(r.p99_ms + " ms"), num(r.max_ms + " ms"), num(`${r.relays_reporting} / ${r.relays_total}`)]));
  }
  s.appendChild(prop);

  s.appendChild(el("h3", "Flags with fallbacks or default mismatches (last day)"));
  if (!env.flags.length) {
    s.appendChild(el("p", "None.", "ok"));
    return s;
  }
  const flags = el("table");
  flags.className = "flags";
  flags.appendChild(row(["Flag", "Missing", "Wrong type", "Malformed", "Not ready", "Defaults passed", "Served most"].map((t) => el("th", t))));
  for (const f of env.flags) {
    const key = el("td", f.key + (f.exists ? "" : " (no such flag)"));
    if (f.default_mismatch) {
      key.appendChild(document.createTextNode(" "));
      key.appendChild(el("span", "DEFAULT MISMATCH", "warn"));
    }
    const defaults = el("td");
    for (const d of f.defaults) {
      defaults.appendChild(el("code", d.json, d.mismatch ? "bad" : ""));
      defaults.appendChild(document.createTextNode(" "));
    }
    const fb = f.fallbacks_day;
    const tr = row([key, num(fb.missing), num(fb.wrong_type), num(fb.malformed), num(fb.not_ready), defaults,
      el("td", f.served_most === null ? "-" : f.served_most)]);
    tr.dataset.flag = f.key;
    tr.dataset.mismatch = String(f.default_mismatch);
    flags.appendChild(tr);
  }
  s.appendChild(flags);
  if (env.flags_omitted) s.appendChild(el("p", env.flags_omitted + " more flags not shown", "note"));
  return s;
}

function render(data) {
  const top = data.tree[0];
  document.getElementById("summary").textContent =
    `${top ? top.name : "relay"} (${top ? top.role : "?"}, version ${data.relay.version}); ` +
    `${data.tree.length} relays in the tree; updated ${new Date(data.now_unix_ms).toISOString()}`;
  renderTree(data);
  const envs = document.getElementById("environments");
  envs.replaceChildren(...data.environments.map((e) => renderEnvironment(e, data.now_unix_ms)));
  document.body.dataset.loaded = String(data.now_unix_ms);
}

let timer = null;
// Bumped whenever polling starts over (log in, forget): a response to an
// older poll is dropped.
let generation = 0;

function showLogin(message) {
  generation += 1;
  if (timer) clearTimeout(timer);
  timer = null;
  document.getElementById("content").hidden = true;
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
}

async function poll(mine) {
  const token = sessionStorage.getItem(KEY);
  if (!token) return showLogin();
  try {
    const resp = await fetch("/status.json", { headers: { Authorization: "Bearer " + token }, cache: "no-store" });
    if (mine !== generation) return;
    if (resp.status === 401 || resp.status === 403) {
      const body = await resp.json().catch(() => ({}));
      if (mine !== generation) return;
      sessionStorage.removeItem(KEY);
      return showLogin(body.error || resp.statusText);
    }
    const body = await resp.json();
    if (mine !== generation) return;
    if (!resp.ok) throw new Error(body.error || resp.statusText);
    document.getElementById("login").hidden = true;
    document.getElementById("content").hidden = false;
    render(body);
  } catch (e) {
    if (mine !== generation) return;
    document.getElementById("summary").textContent = "Cannot load the status: " + e.message;
  }
  // The next poll: the page refreshes every POLL_MS while it is open.
  timer = setTimeout(() => poll(mine), POLL_MS);
}

function start() {
  generation += 1;
  if (timer) clearTimeout(timer);
  timer = null;
  poll(generation);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = document.getElementById("token").value.trim();
    document.getElementById("token").value = "";
    // Ask first whether a token is accepted over this connection (no TLS,
    // another host: it would cross the network in clear): if not, it is
    // never sent, and the page says why.
    const check = await fetch("/status/access", { cache: "no-store" }).catch(() => null);
    const body = check ? await check.json().catch(() => ({})) : {};
    if (body.token_accepted === false) return showLogin(body.reason);
    sessionStorage.setItem(KEY, token);
    start();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    showLogin();
  });
  start();
});
