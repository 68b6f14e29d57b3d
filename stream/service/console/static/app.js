// The mmr-stream console: renders the worker's JSON API by hash routes (see stream/service/console).
// DOM nodes are built with textContent only: pool and player names may hold any character.
"use strict";

const PAGE = 20;
const SVG = "http://www.w3.org/2000/svg";
const main = document.getElementById("main");
let refresh = null; // the health page's poll timer

// ---- reading the API ------------------------------------------------------------------------
class Unauthorized extends Error {}

async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem("mmrToken");
  if (token) headers.Authorization = "Bearer " + token;
  const resp = await fetch(path, { headers });
  if (resp.status === 401) throw new Unauthorized(await resp.text());
  if (!resp.ok) {
    const err = new Error(resp.status + ": " + (await resp.text()));
    err.status = resp.status;
    throw err;
  }
  return resp.json();
}

function askToken() {
  const dialog = document.getElementById("token-dialog");
  const input = document.getElementById("token-input");
  document.getElementById("token-form").onsubmit = () => {
    sessionStorage.setItem("mmrToken", input.value.trim());
    input.value = "";
    route();
  };
  if (!dialog.open) dialog.showModal();
}

// ---- building the page ----------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

const enc = encodeURIComponent;
const poolHash = (pool) => "#/pools/" + enc(pool);
const playerHash = (pool, player) => poolHash(pool) + "/players/" + enc(player);
const fmt = (x, digits = 1) => (x === null || x === undefined || Number.isNaN(x) ? "–" : Number(x).toFixed(digits));
const when = (ms) => new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");

function facts(pairs) {
  return el("div", { class: "facts" }, ...pairs.map(([label, value, id]) =>
    el("div", {}, el("div", { class: "value", text: String(value), ...(id ? { id } : {}) }),
       el("div", { class: "label", text: label }))));
}

function table(head, rows, numeric = []) {
  const thead = el("thead", {}, el("tr", {}, ...head.map((h, i) => el("th", { text: h, class: numeric.includes(i) ? "num" : "" }))));
  const body = el("tbody", {});
  for (const row of rows) {
    const tr = el("tr", row.attrs || {});
    (row.cells || row).forEach((c, i) => tr.append(el("td", { class: numeric.includes(i) ? "num" : "" }, c)));
    body.append(tr);
  }
  return el("table", {}, thead, body);
}

function show(...nodes) {
  main.replaceChildren(...nodes);
}

// ---- pages ----------------------------------------------------------------------------------
async function poolsPage() {
  document.title = "Pools · mmr-stream";
  const body = await api("/pools");
  const rows = body.pools.map((p) => [el("a", { href: poolHash(p.pool), class: "pool-link", text: p.pool }),
                                      p.system, String(p.players)]);
  show(el("h1", { text: "Pools" }),
       body.pools.length ? table(["Pool", "System", "Players"], rows, [2]) : el("p", { class: "muted", text: "No pool rated yet." }));
}

function histogram(dist, marker) {
  const W = 700, H = 180, L = 45, B = 30;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, id: "histogram" });
  if (!dist.bins.length) return root;
  const most = Math.max(...dist.bins.map((b) => b.count), 1);
  const bw = (W - L - 10) / dist.bins.length;
  dist.bins.forEach((b, i) => {
    const h = (H - B - 10) * (b.count / most);
    const bar = svg("rect", { class: "bar", x: L + i * bw + 1, y: H - B - h, width: Math.max(bw - 2, 1), height: h });
    bar.append(svg("title", {}, `${fmt(b.lo)} – ${fmt(b.hi)}: ${b.count}`));
    root.append(bar);
  });
  root.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - 10, y2: H - B }));
  root.append(svg("text", { x: L, y: H - 10 }, fmt(dist.min, 0)));
  root.append(svg("text", { x: W - 10, y: H - 10, "text-anchor": "end" }, fmt(dist.max, 0)));
  root.append(svg("text", { x: 5, y: 15 }, String(most)));
  if (marker !== undefined && dist.max > dist.min) {
    const x = L + (W - L - 10) * (marker - dist.min) / (dist.max - dist.min);
    root.append(svg("line", { class: "marker", x1: x, y1: 5, x2: x, y2: H - B }));
  }
  return root;
}

