// The state section's browse: the counters, or the KV keys, whose names start with a
// prefix, a page at a time (GET /api/v1/counters and /api/v1/kv), so that a type's
// state can be found without knowing its names. A listing is read once, when asked for
// (List, then More for the next page), not at every refresh. Uses console.js's helpers.
"use strict";

const BROWSE_LIMIT = 100;
const BROWSE_TRIES = 10; // pages read at most per click while they come back empty

const browseKinds = {
  counters: {
    path: "/api/v1/counters",
    head: [["Counter"], ["Value", "num"]],
    rows: (page) => page.counters.map((c) => el("tr", { "data-name": c.counter }, el("td", { class: "mono" }, c.counter), num(c.value))),
  },
  kv: {
    path: "/api/v1/kv",
    head: [["Namespace"], ["Key"], ["Size", "num"], ["Expires"]],
    rows: (page) => page.keys.map((k) => el("tr", { "data-name": `${k.namespace} ${k.key}` },
      el("td", { class: "mono" }, k.namespace),
      el("td", { class: "mono" }, k.key),
      num(`${k.size} B`),
      el("td", { title: k.expires_at || "" }, k.expires_at ? new Date(k.expires_at).toLocaleString() : "never"))),
  },
};

// browse lists the first page for the form's kind and prefix, replacing what was listed.
async function browse(ev) {
  ev.preventDefault();
  const form = ev.target;
  const kind = browseKinds[form.elements.kind.value];
  const out = document.getElementById("browse-result");
  const body = el("tbody", {});
  const more = el("button", { type: "button", class: "more", hidden: true }, "More");
  const note = el("p", { class: "muted" });
  const state = { cursor: "", prefix: form.elements.prefix.value.trim() };
  out.replaceChildren(el("table", {}, el("thead", {}, el("tr", {}, kind.head.map(([h, c]) => el("th", c ? { class: c } : {}, h)))), body), note, more);
  out.dataset.kind = form.elements.kind.value;
  delete out.dataset.listed;
  const page = async () => {
    more.hidden = true;
    note.classList.remove("error");
    note.textContent = "listing…";
    try {
      let added = 0;
      for (let i = 0; i < BROWSE_TRIES && added === 0; i++) {
        const q = new URLSearchParams({ prefix: state.prefix, limit: BROWSE_LIMIT });
        if (state.cursor) q.set("cursor", state.cursor);
        const p = await get(`${kind.path}?${q}`);
        const rows = kind.rows(p);
        body.append(...rows);
        added += rows.length;
        state.cursor = p.next;
        if (!state.cursor) break;
      }
      more.hidden = !state.cursor;
      note.textContent = body.children.length === 0 && !state.cursor
        ? `Nothing under "${state.prefix}".`
        : `${body.children.length} listed${state.cursor ? ", more may follow" : ""}.`;
      out.dataset.listed = String(body.children.length);
    } catch (e) {
      note.textContent = e.message;
      note.classList.add("error");
      out.dataset.listed = "error";
    }
  };
  more.onclick = page;
  await page();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("browse").addEventListener("submit", browse);
});
