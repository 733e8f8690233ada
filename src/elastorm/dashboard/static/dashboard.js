// elastorm dashboard: draws the view the server pushes over server-sent events.
// Plain DOM, SVG and canvas; no library, nothing fetched from elsewhere.
"use strict";

const $ = (sel) => document.querySelector(sel);
const SVGNS = "http://www.w3.org/2000/svg";
const TIMELINE_SECS = 300;
const PROTOCOL_COLORS = { cpa: "#4cc38a", cpal: "#37b3e6", direct: "#f5a524", lazy_cpa: "#8fd16a",
  restore: "#80e0a0", unknown: "#a0a0c0" };
let latest = null;
const hovers = new Map(); // canvas -> {op, cols, size}

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function nodeIndex(name) { const m = /(\d+)/.exec(name || ""); return m ? +m[1] : 0; }
function nodeColor(name) { return name == null ? "#333" : `hsl(${(nodeIndex(name) * 137.5) % 360},70%,55%)`; }
function loadColor(x) { // 0..1 -> dark blue .. yellow .. red
  const h = 220 - 220 * Math.min(1, Math.max(0, x));
  return `hsl(${h},75%,${25 + 30 * x}%)`;
}
function fmt(x, d = 1) { return x == null ? "–" : Number(x).toFixed(d); }
function clock(t) { return new Date(t * 1000).toLocaleTimeString([], { hour12: false }); }
function svg(tag, attrs, text) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text != null) el.textContent = text;
  return el;
}

function drawHeader(v) {
  $("#topology").textContent = v.topology;
  const zk = $("#zk");
  zk.textContent = `ZooKeeper ${v.zookeeper.connected ? "connected" : "DISCONNECTED"} (${v.zookeeper.reads} reads)`;
  zk.dataset.state = v.zookeeper.connected ? "ok" : "down";
  const nb = $("#nimbus");
  nb.textContent = v.storm ? "Nimbus up" : `Nimbus: ${v.storm_error || "down"}`;
  nb.dataset.state = v.storm ? "ok" : "down";
  const up = $("#updated");
  up.dataset.seq = v.seq;
  up.dataset.at = v.at;
  up.textContent = `updated ${clock(v.at)} (#${v.seq})`;
}

function drawNodes(v) {
  const rows = v.nodes.map((n) => {
    const cpu = n.cpu == null ? "–" : `<span class="bar" style="width:${Math.round(n.cpu * 60)}px"></span>${fmt(n.cpu * 100, 0)}%`;
    const tasks = n.tasks.join(",") + (n.lost_tasks.length ? ` <s>${n.lost_tasks.join(",")}</s>` : "");
    return `<tr data-node="${esc(n.id)}" data-state="${n.state}"><td><span class="swatch" style="background:${nodeColor(n.id)}"></span>${esc(n.id)}</td>` +
      `<td class="state">${n.state}${n.idle ? " (idle)" : ""}</td><td>${cpu}</td><td>${fmt(n.queue, 0)}</td>` +
      `<td>${fmt(n.rate, 0)}</td><td>${n.owned}</td><td>${n.held}</td><td>${tasks}</td></tr>`;
  });
  $("#nodes tbody").innerHTML = rows.join("");
}

function drawThroughput(v) {
  const el = $("#throughput");
  el.replaceChildren();
  const series = Object.entries(v.throughput);
  const all = series.flatMap(([, s]) => s);
  if (!all.length) return;
  const t1 = v.at, t0 = t1 - 150;
  const ymax = Math.max(1, ...all.filter((p) => p[0] >= t0).map((p) => p[1])) * 1.1;
  const W = 600, H = 180, x = (t) => ((t - t0) / (t1 - t0)) * W, y = (r) => H - 14 - (r / ymax) * (H - 24);
  for (let i = 0; i <= 4; i++) {
    const r = (ymax * i) / 4;
    el.append(svg("line", { x1: 0, x2: W, y1: y(r), y2: y(r), stroke: "#263041", "stroke-width": 1 }));
    el.append(svg("text", { x: 2, y: y(r) - 2, fill: "#8a96a8", "font-size": 10 }, fmt(r, 0)));
  }
  const legend = [];
  series.forEach(([op, s], i) => {
    const color = `hsl(${(i * 97 + 200) % 360},70%,60%)`;
    const pts = s.filter((p) => p[0] >= t0).map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    el.append(svg("polyline", { points: pts, fill: "none", stroke: color, "stroke-width": 1.5, "vector-effect": "non-scaling-stroke" }));
    const last = s.length ? s[s.length - 1][1] : 0;
    legend.push(`<span data-operator="${esc(op)}"><span class="swatch" style="background:${color}"></span>${esc(op)}: ${fmt(last, 0)}/s</span>`);
  });
  $("#throughput-legend").innerHTML = legend.join("");
}

