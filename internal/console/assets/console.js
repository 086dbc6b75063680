// The Fleet console. Every view is a read of the daemon's HTTP API, polled once a second
// while the tab is visible (internal/console/RATIONALE.md, "Why polling, not server-sent
// events?"); every button is one API call. All text from the API goes into the page as
// text (textContent), never as markup: payloads, fail reasons and versions are a guest's.
"use strict";

const POLL_MS = 1000;
// FLEET_POLL_MS spaces the Fleet page's reads: it lists up to --plane-max-instances rows
// (1000) with their iterations, read from the backend, and a plane instance reports at
// most once a poll of its slot anyway.
const FLEET_POLL_MS = 5000;
const TOKEN_KEY = "fleet-token";
const PARKED_LIMIT = 50;

// ---- the API ----

class APIError extends Error {
  constructor(status, kind, message) {
    super(message);
    this.status = status;
    this.kind = kind;
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

// api calls the route and returns its JSON; a 401 shows the sign-in form.
async function api(method, path) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  const resp = await fetch(path, { method, headers, cache: "no-store" });
  let body = null;
  try { body = await resp.json(); } catch (_) { /* an empty or non-JSON answer */ }
  if (!resp.ok) {
    const e = (body && body.error) || {};
    const err = new APIError(resp.status, e.kind || "", e.message || `${method} ${path}: HTTP ${resp.status}`);
    if (resp.status === 401) needToken(err.message);
    throw err;
  }
  return body;
}

const get = (path) => api("GET", path);
const seg = encodeURIComponent;

// ---- the page ----

// el makes an element: attrs are attributes (on* are listeners), children are nodes or
// text (null and false are skipped).
function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    n.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return n;
}

function table(head, rows, empty) {
  if (rows.length === 0) return el("p", { class: "muted" }, empty);
  return el("table", {},
    el("thead", {}, el("tr", {}, head.map(([h, cls]) => el("th", { class: cls }, h)))),
    el("tbody", {}, rows));
}

const num = (v, attrs) => el("td", { class: "num", ...attrs }, v === undefined || v === null ? "–" : v);

