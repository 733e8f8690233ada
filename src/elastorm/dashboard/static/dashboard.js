// elastorm dashboard: draws the view the server pushes over server-sent events.
// Charts by Apache ECharts (static/vendor/echarts, shipped with the package; see
// docs/dashboard.md for its version and licence); tables and lists are plain DOM.
// Nothing is fetched from anywhere but the dashboard itself.
"use strict";

/* global echarts */
const $ = (sel) => document.querySelector(sel);
const TIMELINE_SECS = 300;
const SERIES_SECS = 150;
const LANES = ["failure", "recovery", "scaling", "move", "migration"];
const PROTOCOL_COLORS = { cpa: "#4cc38a", cpal: "#37b3e6", direct: "#f5a524",
  restore: "#80e0a0", unknown: "#a0a0c0" };
const AXIS = { axisLine: { lineStyle: { color: "#5c677a" } }, axisLabel: { color: "#8a96a8", fontSize: 10 },
  splitLine: { lineStyle: { color: "#263041" } } };
const TOOLTIP = { backgroundColor: "#000c", borderWidth: 0, textStyle: { color: "#dde3ea", fontSize: 12 }, confine: true };
let latest = null;
const charts = new Map(); // element -> echarts instance
const shown = new Map(); // element -> key of what its chart shows

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function nodeIndex(name) { const m = /(\d+)/.exec(name || ""); return m ? +m[1] : 0; }
function nodeColor(name) { return name == null ? "#333" : `hsl(${(nodeIndex(name) * 137.5) % 360},70%,55%)`; }
function opColor(i) { return `hsl(${(i * 97 + 200) % 360},70%,60%)`; }
function loadColor(x) { // 0..1 -> dark blue .. yellow .. red
  const h = 220 - 220 * Math.min(1, Math.max(0, x));
  return `hsl(${h},75%,${25 + 30 * x}%)`;
}
function fmt(x, d = 1) { return x == null ? "–" : Number(x).toFixed(d); }
function ms(seconds) { return seconds == null ? "–" : `${fmt(seconds * 1000, seconds < 0.01 ? 2 : 0)} ms`; }
function clock(t) { return new Date(t * 1000).toLocaleTimeString([], { hour12: false }); }

function chart(el) { // one ECharts instance per element, canvas renderer
  let c = charts.get(el);
  if (!c) { c = echarts.init(el, null, { renderer: "canvas" }); charts.set(el, c); }
  return c;
}