function drawOperators(v) {
  const box = $("#operators");
  const seen = new Set();
  for (const op of v.operators) {
    seen.add(op.name);
    let div = box.querySelector(`.op[data-operator="${CSS.escape(op.name)}"]`);
    if (!div) {
      div = document.createElement("div");
      div.className = "op";
      div.dataset.operator = op.name;
      div.innerHTML = `<h3></h3><canvas></canvas><div class="owners"></div>`;
      box.append(div);
      const canvas = div.querySelector("canvas");
      canvas.addEventListener("mousemove", (e) => hover(canvas, e));
      canvas.addEventListener("mouseleave", () => { $("#tooltip").hidden = true; });
    }
    const inFlight = op.in_flight.map((m) => `${m.key_group}:${m.protocol}${m.stuck ? " STUCK" : ""}`).join(", ");
    div.querySelector("h3").textContent = `${op.name}: ${op.key_groups} key groups, epoch ${op.epoch}, controller ${op.controller ? "running" : "NOT running"}` +
      (inFlight ? `; migrating ${inFlight}` : "");
    drawGroups(div.querySelector("canvas"), op);
    const count = {};
    op.owners.forEach((n) => { count[n] = (count[n] || 0) + 1; });
    div.querySelector(".owners").innerHTML = Object.keys(count).sort((a, b) => nodeIndex(a) - nodeIndex(b))
      .map((n) => `<span data-node="${esc(n)}"><span class="swatch" style="background:${nodeColor(n)}"></span>${esc(n)} owns ${count[n]}</span>`).join("");
    div.dataset.owners = op.owners.join(",");
  }
  for (const div of box.querySelectorAll(".op")) if (!seen.has(div.dataset.operator)) div.remove();
}

function drawGroups(canvas, op) {
  const n = op.key_groups;
  const width = Math.max(300, canvas.parentElement.clientWidth - 4);
  const size = Math.max(8, Math.min(36, Math.floor(Math.sqrt((width * 220) / Math.max(1, n)))));
  const cols = Math.max(1, Math.floor(width / size));
  const rows = Math.ceil(n / cols);
  const dpr = window.devicePixelRatio || 1;
  canvas.width = cols * size * dpr; canvas.height = rows * size * dpr;
  canvas.style.width = `${cols * size}px`; canvas.style.height = `${rows * size}px`;
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  const max = Math.max(1e-9, ...op.load);
  const moving = new Set(op.moving);
  const bar = Math.max(2, Math.floor(size / 5));
  for (let g = 0; g < n; g++) {
    const x = (g % cols) * size, y = Math.floor(g / cols) * size;
    ctx.fillStyle = loadColor(op.load[g] / max);
    ctx.fillRect(x + 1, y + 1, size - 2, size - 2);
    ctx.fillStyle = nodeColor(op.owners[g]);
    ctx.fillRect(x + 1, y + 1, size - 2, bar);
    ctx.fillStyle = nodeColor(op.holders[g]);
    ctx.fillRect(x + 1, y + size - 1 - bar, size - 2, bar);
    if (moving.has(g)) { ctx.strokeStyle = "#fff"; ctx.lineWidth = 2; ctx.strokeRect(x + 1, y + 1, size - 2, size - 2); }
  }
  hovers.set(canvas, { op, cols, size });
}

