// The fleet as one (GET /api/v1/fleet): the banner of what needs an operator, every
// daemon of the fleet with its slots and builds, and the health of every automation and
// queue over the last hour as small inline SVG charts. It uses console.js's helpers (el,
// get, table, since, show, section); console.js's load calls fleetOverview.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const OUTCOMES = ["done", "retried", "failed", "parked", "died"];

function svg(tag, attrs) {
  const n = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, String(v));
  return n;
}

// fleetOverview reads the fleet and shows its banner, daemons and health.
async function fleetOverview() {
  const f = await get("/api/v1/fleet");
  show(document.getElementById("banner"), f.alerts, bannerView);
  document.getElementById("banner").hidden = f.alerts.length === 0;
  show(section("daemons"), { self: f.self, daemons: f.daemons, diverging: f.diverging }, daemonsView);
  show(section("health"), f.health, healthView);
}

// bannerView lists the alerts, parked tasks first: what needs an operator now.
function bannerView(alerts) {
  const order = ["parked", "reload_refused", "stale_daemon", "stopped_daemon", "diverging", "gate_closed"];
  const sorted = [...alerts].sort((a, b) => order.indexOf(a.kind) - order.indexOf(b.kind));
  return el("ul", {}, sorted.map((a) => el("li", { "data-kind": a.kind, "data-subject": a.subject }, a.message)));
}

// daemonsView lists every daemon of the fleet, its state, builds and slots, and the
// automations that run more than one build.
function daemonsView({ self, daemons, diverging }) {
  const rows = daemons.map((d) => el("tr", { "data-daemon": d.daemon, "data-state": d.state },
    el("td", { class: "mono" }, d.daemon, d.daemon === self ? el("span", { class: "muted" }, " (this one)") : null),
    el("td", {}, el("span", { class: "badge", "data-state": d.state === "live" ? "working" : "stopped" }, d.state)),
    since("td", d.last_seen, { class: d.state === "live" ? null : "stale" }),
    since("td", d.started, {}, "up since "),
    el("td", {}, d.version),
    el("td", {}, d.automations.map((a) => el("div", { class: "mono", "data-automation": a.automation },
      `${a.automation}@${a.plugin_version} ${a.digest.replace("sha256:", "").slice(0, 12)}`, a.paused ? " paused" : ""))),
    el("td", {}, d.slots.map((s) => el("span", { class: "slot-chip", "data-slot": s.slot, "data-state": s.state },
      el("span", { class: "badge", "data-state": s.state }, s.slot + " " + s.state), " ")),
      d.slots_omitted ? ` +${d.slots_omitted} more` : null)));
  const div = diverging.map((dv) => el("p", { class: "error", "data-diverging": dv.automation },
    `${dv.automation}: ${dv.note}: `, dv.builds.map((b) => `${b.plugin_version} (${b.digest.replace("sha256:", "").slice(0, 12)}) on ${b.daemons.join(", ")}`).join("; ")));
  return el("div", {}, div,
    table([["Daemon"], ["State"], ["Last seen"], ["Up"], ["fleet-host"], ["Automations"], ["Slots"]], rows,
      "No daemon on the roster yet: each writes its record within a refresh of its start."));
}

// healthView draws one chart per automation and per queue.
function healthView(h) {
  const cards = [
    ...h.automations.map((s) => seriesCard("automation", s, h)),
    ...h.queues.map((s) => seriesCard("queue", s, h)),
  ];
  if (cards.length === 0) return el("p", { class: "muted" }, "No task has finished in the fleet in the last hour.");
  return el("div", { class: "charts" }, cards);
}

// seriesCard is one automation's or queue's outcomes per minute over the hour, its
// totals and its tasks per second.
function seriesCard(kind, s, h) {
  const attrs = { class: "chart card", "data-kind": kind, "data-name": s.name, "data-rate": s.rate.toFixed(2) };
  for (const o of OUTCOMES) attrs["data-" + o] = s.total[o] || 0;
  return el("div", attrs,
    el("header", {}, el("strong", {}, `${kind} ${s.name}`), el("span", { class: "muted" }, `${s.rate.toFixed(2)} tasks/s`)),
    chart(s, h),
    el("div", { class: "legend" }, OUTCOMES.map((o) => el("span", { class: "outcome-" + o }, `${o} ${s.total[o] || 0} `))));
}

// chart is an SVG of the series' outcomes per minute: a line per outcome that happened,
// with a point at every minute it happened in; the x axis is the last hour, now at the
// right.
function chart(s, h) {
  const W = 360, H = 70, pad = 4;
  const n = h.minutes;
  const peak = Math.max(1, ...OUTCOMES.flatMap((o) => s[o]));
  const x = (i) => pad + (i * (W - 2 * pad)) / Math.max(1, n - 1);
  const y = (v) => H - pad - (v * (H - 2 * pad)) / peak;
  const g = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "data-series": s.name, "data-peak": peak });
  g.append(svg("line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, class: "axis" }));
  const title = svg("title");
  title.textContent = `${s.name}: outcomes per minute over the last ${n} minutes (peak ${peak}/min)`;
  g.append(title);
  for (const o of OUTCOMES) {
    const vals = s[o];
    if (!vals.some((v) => v > 0)) continue;
    g.append(svg("polyline", { class: "line-" + o, "data-outcome": o, fill: "none", points: vals.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ") }));
    vals.forEach((v, i) => {
      if (v > 0) {
        const c = svg("circle", { class: "dot-" + o, "data-outcome": o, "data-minute": i, "data-value": v, cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 2.5 });
        const t = svg("title");
        t.textContent = `${v} ${o} in the minute ${new Date(Date.parse(h.from) + i * 60000).toLocaleTimeString()}`;
        c.append(t);
        g.append(c);
      }
    });
  }
  return g;
}
