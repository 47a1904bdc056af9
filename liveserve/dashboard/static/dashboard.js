// LiveServe's dashboard: polls dashboard/feed every data-every-ms and redraws; no build step, uPlot for the charts.
"use strict";

const EVERY_MS = Number(document.body.dataset.everyMs) || 1000;
const KEEP = 300;  // samples kept per chart (the feed keeps 5 minutes, one a second)
const CLASSES = ["u0", "u1", "u2", "fallbacks", "speculative", "held", "yielded", "gated"];
const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

const history = {seq: 0, t: [], columns: {}};
const charts = {};
let updates = 0;

function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = text;
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

function fmt(value, digits, unit) {
  if (value === null || value === undefined) return "–";
  return value.toFixed(digits) + (unit || "");
}

function pct(share) {
  return share === null || share === undefined ? "–" : (100 * share).toFixed(1) + " %";
}

function seconds(value) {
  if (value === null || value === undefined) return "–";
  return value < 60 ? value.toFixed(1) + " s" : Math.floor(value / 60) + " min " + Math.round(value % 60) + " s";
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function sessionRow(s) {
  const mark = s.barge_in_s === null ? "" : (s.last_barge_in ? "\u26a1 " : "") + seconds(s.barge_in_s) + " ago";
  const row = el("tr", null, {"data-session": s.id, "data-state": s.state, "data-kv": s.kv,
                              "data-barge-in": s.last_barge_in ? "last" : (s.barge_in_s === null ? "" : "earlier")});
  row.append(el("td", s.id, {class: "id"}), el("td", s.state, {class: "state " + s.state.replace(" ", "-")}),
             el("td", s.buffer_ms + " ms"), el("td", s.urgency || "–", {class: "urgency " + s.urgency}),
             el("td", (s.device_tokens ?? "–") + " / " + s.context_tokens), el("td", s.kv, {class: "kv " + s.kv.replace(" ", "-")}),
             el("td", s.next_use_s === 0 ? "now" : seconds(s.next_use_s)), el("td", mark), el("td", seconds(s.age_s)));
  if (s.last_barge_in) row.classList.add("barged");
  return row;
}

function stageRow(s) {
  const row = el("tr", null, {"data-stage": s.name});
  row.append(el("td", s.name), el("td", s.requests), el("td", s.queue), el("td", s.batch),
             el("td", fmt(s.steps_per_s, 1)), el("td", s.busy === null ? "–" : pct(s.busy)));
  for (const name of CLASSES) row.append(el("td", name in s.classes ? fmt(s.classes[name], 2) : "–"));
  return row;
}

function kvRow(k) {
  const host = k.host === null ? "no host tier" : pct(k.host) + " (" + k.host_blocks[0] + " / " + k.host_blocks[1] + ")";
  const reloads = k.reload_critical_s === null ? "–"
    : fmt(k.reload_critical_s, 2, " s") + " / " + fmt(k.reload_background_s, 2, " s");
  const row = el("tr", null, {"data-stage": k.stage, "data-device": k.device, "data-host": k.host === null ? "" : k.host});
  row.append(el("td", k.stage), el("td", pct(k.device) + " (" + k.device_blocks[0] + " / " + k.device_blocks[1] + ")"),
             el("td", host), el("td", k.t_sat_s === null ? "not filling" : seconds(k.t_sat_s)),
             el("td", k.warning ? "fills before sessions end" : "", {class: k.warning ? "warning" : ""}), el("td", reloads));
  return row;
}

function bars(container, summary, label) {
  const most = Math.max(1, ...summary.counts);
  const rows = summary.counts.map((count, i) => {
    const bound = i < summary.le.length ? "\u2264 " + Math.round(1000 * summary.le[i]) + " ms" : "more";
    const bar = el("div", null, {class: "bar"});
    bar.style.width = (100 * count / most).toFixed(1) + "%";
    const row = el("div", null, {class: "bar-row"});
    row.append(el("span", bound, {class: "bound"}), el("span", null, {class: "track"}), el("span", count, {class: "count"}));
    row.children[1].append(bar);
    return row;
  });
  container.replaceChildren(...rows);
  const q = (name) => summary[name] === null ? "–" : Math.round(1000 * summary[name]) + " ms";
  document.getElementById(label).textContent = summary.count
    ? "p50 " + q("p50") + ", p90 " + q("p90") + ", p99 " + q("p99") + " (" + summary.count + ")" : "none yet";
}

function remember(series, uptime) {
  const offset = Date.now() / 1000 - uptime;
  const known = history.t.length;
  for (const name of Object.keys(series.columns)) {
    if (!(name in history.columns)) history.columns[name] = new Array(known).fill(null);
  }
  for (const t of series.t) history.t.push(t + offset);
  for (const [name, values] of Object.entries(history.columns)) {
    values.push(...(series.columns[name] || new Array(series.t.length).fill(null)));
  }
  const extra = history.t.length - KEEP;
  if (extra > 0) {
    history.t.splice(0, extra);
    for (const values of Object.values(history.columns)) values.splice(0, extra);
  }
  history.seq = series.seq;
}

// y from 0 to a little over the largest value (at least `least`), so small occupancies show
function upTo(least) {
  return (plot, min, max) => [0, Math.max(least, 1.15 * (max || 0))];
}

function chart(id, names, labels, yLabel, least) {
  const node = document.getElementById(id);
  const key = names.join(",");
  if (!charts[id] || charts[id].key !== key) {
    if (charts[id]) charts[id].plot.destroy();
    const series = [{}, ...names.map((name, i) => ({label: labels[i], stroke: COLOURS[i % COLOURS.length], width: 1.5,
                                                     dash: name.endsWith(".host") || name.endsWith(".background") ? [6, 4] : undefined}))];
    const options = {width: Math.max(300, node.clientWidth), height: 180, series,
                     axes: [{}, {label: yLabel, size: 60}], scales: {y: {range: upTo(least)}},
                     legend: {live: false}};
    charts[id] = {key, plot: new uPlot(options, [[], ...names.map(() => [])], node)};
  }
  charts[id].plot.setData([history.t, ...names.map((name) => history.columns[name])]);
}

function draw(state) {
  document.getElementById("model").textContent = state.model;
  document.getElementById("uptime").textContent = "up " + seconds(state.uptime_s);
  fill(document.getElementById("session-rows"), state.sessions.map(sessionRow));
  document.getElementById("no-sessions").hidden = state.sessions.length > 0;
  fill(document.getElementById("stage-rows"), state.stages.map(stageRow));
  fill(document.getElementById("kv-rows"), state.kv.map(kvRow));
  remember(state.series, state.uptime_s);
  const names = Object.keys(history.columns);
  const kv = names.filter((name) => name.startsWith("kv."));
  chart("kv-chart", kv, kv.map((name) => name.slice(3)), "occupancy", 0.01);
  const reload = names.filter((name) => name.startsWith("reload."));
  if (reload.length) chart("reload-chart", reload, reload.map((name) => name.slice(7)), "reload ms per s", 1);
  chart("admission-chart", ["sessions", "streams", "cap", "rejected"],
        ["sessions", "duplex streams", "stream cap", "rejected (total)"], "count", 1);
  const a = state.admission;
  const figures = [["policy", a.policy], ["stream cap", a.cap], ["duplex streams", a.streams],
                   ["sessions", a.sessions + " of " + a.max_sessions], ["sessions refused", a.rejected_sessions],
                   ["streams admitted / refused", a.admitted_streams + " / " + a.rejected_streams],
                   ["last interval's p99 frame latency", fmt(a.p99_ms, 1, " ms")]];
  document.getElementById("admission-figures").replaceChildren(...figures.flatMap(([k, v]) => [el("dt", k), el("dd", v)]));
  document.getElementById("latency-window").textContent = "over the last " + seconds(state.latency.ttfp.window_s);
  bars(document.getElementById("ttfp-bars"), state.latency.ttfp, "ttfp-quantiles");
  bars(document.getElementById("frame-bars"), state.latency.frame, "frame-quantiles");
}

function status(text, ok) {
  const link = document.getElementById("link");
  link.textContent = text;
  link.className = "link " + (ok ? "ok" : "down");
}

async function poll() {
  try {
    const response = await fetch("dashboard/feed?since=" + history.seq, {cache: "no-store"});
    const body = await response.json();
    if (!response.ok) throw new Error(body.error ? body.error.message : response.statusText);
    draw(body);
    updates += 1;
    document.body.dataset.updates = updates;
    status("live, every " + EVERY_MS + " ms", true);
  } catch (error) {
    status("no answer: " + error.message, false);
  }
  setTimeout(poll, EVERY_MS);
}

poll();