function hover(canvas, e) {
  const h = hovers.get(canvas);
  if (!h) return;
  const r = canvas.getBoundingClientRect();
  const g = Math.floor((e.clientY - r.top) / h.size) * h.cols + Math.floor((e.clientX - r.left) / h.size);
  const tip = $("#tooltip");
  if (g < 0 || g >= h.op.key_groups) { tip.hidden = true; return; }
  tip.hidden = false;
  tip.style.left = `${e.clientX + 12}px`; tip.style.top = `${e.clientY + 12}px`;
  tip.textContent = `${h.op.name}/${g}: owner ${h.op.owners[g]} (task ${h.op.owner_tasks[g]}), holder ${h.op.holders[g]}, ${fmt(h.op.load[g])} tuples/s`;
}

function eventText(e) {
  if (e.kind === "migration") {
    return `migration ${e.what}: ${e.operator}/${e.group} task ${e.source ?? "?"} → ${e.target} by ${e.protocol}` +
      (e.seconds != null ? ` in ${fmt(e.seconds * 1000, 0)} ms${e.assisted ? " (checkpoint-assisted)" : ""}` : "") +
      (e.detail ? ` — ${e.detail}` : "");
  }
  if (e.kind === "move" || (e.kind === "recovery" && e.group != null)) {
    return `${e.what === "owner" ? "owner changed" : e.what}: ${e.operator}/${e.group} task ${e.source} → ${e.target} (${e.protocol}, epoch ${e.epoch})`;
  }
  if (e.node && e.task == null) return `${e.what}: ${e.node}`;
  return `${e.what}: task ${e.task} of ${e.operator} on ${e.node} (pid ${e.pid})`;
}

function drawTimeline(v) {
  const el = $("#timeline");
  el.replaceChildren();
  const W = 1000, H = 120, t1 = v.at, t0 = t1 - TIMELINE_SECS, x = (t) => ((t - t0) / TIMELINE_SECS) * W;
  const lanes = { migration: 25, move: 50, recovery: 75, failure: 100 };
  for (const [name, y] of Object.entries(lanes)) {
    el.append(svg("line", { x1: 0, x2: W, y1: y, y2: y, stroke: "#263041" }));
    el.append(svg("text", { x: 3, y: y - 3, fill: "#8a96a8", "font-size": 10 }, name));
  }
  for (let s = 0; s <= TIMELINE_SECS; s += 60) {
    el.append(svg("text", { x: x(t0 + s) - 10, y: 118, fill: "#5c677a", "font-size": 9 }, s === TIMELINE_SECS ? "now" : `-${TIMELINE_SECS - s}s`));
  }
  for (const e of v.events) {
    if (e.t < t0) continue;
    const color = e.kind === "failure" ? "#ff5a5a" : PROTOCOL_COLORS[e.protocol] || "#80e0a0";
    const shape = e.kind === "failure"
      ? svg("rect", { x: x(e.t) - 4, y: lanes.failure - 4, width: 8, height: 8, fill: color })
      : svg("circle", { cx: x(e.t), cy: lanes[e.kind], r: e.what === "done" ? 5 : 3, fill: color });
    shape.append(svg("title", {}, `${clock(e.t)} ${eventText(e)}`));
    el.append(shape);
  }
  const list = $("#events");
  const items = v.events.slice(-200).reverse().map((e) =>
    `<li data-kind="${e.kind}" data-what="${esc(e.what)}" data-group="${e.group ?? ""}" data-task="${e.task ?? ""}" data-node="${esc(e.node ?? "")}" data-protocol="${esc(e.protocol ?? "")}">` +
    `${clock(e.t)} ${esc(eventText(e))}</li>`);
  list.innerHTML = items.join("");
}

function drawPaper(v) {
  const p = v.paper;
  const pct = (x) => (x == null ? "–" : `${fmt(x * 100, 0)}%`);
  const rows = [
    ["migrations done (requested)", p.migrations_done],
    ["checkpoint-assisted share", pct(p.assisted_share)],
    ["usable checkpoints now", pct(p.usable_share)],
    ["task failures seen", Object.values(v.counters.task_failures).reduce((a, b) => a + b, 0)],
    ["node failures seen", v.counters.node_failures],
  ];
  for (const [k, val] of Object.entries(p)) if (k.startsWith("controller_")) rows.push([k.replace("controller_", "controller: "), typeof val === "number" ? pct(val) : val]);
  $("#paper").innerHTML = rows.map(([k, val]) => `<dt>${esc(k)}</dt><dd>${esc(val ?? "–")}</dd>`).join("");
}