// Updates merge into the chart (ECharts diffs the data and keeps its elements) and
// are skipped when what a chart shows has not changed since its last update.
function update(el, key, option) {
  if (key != null && shown.get(el) === key) return;
  chart(el).setOption(option, { replaceMerge: ["series"] });
  shown.set(el, key);
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

function drawProblems(v) { // why the topology cannot run: the lines `elastorm status` prints
  const list = $("#problems");
  const lines = v.problems || [];
  list.hidden = lines.length === 0;
  list.innerHTML = lines.map((line) => `<li>${esc(line)}</li>`).join("");
}

function drawNodes(v) {
  const rows = v.nodes.map((n) => {
    const cpu = n.cpu == null ? "–" : `<span class="bar" style="width:${Math.round(n.cpu * 60)}px"></span>${fmt(n.cpu * 100, 0)}%`;
    const tasks = n.tasks.join(",") + (n.lost_tasks.length ? ` <s>${n.lost_tasks.join(",")}</s>` : "");
    const name = n.name ? ` <small>${esc(n.name)}</small>` : "";
    const notes = (n.joining ? " (joining)" : "") + (n.idle ? " (idle)" : "");
    return `<tr data-node="${esc(n.id)}" data-name="${esc(n.name ?? "")}" data-state="${n.state}"><td><span class="swatch" style="background:${nodeColor(n.id)}"></span>${esc(n.id)}${name}</td>` +
      `<td class="state">${n.state}${notes}</td><td>${cpu}</td><td>${fmt(n.queue, 0)}</td>` +
      `<td>${fmt(n.rate, 0)}</td><td>${n.owned}</td><td>${n.held}</td><td>${tasks}</td></tr>`;
  });
  $("#nodes tbody").innerHTML = rows.join("");
  const s = v.scaling;
  $("#scaling").textContent = s && s.bound ? `${s.bound} nodes bound by the elastic scheduler` +
    (s.draining.length ? `; draining ${s.draining.join(", ")}` : "") +
    (s.joining.length ? `; joining ${s.joining.join(", ")}` : "") +
    (s.pending ? `; ${s.pending} key groups to move` : "") +
    (s.want != null ? `; the controller wants ${s.want}` : "") : "";
}

function lineOption(v, series, unit, format) {
  const t1 = v.at * 1000, t0 = t1 - SERIES_SECS * 1000;
  return {
    animation: false,
    grid: { left: 52, right: 12, top: 10, bottom: 22 },
    tooltip: { ...TOOLTIP, trigger: "axis", valueFormatter: format },
    xAxis: { type: "time", min: t0, max: t1, ...AXIS, splitLine: { show: false } },
    yAxis: { type: "value", name: unit, nameTextStyle: { color: "#8a96a8", fontSize: 10 }, ...AXIS, min: 0 },
    series: series.map(([op, points], i) => ({
      name: op, type: "line", showSymbol: false, connectNulls: false, sampling: "lttb",
      lineStyle: { width: 1.5, color: opColor(i) }, itemStyle: { color: opColor(i) },
      data: points.filter((p) => p[0] * 1000 >= t0).map((p) => [p[0] * 1000, p[1]]),
    })),
  };
}

function drawOperatorCharts(v) {
  const ops = Object.keys(v.throughput);
  update($("#throughput"), null, lineOption(v, Object.entries(v.throughput), "tuples/s", (x) => fmt(x, 0)));
  const lat = ops.map((op) => [op, ((v.latency || {})[op] || []).map(([t, s]) => [t, s == null ? null : s * 1000])]);
  update($("#latency"), null, lineOption(v, lat, "ms", (x) => (x == null ? "–" : fmt(x, 1))));
  const rows = (v.operator_load || []).map((o) => {
    const i = ops.indexOf(o.name);
    return `<tr data-operator="${esc(o.name)}"><td><span class="swatch" style="background:${opColor(i < 0 ? 0 : i)}"></span>${esc(o.name)}</td>` +
      `<td class="rate">${fmt(o.rate, 0)}</td><td class="latency">${ms(o.latency)}</td><td class="service">${ms(o.service)}</td>` +
      `<td>${fmt(o.queue, 0)}</td><td>${o.tasks}</td></tr>`;
  });
  $("#operator-load tbody").innerHTML = rows.join("");
}

const LAGGING = "#ffb347"; // a durable copy past the dashboard's lag limits (not a node's color: dashed)
function lagText(lag) { return lag == null ? "–" : `${lag[0]} checkpoint${lag[0] === 1 ? "" : "s"}, ${fmt(lag[1], 1)} s`; }

function groupText(op, g) {
  return `${op.name}/${g}: owner ${op.owners[g]} (task ${op.owner_tasks[g]}), holder ${op.holders[g]}, ${fmt(op.load[g])} tuples/s` +
    (op.moving.includes(g) ? ", migrating" : "") +
    (op.durable ? `, durable lag ${lagText(op.durable.lag[g])}${op.durable.lagging.includes(g) ? " (LAGGING)" : ""}` : "");
}

function groupMapOption(op, cols, size) {
  // One rectangle per group (1,000 groups = 1,000 elements): its fill is a gradient with
  // hard stops, owner's color on top, load in the middle, holder's color at the bottom.
  const max = Math.max(1e-9, ...op.load);
  const moving = new Set(op.moving);
  const lagging = new Set(op.durable ? op.durable.lagging : []);
  const f = Math.max(2, Math.floor(size / 5)) / (size - 2);
  const fill = (g) => {
    const owner = nodeColor(op.owners[g]), load = loadColor(op.load[g] / max), holder = nodeColor(op.holders[g]);
    return new echarts.graphic.LinearGradient(0, 0, 0, 1, [
      { offset: 0, color: owner }, { offset: f, color: owner }, { offset: f, color: load },
      { offset: 1 - f, color: load }, { offset: 1 - f, color: holder }, { offset: 1, color: holder }]);
  };
  return {
    animation: false,
    tooltip: { ...TOOLTIP, trigger: "item", formatter: (p) => esc(groupText(op, p.dataIndex)) },
    series: [{
      type: "custom", coordinateSystem: "none", data: op.load.map((load, g) => [g, load]),
      renderItem: (params) => {
        const g = params.dataIndex, x = (g % cols) * size, y = Math.floor(g / cols) * size;
        const style = moving.has(g) ? { fill: fill(g), stroke: "#fff", lineWidth: 2 }
          : lagging.has(g) ? { fill: fill(g), stroke: LAGGING, lineWidth: 2, lineDash: [3, 2] } : { fill: fill(g) };
        return { type: "rect", shape: { x: x + 1, y: y + 1, width: size - 2, height: size - 2 }, style };
      },
    }],
  };
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
      div.innerHTML = `<h3></h3><div class="map"></div><div class="owners"></div>`;
      box.append(div);
    }
    const inFlight = op.in_flight.map((m) => `${m.key_group}:${m.protocol}${m.stuck ? " STUCK" : ""}`).join(", ");
    div.querySelector("h3").textContent = `${op.name}: ${op.key_groups} key groups, epoch ${op.epoch}, controller ${op.controller ? "running" : "NOT running"}` +
      (inFlight ? `; migrating ${inFlight}` : "");
    const map = div.querySelector(".map");
    const width = Math.max(300, div.clientWidth - 4);
    const n = Math.max(1, op.key_groups);
    const size = Math.max(8, Math.min(36, Math.floor(Math.sqrt((width * 220) / n))));
    const cols = Math.max(1, Math.floor(width / size));
    const height = `${Math.ceil(n / cols) * size}px`, w = `${cols * size}px`;
    if (map.style.height !== height || map.style.width !== w) {
      map.style.height = height; map.style.width = w; chart(map).resize(); shown.delete(map);
    }
    update(map, JSON.stringify([size, cols, op.owners, op.holders, op.load, op.moving, op.durable]), groupMapOption(op, cols, size));
    const count = {};
    op.owners.forEach((node) => { count[node] = (count[node] || 0) + 1; });
    div.querySelector(".owners").innerHTML = Object.keys(count).sort((a, b) => nodeIndex(a) - nodeIndex(b))
      .map((node) => `<span data-node="${esc(node)}"><span class="swatch" style="background:${nodeColor(node)}"></span>${esc(node)} owns ${count[node]}</span>`).join("");
    div.dataset.owners = op.owners.join(",");
  }
  for (const div of box.querySelectorAll(".op")) {
    if (seen.has(div.dataset.operator)) continue;
    const map = div.querySelector(".map");
    charts.get(map)?.dispose();
    charts.delete(map);
    shown.delete(map);
    div.remove();
  }
}