async function poolPage(pool, params) {
  document.title = pool + " · mmr-stream";
  const offset = Math.max(0, parseInt(params.get("offset") || "0", 10) || 0);
  const find = params.get("player");
  const base = "/pools/" + enc(pool);
  const [info, dist, board] = await Promise.all([api(base), api(base + "/distribution?bins=30"),
                                                 api(`${base}/leaderboard?n=${PAGE}&offset=${offset}`)]);
  const rows = board.top.map((r, i) => ({
    attrs: r.player === find ? { class: "hit" } : {},
    cells: [String(offset + i + 1), el("a", { href: playerHash(pool, r.player), class: "player-link", text: r.player }),
            fmt(r.rating), fmt(r.mu, 3), fmt(r.sigma), String(r.rounds)],
  }));
  const search = el("form", { class: "search", onsubmit: (e) => { e.preventDefault(); findPlayer(pool, e.target.elements.q.value); } },
                    el("input", { name: "q", placeholder: "player id", "aria-label": "player id", id: "search" }), " ",
                    el("button", { type: "submit", text: "Find" }), " ", el("span", { id: "search-result", class: "muted" }));
  const pager = el("div", { class: "pager" });
  if (offset > 0) pager.append(el("a", { href: `${poolHash(pool)}?offset=${Math.max(0, offset - PAGE)}`, id: "prev", text: "← better" }));
  pager.append(el("span", { class: "muted", id: "page-info",
                            text: `${board.total ? offset + 1 : 0}–${Math.min(offset + PAGE, board.total)} of ${board.total}` }));
  if (offset + PAGE < board.total) pager.append(el("a", { href: `${poolHash(pool)}?offset=${offset + PAGE}`, id: "next", text: "worse →" }));
  const adv = info.advantages && Object.keys(info.advantages).length
    ? Object.entries(info.advantages).map(([k, v]) => `${k}: ${fmt(v, 3)}`).join(", ") : "none learned";
  const pct = Object.entries(dist.percentiles).map(([k, v]) => [k, fmt(v)]);
  show(el("h1", { id: "pool-name", text: pool }),
       facts([["system", info.system, "pool-system"], ["players", info.players, "pool-players"],
              ["open rounds", info.open_rounds ?? 0], ["history kept", info.history_limit ?? 0]]),
       el("p", { class: "muted", text: "Parameters: " + (JSON.stringify(info.params) || "{}") + " · side advantages: " + adv }),
       el("h2", { text: "Rating distribution" }), histogram(dist),
       el("p", { class: "muted", id: "percentiles", text: pct.map(([k, v]) => `${k} ${v}`).join(" · ") }),
       el("h2", { text: "Leaderboard" }), search,
       table(["#", "Player", "Rating", "μ", "σ", "Events"], rows, [0, 2, 3, 4, 5]), pager);
}

async function findPlayer(pool, player) {
  const out = document.getElementById("search-result");
  if (!player) return;
  try {
    const found = await api(`/pools/${enc(pool)}/leaderboard/rank/${enc(player)}`);
    const page = Math.floor(found.offset / PAGE) * PAGE;
    location.hash = `${poolHash(pool)}?offset=${page}&player=${enc(player)}`;
  } catch (e) {
    if (e instanceof Unauthorized) return askToken();
    out.textContent = e.status === 404 ? `no player ${JSON.stringify(player)} in this pool` : e.message;
  }
}

function chart(history, center) {
  const W = 800, H = 300, L = 55, R = 15, T = 15, B = 35;
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, id: "history-chart" });
  if (!history.length) return root;
  const c = history.map(center);
  const lo = Math.min(...history.map((h, i) => c[i] - h.sigma), ...history.map((h) => h.rating));
  const hi = Math.max(...history.map((h, i) => c[i] + h.sigma), ...history.map((h) => h.rating));
  const span = hi - lo || 1;
  const x = (i) => L + (history.length === 1 ? (W - L - R) / 2 : (W - L - R) * i / (history.length - 1));
  const y = (v) => T + (H - T - B) * (1 - (v - lo) / span);
  const upper = history.map((h, i) => `${x(i)},${y(c[i] + h.sigma)}`);
  const lower = history.map((h, i) => `${x(i)},${y(c[i] - h.sigma)}`).reverse();
  root.append(svg("polygon", { class: "band", points: upper.concat(lower).join(" ") }));
  root.append(svg("polyline", { class: "mu", points: history.map((h, i) => `${x(i)},${y(c[i])}`).join(" ") }));
  root.append(svg("polyline", { class: "rating", points: history.map((h, i) => `${x(i)},${y(h.rating)}`).join(" ") }));
  history.forEach((h, i) => {
    const dot = svg("circle", { class: "point", cx: x(i), cy: y(c[i]), r: 3.5, "data-event": h.event_id });
    dot.append(svg("title", {}, `${h.event_id} · ${when(h.time)}\nrating ${fmt(h.rating)} · μ ${fmt(c[i])} ± ${fmt(h.sigma)}`));
    root.append(dot);
  });
  root.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  root.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (const v of [lo, (lo + hi) / 2, hi]) root.append(svg("text", { x: L - 5, y: y(v) + 4, "text-anchor": "end" }, fmt(v, 0)));
  root.append(svg("text", { x: L, y: H - 12 }, when(history[0].time)));
  root.append(svg("text", { x: W - R, y: H - 12, "text-anchor": "end" }, when(history[history.length - 1].time)));
  return root;
}