function corrColor(r) { // -1 blue .. 0 dark .. +1 red
  const a = Math.min(1, Math.abs(r));
  return r >= 0 ? `rgb(${Math.round(30 + 220 * a)},${Math.round(30 + 20 * a)},${Math.round(40 + 10 * a)})`
    : `rgb(${Math.round(30 + 10 * a)},${Math.round(40 + 80 * a)},${Math.round(50 + 200 * a)})`;
}

function drawAllocation(v) {
  const a = v.allocation;
  const p = $("#allocation-score");
  const canvas = $("#heatmap");
  if (!a) { canvas.hidden = true; return; }
  const drift = a.score_drift;
  p.dataset.drift = drift ?? "";
  p.textContent = a.allocation_score == null
    ? `strategy ${a.strategy}: no allocation yet (θ = ${a.theta})` + (a.score_note ? ` — ${a.score_note}` : "")
    : `strategy ${a.strategy}: score now ${fmt(a.allocation_score, 2)}, Algorithm 3 ${fmt(a.reference_score, 2)}; ` +
      `drift ${fmt(drift, 2)} against θ = ${a.theta} (${drift > a.theta ? "ABOVE: re-optimisation due" : "within"})`;
  const c = a.correlation;
  canvas.hidden = !c;
  if (!c) return;
  const n = c.key_groups.length, cell = Math.max(3, Math.min(14, Math.floor(520 / Math.max(1, n))));
  canvas.width = n * cell; canvas.height = n * cell;
  const ctx = canvas.getContext("2d");
  for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) {
    ctx.fillStyle = corrColor(c.matrix[i][j] ?? 0);
    ctx.fillRect(j * cell, i * cell, cell, cell);
  }
  canvas.title = `${n} key groups: ${c.key_groups[0]} … ${c.key_groups[n - 1]}`;
}

function drawStorm(v) {
  const s = v.storm;
  if (!s) { $("#storm").textContent = v.storm_error || "Nimbus not asked"; return; }
  const sup = s.supervisors.map((x) => `<tr><td>${esc(x.host)}</td><td>${esc(x.id.slice(0, 12))}</td><td>${x.used}/${x.slots}</td></tr>`).join("");
  const top = s.topologies.map((t) => `<tr><td>${esc(t.name)}</td><td>${esc(t.status)}</td><td>${t.workers}</td><td>${t.executors}</td><td>${t.uptime_secs} s</td></tr>`).join("");
  $("#storm").innerHTML = `<table><thead><tr><th>supervisor</th><th>id</th><th>slots used</th></tr></thead><tbody>${sup}</tbody></table>` +
    `<table><thead><tr><th>topology</th><th>status</th><th>workers</th><th>executors</th><th>uptime</th></tr></thead><tbody>${top}</tbody></table>`;
}

function draw(v) {
  const began = performance.now();
  latest = v;
  drawHeader(v);
  drawNodes(v);
  drawThroughput(v);
  drawOperators(v);
  drawTimeline(v);
  drawPaper(v);
  drawAllocation(v);
  drawStorm(v);
  $("#actions-section").hidden = !v.actions;
  // What the last draw cost, for bench/dashboard_cost.py (1,000 key groups, 50 nodes).
  document.body.dataset.drawMs = (performance.now() - began).toFixed(2);
  document.body.dataset.draws = String(+(document.body.dataset.draws || 0) + 1);
}

function connect() {
  const source = new EventSource("/events");
  const conn = $("#conn");
  source.onopen = () => { conn.textContent = "live"; conn.dataset.state = "live"; };
  source.onerror = () => { conn.textContent = "reconnecting"; conn.dataset.state = "down"; };
  source.onmessage = (msg) => {
    try { draw(JSON.parse(msg.data)); } catch (err) { console.error(err); }
  };
}

$("#migrate-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const f = new FormData(e.target);
  const res = await fetch("/api/migrate", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${f.get("token")}` },
    body: JSON.stringify({ operator: f.get("operator"), group: +f.get("group"), target: f.get("target"), protocol: f.get("protocol") }),
  });
  $("#migrate-result").textContent = JSON.stringify(await res.json());
});
window.addEventListener("resize", () => { if (latest) drawOperators(latest); });
connect();