// The durable tier's panel (hidden while no task reports a durable writer): each task's
// writer, and the key groups whose durable copy trails, red past the dashboard's limits.
function bytes(n) { return n >= 1 << 20 ? `${fmt(n / (1 << 20), 1)} MiB` : `${fmt(n / 1024, 1)} KiB`; }
function drawDurable(v) {
  const d = v.durable;
  $("#durable-section").hidden = !d;
  if (!d) return;
  const ops = v.operators.filter((op) => op.durable).map((op) =>
    `<span class="durable-op" data-operator="${esc(op.name)}" data-trailing="${op.durable.trailing}" data-lagging="${op.durable.lagging.length}" ` +
    `data-max-checkpoints="${op.durable.max_checkpoints}" data-max-seconds="${op.durable.max_seconds}">` +
    `${esc(op.name)}: ${op.durable.trailing} of ${op.key_groups} groups trailing, at most ${lagText([op.durable.max_checkpoints, op.durable.max_seconds])}` +
    `${op.durable.lagging.length ? `, ${op.durable.lagging.length} LAGGING` : ""}</span>`);
  $("#durable-summary").innerHTML = ops.join("; ") +
    ` <small>(lagging: more than ${d.limits.checkpoints} checkpoints or ${d.limits.seconds} s behind)</small>`;
  $("#durable-tasks tbody").innerHTML = d.tasks.map((t) =>
    `<tr data-task="${t.task}" data-writes="${t.writes}" data-errors="${t.errors}" data-lagging="${t.lagging > 0}">` +
    `<td>${t.task}</td><td>${esc(t.operator)}</td><td>${esc(t.node)}</td><td>${t.writes}</td><td>${fmt(t.write_rate, 1)}</td>` +
    `<td>${bytes(t.bytes)}</td><td class="errors">${t.errors}</td><td>${t.queue}</td><td>${t.trailing}</td>` +
    `<td>${t.trailing ? lagText([t.max_checkpoints, t.max_seconds]) : "–"}</td></tr>`).join("");
  const more = d.trailing_total - d.trailing.length;
  $("#durable-lag tbody").innerHTML = d.trailing.map((r) =>
    `<tr data-operator="${esc(r.operator)}" data-group="${r.group}" data-lagging="${r.lagging}">` +
    `<td>${esc(r.operator)}/${r.group}</td><td>${esc(r.node)}</td><td>${r.checkpoints}</td><td>${fmt(r.seconds, 1)}</td></tr>`).join("") +
    (more > 0 ? `<tr><td colspan="4">and ${more} more trailing</td></tr>` : "") +
    (d.trailing_total ? "" : `<tr><td colspan="4">every key group's durable copy has its newest checkpoint</td></tr>`);
}