async function playerPage(pool, player) {
  document.title = player + " · " + pool + " · mmr-stream";
  const base = `/pools/${enc(pool)}/players/${enc(player)}`;
  const [info, hist, dist] = await Promise.all([api(base), api(base + "/history"),
                                                api(`/pools/${enc(pool)}/distribution?bins=30`)]);
  // Cowan's mu is in natural units (its sigma in display units): the band is centred on the displayed rating
  const center = info.system === "cowan" ? (h) => h.rating : (h) => h.mu;
  const rows = hist.history.slice().reverse().map((h) => [String(h.version), when(h.time), el("code", { text: h.event_id }),
                                                          fmt(h.rating), fmt(h.mu, 3), fmt(h.sigma)]);
  show(el("p", {}, el("a", { href: poolHash(pool), id: "back-to-pool", text: "← " + pool })),
       el("h1", { id: "player-name", text: player }),
       facts([["rating", fmt(info.rating), "player-rating"], ["percentile", fmt(info.percentile), "player-percentile"],
              ["μ", fmt(info.mu, 3), "player-mu"], ["σ", fmt(info.sigma), "player-sigma"],
              ["events", info.rounds, "player-rounds"], ["last event", info.event_id ?? "–", "player-event"]]),
       el("h2", { text: "Rating history" }),
       el("p", { class: "muted", text: `μ (line) with a ±σ band and the displayed rating (dashed); the last ${hist.history.length} of at most ${hist.limit} changes kept. Hover a point for its cause event.` }),
       chart(hist.history, center),
       el("h2", { text: "Changes (latest first)" }),
       table(["Version", "Time", "Cause event", "Rating", "μ", "σ"], rows, [0, 3, 4, 5]),
       el("h2", { text: "Place in the pool" }), histogram(dist, info.rating));
}

let last = null; // the previous status read: rates are the counters' change since it
async function healthPage() {
  document.title = "Health · mmr-stream";
  const s = await api("/status");
  const rate = (k) => (last ? (s.counters[k] - last.counters[k]) / Math.max(s.time - last.time, 1e-3) : null);
  const rates = [["events/s", fmt(rate("events_in")), "rate-events"], ["ratings/s", fmt(rate("ratings_out")), "rate-ratings"],
                 ["dead letters/s", fmt(rate("dead_letters"), 2), "rate-dead"]];
  last = s;
  const kafka = s.kafka || {};
  const parts = Object.entries(kafka.partitions || {}).map(([tp, lag]) => [tp, String(lag)]);
  const dead = (s.recent_dead_letters || []).map((d) => [d.reason, d.pool ?? "–", d.event_id ?? "–", `${d.topic}/${d.partition}@${d.offset}`]);
  show(el("h1", { text: "Worker health" }),
       facts([["Redis", s.redis.status, "redis-status"], ["Kafka", kafka.status ?? "–", "kafka-status"],
              ["consumer lag", kafka.lag ?? "–", "consumer-lag"], ["running", s.running ? "yes" : "starting", "running"],
              ...rates]),
       facts([["events in", s.counters.events_in, "events-in"], ["ratings out", s.counters.ratings_out, "ratings-out"],
              ["dead letters", s.counters.dead_letters, "dead-letters"], ["store retries", s.counters.store_retries]]),
       s.redis.error ? el("p", { class: "error", text: "Redis: " + s.redis.error }) : "",
       kafka.fetch_paused ? el("p", { class: "error", text: "Fetching is paused (Redis unavailable)." }) : "",
       (s.halted || []).length ? el("p", { class: "error", text: "Halted partitions: " + JSON.stringify(s.halted) }) : "",
       el("h2", { text: "Consumer lag by partition" }),
       parts.length ? table(["Partition", "Lag"], parts, [1]) : el("p", { class: "muted", text: "No partition assigned." }),
       el("h2", { text: "Recent dead letters" }),
       dead.length ? table(["Reason", "Pool", "Event", "Input"], dead) : el("p", { class: "muted", id: "no-dead", text: "None." }));
  refresh = setTimeout(() => route(true), 2000);
}

// ---- routing --------------------------------------------------------------------------------
async function route(again = false) {
  clearTimeout(refresh);
  if (!again) last = null;
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts.length === 0) await poolsPage();
    else if (parts[0] === "health") await healthPage();
    else if (parts[0] === "pools" && parts.length === 2) await poolPage(parts[1], params);
    else if (parts[0] === "pools" && parts.length === 4 && parts[2] === "players") await playerPage(parts[1], parts[3]);
    else show(el("p", { class: "error", text: "No such page: " + hash }));
  } catch (e) {
    if (e instanceof Unauthorized) return askToken();
    show(el("p", { class: "error", id: "error", text: e.message }));
  }
}

window.addEventListener("hashchange", () => route());
route();