function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.round(s)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${Math.round(s / 3600)}h ago`;
  return `${Math.round(s / 86400)}d ago`;
}

// since makes an element that says how long ago iso was ("3s ago", after prefix), kept
// true by tick at every refresh: a view is rebuilt only when its data changes.
function since(tag, iso, attrs, prefix) {
  return el(tag, { ...attrs, title: iso || "", "data-ago": iso || "", "data-prefix": prefix || "" },
    iso ? (prefix || "") + ago(iso) : "–");
}

function tick() {
  for (const n of document.querySelectorAll("[data-ago]")) {
    if (n.dataset.ago) n.textContent = n.dataset.prefix + ago(n.dataset.ago);
  }
}

function ms(v) {
  if (v < 1) return `${v.toFixed(2)} ms`;
  if (v < 1000) return `${Math.round(v)} ms`;
  return `${(v / 1000).toFixed(1)} s`;
}

// show replaces a section's content when what it shows has changed, so that a refresh
// that changes nothing keeps the reader's selection and the buttons under the pointer.
const shown = new Map();
function show(container, data, render) {
  const key = JSON.stringify(data);
  if (shown.get(container) === key) return;
  shown.set(container, key);
  container.replaceChildren(render(data));
}

// say shows text in the header's element id: "status" says how the last refresh went,
// "notice" what the last operator act did.
function say(id, text, isError) {
  const s = document.getElementById(id);
  s.textContent = text;
  s.classList.toggle("error", !!isError);
}

// act runs one operator act, then refreshes at once.
async function act(what, fn) {
  try {
    await fn();
    say("notice", what);
  } catch (e) {
    say("notice", `${what}: ${e.message}`, true);
  }
  refresh();
}

// ---- the views ----

function automationsView(autos) {
  return table(
    [["Type"], ["Version"], ["Mode"], ["Digest"], ["Loaded"], ["Slots", "num"], ["Consumes"], ["Submits"], ["Pools"], [""]],
    autos.map((a) => el("tr", { "data-type": a.type },
      el("td", {}, el("strong", {}, a.type), a.reload_error ? el("div", { class: "error" }, "reload refused: " + a.reload_error) : null),
      el("td", {}, a.version),
      el("td", {}, a.mode),
      el("td", { class: "mono", title: a.digest }, (a.digest || "").replace(/^sha256:/, "").slice(0, 12)),
      since("td", a.loaded_at),
      num(a.slots),
      el("td", {}, a.consumes ? a.consumes.name : "–"),
      el("td", {}, (a.submits || []).map((q) => q.name).join(", ") || "–"),
      el("td", {}, (a.pools || []).map((p) => p.name).join(", ") || "–"),
      el("td", {}, a.paused
        ? el("button", { class: "resume", onclick: () => act(`resumed ${a.type}`, () => api("POST", `/api/v1/automations/${seg(a.type)}/resume`)) }, "Resume")
        : el("button", { class: "pause", onclick: () => act(`paused ${a.type}`, () => api("POST", `/api/v1/automations/${seg(a.type)}/pause`)) }, "Pause")),
    )),
    "No plugin is loaded.");
}

// outcomeText is an iteration's outcome with its death (or the drain's cut) and the
// backoff its task waits, as `fleet-host inspect` says them: "failed, backoff 2s".
function outcomeText(it) {
  let s = it.outcome;
  if (it.death) s += ` (${it.death})`;
  if (it.backoff_ms) s += `, backoff ${ms(it.backoff_ms)}`;
  return s;
}

function slotsView(all) {
  const cards = [];
  for (const { type, slots } of all) {
    for (const s of slots) {
      const recent = table(
        [["#", "num"], ["Task"], ["Outcome"], ["Reason"], ["Duration", "num"], ["Ended"]],
        s.recent.map((it) => el("tr", { "data-iteration": it.iteration, "data-outcome": it.outcome },
          num(it.iteration),
          el("td", { class: "mono" }, it.task_id || "–"),
          el("td", { class: "outcome-" + it.outcome }, outcomeText(it)),
          el("td", { class: "reason" }, it.reason || "–"),
          num(ms(it.duration_ms)),
          since("td", it.ended_at))),
        "No iteration yet.");
      cards.push(el("div", { class: "card slot", "data-slot": s.slot, "data-state": s.state, "data-type": type },
        el("header", {},
          el("strong", { class: "mono" }, s.slot),
          el("span", { class: "badge", "data-state": s.state }, s.state),
          s.state === "working" ? el("span", { class: "mono" }, `#${s.iteration} ${s.phase || ""} ${s.task_id || ""}`) : null,
          since("span", s.since, { class: "muted" }, "since ")),
        el("div", { class: "recent" }, recent)));
    }
  }
  if (cards.length === 0) return el("p", { class: "muted" }, "No slot runs: every plugin has 0 slots.");
  return el("div", { class: "cards" }, cards);
}

// queuesView shows each queue's counts; depth counts the delayed tasks too (what the
// queue's cap bounds), so depth - delayed are claimable now.
function queuesView(queues) {
  const cols = ["depth", "delayed", "in_flight", "parked"];
  return table(
    [["Queue"], ["Depth (ready + delayed)", "num"], ["Delayed", "num"], ["In flight", "num"], ["Parked", "num"]],
    queues.map((q) => el("tr", { "data-queue": q.queue },
      el("td", {}, el("strong", {}, q.queue)),
      cols.map((c) => num(q[c], { "data-col": c })))),
    "No plugin declares a queue.");
}