function eventText(e) {
  if (e.kind === "migration" || e.what === "restore done") {
    return `${e.kind === "migration" ? "migration " : ""}${e.what}${e.by === "controller" ? " (controller)" : ""}: ${e.operator}/${e.group} task ${e.source ?? "?"} → ${e.target} by ${e.protocol}` +
      (e.seconds != null ? ` in ${fmt(e.seconds * 1000, 0)} ms${e.assisted ? " (checkpoint-assisted)" : ""}` : "") +
      (e.pause != null ? `, paused ${ms(e.pause)}` : "") +
      (e.detail ? ` — ${e.detail}` : "");
  }
  if (e.kind === "move" || (e.kind === "recovery" && e.group != null)) {
    return `${e.what === "owner" ? "owner changed" : e.what}: ${e.operator}/${e.group} task ${e.source} → ${e.target} (${e.protocol}, epoch ${e.epoch})`;
  }
  if (e.kind === "scaling") return `${e.what}: ${e.node}${e.name && e.name !== e.node ? ` (${e.name})` : ""}`;
  if (e.node && e.task == null) return `${e.what}: ${e.node}`;
  return `${e.what}: task ${e.task} of ${e.operator} on ${e.node} (pid ${e.pid})`;
}

function drawTimeline(v) {
  const t1 = v.at * 1000, t0 = t1 - TIMELINE_SECS * 1000;
  const recent = v.events.filter((e) => e.t * 1000 >= t0);
  update($("#timeline"), null, {
    animation: false,
    grid: { left: 70, right: 12, top: 8, bottom: 22 },
    tooltip: { ...TOOLTIP, trigger: "item", formatter: (p) => esc(`${clock(p.data.e.t)} ${eventText(p.data.e)}`) },
    xAxis: { type: "time", min: t0, max: t1, ...AXIS },
    yAxis: { type: "category", data: LANES, ...AXIS, splitLine: { show: true, lineStyle: { color: "#263041" } } },
    series: [{
      type: "scatter",
      data: recent.map((e) => ({
        value: [e.t * 1000, LANES.indexOf(e.kind)], e,
        symbol: e.kind === "failure" ? "rect" : "circle",
        // a done migration's (or restore's) symbol grows with its pause (10 px up to 100 ms, at most 22)
        symbolSize: e.kind === "failure" ? 9 : e.what === "done" || e.pause != null ? 10 + Math.min(12, 120 * (e.pause || 0)) : 6,
        itemStyle: { color: e.kind === "failure" ? "#ff5a5a" : PROTOCOL_COLORS[e.protocol] || "#80e0a0" },
      })),
    }],
  });
  const items = v.events.slice(-200).reverse().map((e) =>
    `<li data-kind="${e.kind}" data-what="${esc(e.what)}" data-group="${e.group ?? ""}" data-task="${e.task ?? ""}" data-node="${esc(e.node ?? "")}" data-protocol="${esc(e.protocol ?? "")}">` +
    `${clock(e.t)} ${esc(eventText(e))}</li>`);
  $("#events").innerHTML = items.join("");
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

function drawAllocation(v) {
  const a = v.allocation;
  const p = $("#allocation-score");
  const el = $("#heatmap");
  if (!a) { el.hidden = true; return; }
  const drift = a.score_drift;
  p.dataset.drift = drift ?? "";
  p.textContent = a.allocation_score == null
    ? `strategy ${a.strategy}: no allocation yet (θ = ${a.theta})` + (a.score_note ? ` — ${a.score_note}` : "")
    : `strategy ${a.strategy}: score now ${fmt(a.allocation_score, 2)}, Algorithm 3 ${fmt(a.reference_score, 2)}; ` +
      `drift ${fmt(drift, 2)} against θ = ${a.theta} (${drift > a.theta ? "ABOVE: re-optimisation due" : "within"})`;
  const c = a.correlation;
  el.hidden = !c;
  if (!c) return;
  const n = c.key_groups.length, side = `${Math.min(520, Math.max(200, n * 6)) + 60}px`;
  if (el.style.height !== side) { el.style.height = side; el.style.width = side; chart(el).resize(); shown.delete(el); }
  const key = JSON.stringify(c);
  if (shown.get(el) === key) return; // the controller rewrites it once a round
  const data = [];
  for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) data.push([j, i, c.matrix[i][j] ?? 0]);
  const axis = (inverse) => ({ type: "category", data: c.key_groups, inverse, ...AXIS, axisLabel: { show: false }, axisTick: { show: false }, splitLine: { show: false } });
  update(el, key, {
    animation: false,
    grid: { left: 8, right: 8, top: 8, bottom: 44 },
    tooltip: { ...TOOLTIP, trigger: "item", formatter: (q) => `${esc(c.key_groups[q.value[1]])} × ${esc(c.key_groups[q.value[0]])}: r = ${fmt(q.value[2], 3)}` },
    xAxis: axis(false), yAxis: axis(true),
    visualMap: { min: -1, max: 1, calculable: false, orient: "horizontal", left: "center", bottom: 0, itemHeight: 120, itemWidth: 10,
      textStyle: { color: "#8a96a8" }, inRange: { color: ["#2860e0", "#1e2633", "#e03030"] } },
    series: [{ type: "heatmap", data, progressive: 0, progressiveThreshold: 1e9 }], // drawn whole, not in chunks
  });
}

function drawStorm(v) {
  const s = v.storm;
  if (!s) { $("#storm").textContent = v.storm_error || "Nimbus not asked"; return; }
  const sup = s.supervisors.map((x) => `<tr><td>${esc(x.host)}</td><td>${esc(x.id.slice(0, 12))}</td><td>${x.used}/${x.slots}</td></tr>`).join("");
  const top = s.topologies.map((t) => `<tr><td>${esc(t.name)}</td><td>${esc(t.status)}</td><td>${t.workers}</td><td>${t.executors}</td><td>${t.uptime_secs} s</td></tr>`).join("");
  $("#storm").innerHTML = `<table><thead><tr><th>supervisor</th><th>id</th><th>slots used</th></tr></thead><tbody>${sup}</tbody></table>` +
    `<table><thead><tr><th>topology</th><th>status</th><th>workers</th><th>executors</th><th>uptime</th></tr></thead><tbody>${top}</tbody></table>`;
}

function drawActionsSection(v) {
  $("#actions-section").hidden = !v.actions;
  if (v.actions) drawActions(v);
}

const PANELS = [
  drawHeader, drawProblems, drawNodes, drawOperatorCharts, drawDurable, drawOperators,
  drawTimeline, drawPaper, drawAllocation, drawStorm, drawActionsSection,
];

function draw(v) {
  const began = performance.now();
  latest = v;
  // One panel whose draw throws is logged and skipped: the others (the events list
  // among them) still show the new view.
  for (const panel of PANELS) {
    try { panel(v); } catch (err) { console.error(`${panel.name}: ${err?.stack || err}`); }
  }
  // What the last draw cost, for bench/dashboard_cost.py (1,000 key groups, 50 nodes):
  // drawMs = the synchronous work (ECharts paints in setOption); frameMs = until the
  // next frame was shown (what a user waits for).
  const body = document.body.dataset;
  body.drawMs = (performance.now() - began).toFixed(2);
  body.draws = String(+(body.draws || 0) + 1);
  requestAnimationFrame(() => { body.frameMs = (performance.now() - began).toFixed(2); });
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

// The drain form lists the nodes the scheduler bound (by name); the list is rebuilt only
// when it changes, so a choice survives the updates.
function drawActions(v) {
  const names = v.nodes.filter((n) => n.name).map((n) => n.name);
  const select = $("#drain-form select");
  if (select.dataset.names !== names.join(",")) {
    const chosen = select.value;
    select.innerHTML = names.map((n) => `<option${n === chosen ? " selected" : ""}>${esc(n)}</option>`).join("");
    select.dataset.names = names.join(",");
  }
}

// Every action: POST with the token; the answer is shown, the outcome shows in the view.
async function act(path, body) {
  const res = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: `Bearer ${$("#token").value}` },
    body: JSON.stringify(body),
  });
  const out = $("#action-result");
  out.textContent = `${path} ${res.status}: ${JSON.stringify(await res.json())}`;
  out.dataset.status = res.status;
}

function onSubmit(id, body) {
  $(id).addEventListener("submit", (e) => {
    e.preventDefault();
    act(e.target.getAttribute("action"), body(new FormData(e.target)));
  });
}
onSubmit("#migrate-form", (f) => ({ operator: f.get("operator"), group: +f.get("group"), target: f.get("target"), protocol: f.get("protocol") }));
onSubmit("#drain-form", (f) => ({ node: f.get("node"), keep: f.get("keep") === "on" }));
onSubmit("#scale-form", (f) => ({ nodes: +f.get("nodes") }));
window.addEventListener("resize", () => {
  for (const c of charts.values()) c.resize();
  if (latest) drawOperators(latest);
});
connect();