function parkedView(lists) {
  const out = el("div", {});
  for (const { queue, tasks } of lists) {
    if (tasks.length === 0) continue;
    const q = seg(queue);
    out.append(
      el("h3", {}, `Parked in ${queue} `,
        el("button", {
          class: "requeue-all",
          onclick: () => act(`requeued the parked tasks of ${queue}`, () => api("POST", `/api/v1/queues/${q}/requeue`)),
        }, "Requeue all"),
        " ",
        el("button", {
          class: "danger delete-all",
          onclick: () => confirm(`Delete every parked task of ${queue}?`) &&
            act(`deleted the parked tasks of ${queue}`, () => api("DELETE", `/api/v1/queues/${q}/parked`)),
        }, "Delete all")),
      table(
        [["Task"], ["Attempts", "num"], ["Last error"], ["Parked"], ["Payload"], [""]],
        tasks.map((t) => el("tr", { "data-task": t.id, "data-queue": queue },
          el("td", { class: "mono" }, t.id),
          num(t.attempts),
          el("td", { class: "error" }, t.last_error),
          since("td", t.parked_at),
          el("td", { class: "payload mono" }, JSON.stringify(t.payload)),
          el("td", {},
            el("button", { class: "requeue", onclick: () => act(`requeued ${t.id}`, () => api("POST", `/api/v1/queues/${q}/parked/${seg(t.id)}/requeue`)) }, "Requeue"),
            " ",
            el("button", {
              class: "danger delete",
              onclick: () => confirm(`Delete parked task ${t.id}?`) && act(`deleted ${t.id}`, () => api("DELETE", `/api/v1/queues/${q}/parked/${seg(t.id)}`)),
            }, "Delete")))),
        ""));
  }
  return out;
}

function poolsView(pools) {
  return table(
    [["Pool"], ["Size", "num"], ["Leased", "num"], ["By tag"], [""]],
    pools.map((p) => el("tr", { "data-pool": p.pool },
      el("td", {}, el("strong", {}, p.pool)),
      num(p.size), num(p.leased),
      el("td", { class: "mono" },
        Object.entries(p.by_tag || {}).sort().map(([t, n]) => `${t}: ${n}`).join("  ") || "–",
        p.more_tags ? " (more tags)" : ""),
      el("td", {}, el("button", { class: "items", onclick: () => togglePool(p.pool) }, openPools.has(p.pool) ? "Hide items" : "Items")))),
    "No plugin declares a pool.");
}

function sitesView(sites) {
  return table(
    [["Site"], ["Rate"], ["Sent", "num"], ["Waited", "num"], ["Refused", "num"], ["429/503", "num"], ["Closed until"]],
    sites.map((s) => el("tr", { "data-site": s.site },
      el("td", { class: "mono" }, s.site),
      el("td", {}, s.per_second ? `${s.per_second}/s, burst ${s.burst}` + (s.concurrency ? `, ${s.concurrency} at once` : "") : "not gated"),
      num(s.sent), num(s.waited), num(s.refused), num(s.throttled),
      el("td", { class: "mono" }, s.closed_until || "–"))),
    "No egress policy: requests are not gated.");
}

// The pools whose items are shown, each with its panel: a tag filter (kept across
// refreshes) and the items, read again at each refresh.
const openPools = new Map(); // pool -> {panel, where, list}
const ITEMS_LIMIT = 100;

function togglePool(pool) {
  if (openPools.has(pool)) {
    openPools.get(pool).panel.remove();
    openPools.delete(pool);
  } else {
    const where = el("input", { name: "where", placeholder: "tag=value, tag=value", size: 30 });
    const list = el("div", {});
    const panel = el("div", { class: "pool-items", "data-pool": pool },
      el("h3", {}, `Items of ${pool}`),
      el("form", { class: "lookup", onsubmit: (ev) => { ev.preventDefault(); shown.delete(list); refresh(); } },
        el("label", {}, "where ", where), el("button", { type: "submit" }, "Filter")),
      list);
    openPools.set(pool, { panel, where, list });
    section("pools", "pool-panels").append(panel);
  }
  shown.delete(section("pools"));
  refresh();
}

function poolItemsPath(pool, where) {
  const q = new URLSearchParams({ limit: ITEMS_LIMIT });
  for (const w of where.split(",").map((x) => x.trim()).filter(Boolean)) q.append("where", w);
  return `/api/v1/pools/${seg(pool)}/items?${q}`;
}

// ofLimit is n, or n/limit when the item has that limit (a pool item's health).
function ofLimit(n, limit) {
  return limit ? `${n}/${limit}` : String(n);
}

function poolItemsView({ items, more }) {
  const rows = items.map((it) => el("tr", { "data-item": it.id },
    el("td", { class: "mono" }, it.id),
    el("td", { class: "mono" }, Object.entries(it.tags || {}).sort().map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ")),
    el("td", { class: "payload mono" }, JSON.stringify(it.payload)),
    el("td", {}, it.lease ? el("span", { title: it.lease.until }, `${it.lease.holder}, until ${new Date(it.lease.until).toLocaleTimeString()}`) : "–"),
    el("td", { title: it.expires_at || "" }, it.expires_at ? new Date(it.expires_at).toLocaleString() : "–"),
    num(ofLimit(it.score || 0, it.max_error_score)),
    num(ofLimit(it.uses || 0, it.max_uses)),
    since("td", it.created_at)));
  return el("div", {},
    table([["Item"], ["Tags"], ["Payload"], ["Leased by"], ["Expires"], ["Score", "num"], ["Uses", "num"], ["Created"]], rows, "No item matches."),
    more ? el("p", { class: "muted" }, `The first ${ITEMS_LIMIT} items; filter by tag to see others.`) : null);
}

// stateView lists the names each plugin is granted: KV namespaces, counters and locks
// (a pattern ends in *), each with a form that reads one: a key of the namespace, or the
// counter or lock of that name (a pattern's prefix is filled in).
function stateView(autos) {
  const rows = [];
  for (const a of autos) {
    const g = a.grant || {};
    for (const [kind, names] of [["kv", g.kv], ["counter", g.counters], ["lock", g.locks]]) {
      for (const name of names || []) rows.push(stateRow(kind, name, a.type));
    }
  }
  return table([["Kind"], ["Name"], ["Granted to"], ["Read"]], rows,
    "No plugin is granted a KV namespace, a counter or a lock.");
}

const readPath = {
  kv: (ns, key) => `/api/v1/kv/${seg(ns)}/${seg(key)}`,
  counter: (_, name) => `/api/v1/counters/${seg(name)}`,
  lock: (_, name) => `/api/v1/locks/${seg(name)}`,
};

function stateRow(kind, name, type) {
  const input = el("input", {
    name: "name", size: 24, required: true,
    placeholder: kind === "kv" ? "key" : "name",
    value: kind === "kv" ? "" : name.replace(/\*$/, ""),
  });
  const result = el("pre", { class: "result", hidden: true });
  const read = async (ev) => {
    ev.preventDefault();
    result.hidden = false;
    result.classList.remove("error");
    delete result.dataset.read;
    result.textContent = "reading…";
    try {
      result.textContent = JSON.stringify(await get(readPath[kind](name, input.value)), null, 2);
      result.dataset.read = "ok";
    } catch (e) {
      result.textContent = e.message;
      result.classList.add("error");
      result.dataset.read = "error";
    }
  };
  return el("tr", { "data-kind": kind, "data-name": name },
    el("td", {}, kind === "kv" ? "KV namespace" : kind),
    el("td", { class: "mono" }, name),
    el("td", {}, type),
    el("td", {}, el("form", { class: "lookup", onsubmit: read }, input, el("button", { type: "submit" }, "Read")), result));
}

// fleetView lists the instances that report to this daemon's plane, stale ones marked;
// null when the daemon serves no plane.
function fleetView(p) {
  if (p === null) {
    return el("p", { class: "muted" },
      "This daemon serves no plane. Run it with --plane (and --plane-key) and point the daemons' --report-url at " +
      `${location.origin}/api/projects/<project>/fleet/report to list them here.`);
  }
  const rows = p.instances.map((i) => el("tr", { "data-instance": i.instance, "data-stale": i.stale ? "true" : "false", "data-state": i.state.kind },
    el("td", { class: "mono" }, i.instance, i.stale ? el("span", { class: "stale" }, " stale") : null),
    el("td", {}, i.project),
    el("td", {}, i.host),
    el("td", {}, i.version),
    el("td", { class: "mono" }, i.config_identity),
    el("td", {}, el("span", { class: "badge", "data-state": i.state.kind }, i.state.kind),
      i.state.kind === "iteration" ? el("span", { class: "mono" }, ` #${i.state.n} ${i.state.phase} ${i.state.task_ref}`) : null),
    since("td", i.last_seen, { class: i.stale ? "stale" : null }),
    el("td", {}, (i.iterations || []).map((it) => el("span", { class: "outcome-" + it.outcome, title: `${it.task_ref} ${ms(it.duration_seconds * 1000)}` }, it.outcome + " ")))));
  return el("div", {},
    el("p", { class: "muted" }, `An instance is stale when it has not reported for ${p.stale_after_seconds}s.`),
    table([["Instance"], ["Project"], ["Host"], ["Version"], ["Config"], ["State"], ["Last report"], ["Last iterations"]], rows,
      "No instance reports to this plane yet."));
}

// planeInstances reads the plane's instances, or null when the daemon serves no plane, at
// most once every FLEET_POLL_MS; in between it gives the last read.
async function planeInstances() {
  const p = planeInstances;
  if (p.at && Date.now() - p.at < FLEET_POLL_MS) return p.last;
  try {
    p.last = await get("/api/v1/plane/instances?iterations=5");
  } catch (e) {
    if (!(e.status === 404 && e.kind === "NotFound")) throw e;
    p.last = null;
  }
  p.at = Date.now();
  return p.last;
}

// ---- the refresh ----

async function refresh() {
  clearTimeout(refresh.timer);
  if (refresh.running) { refresh.again = true; return; }
  refresh.running = true;
  try {
    if (!document.hidden && document.getElementById("login").hidden) await load();
  } finally {
    refresh.running = false;
    if (refresh.again) { refresh.again = false; refresh(); }
    else refresh.timer = setTimeout(refresh, POLL_MS);
  }
}

const section = (id, part) => document.querySelector(`#${id} .${part || "content"}`);

async function load() {
  try {
    const [{ automations }, { queues }, { pools }, { sites }] = await Promise.all([
      get("/api/v1/automations"), get("/api/v1/queues"), get("/api/v1/pools"), get("/api/v1/sites")]);
    const withSlots = automations.filter((a) => a.slots > 0);
    const open = [...openPools].filter(([name]) => pools.some((p) => p.pool === name));
    const [slots, parked, items, fleet] = await Promise.all([
      Promise.all(withSlots.map((a) => get(`/api/v1/automations/${seg(a.type)}/slots`))),
      Promise.all(queues.filter((q) => q.parked > 0).map((q) => get(`/api/v1/queues/${seg(q.queue)}/parked?limit=${PARKED_LIMIT}`))),
      Promise.all(open.map(([name, o]) => get(poolItemsPath(name, o.where.value)))),
      planeInstances(),
    ]);
    show(section("automations"), automations, automationsView);
    show(section("slots"), slots, slotsView);
    show(section("queues"), queues, queuesView);
    show(section("queues", "parked"), parked, parkedView);
    show(section("pools"), pools, poolsView);
    show(section("sites"), sites, sitesView);
    open.forEach(([, o], i) => show(o.list, items[i], poolItemsView));
    show(section("fleet"), fleet, fleetView);
    show(section("state"), automations.map((a) => ({ type: a.type, grant: a.grant })), stateView);
    await fleetOverview(); // fleetview.js
    tick();
    document.body.dataset.loaded = "true";
    say("status", "updated " + new Date().toLocaleTimeString());
  } catch (e) {
    if (e.status !== 401) say("status", e.message, true);
  }
}

// ---- the token ----

function needToken(message) {
  document.getElementById("login").hidden = false;
  document.getElementById("main").hidden = true;
  document.getElementById("login-error").textContent = token() ? message : "";
  document.getElementById("token").focus();
}

function signedIn() {
  document.getElementById("login").hidden = true;
  document.getElementById("main").hidden = false;
  document.getElementById("forget").hidden = !token();
  say("status", "");
  refresh();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const input = document.getElementById("token");
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    input.value = "";
    signedIn();
  });
  document.getElementById("forget").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    shown.clear();
    location.reload();
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
  signedIn();
});
