// uldp analyst console (docs/analyst.md, "Console"). Plain JavaScript, no dependency, served
// by the collector itself. It talks to the Analyst service over Connect with JSON from the
// same origin (POST /uldp.v1.AnalystService/<Method>, WatchQuery as a Connect server
// stream) and to POST /console/api/preview; the admin token lives in sessionStorage.
// Every plotted interval carries its numbers in data-* attributes (data-value, data-low,
// data-high) beside the geometry, so a test can check what is drawn.
"use strict";

const SERVICE = "/uldp.v1.AnalystService/";
const KINDS = ["mean", "mean-linf", "mean-l2", "mean-l1", "distribution", "classify", "regress", "sgd"];
const METHODS = ["", "ssl", "two-stage", "two-stage-sized", "two-stage-adaptive", "oracle", "baseline-a", "baseline-b"];
const STATES = ["running", "done", "cancelled", "failed"];
const SVGNS = "http://www.w3.org/2000/svg";
const main = () => document.getElementById("main");

// ---- small DOM helpers -----------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}
function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}
const fmt = (x, d = 4) => (x === null || x === undefined || Number.isNaN(x)) ? "–" : Number(x).toFixed(d);
const pm = (x) => "±" + fmt(x, 4);
const wide = (half) => `${fmt(2 * half, 4)} (${pm(half)})`;
const when = (ms) => ms ? new Date(ms).toLocaleString() : "–";

// ---- the token ----------------------------------------------------------------------------------
let signingIn = false;
const token = {
  get: () => sessionStorage.getItem("uldp.admin") || "",
  set: (t) => sessionStorage.setItem("uldp.admin", t),
  clear: () => sessionStorage.removeItem("uldp.admin"),
};

// ---- calls ------------------------------------------------------------------------------------
class ApiError extends Error {
  constructor(code, message) { super(`${code}: ${message}`); this.code = code; this.detail = message; }
}
function headers(type) {
  return { "content-type": type, "connect-protocol-version": "1", "authorization": "Bearer " + token.get() };
}
async function answer(r) {
  const text = await r.text();
  if (r.ok) return text ? JSON.parse(text) : {};
  let e = {};
  try { e = JSON.parse(text); } catch { /* not JSON */ }
  if ((r.status === 401 || e.code === "unauthenticated") && !signingIn) { signOut("The collector refused the token: sign in again."); }
  throw new ApiError(e.code || `http ${r.status}`, e.message || text || r.statusText);
}
async function call(method, body) {
  return answer(await fetch(SERVICE + method, { method: "POST", headers: headers("application/json"), body: JSON.stringify(body || {}) }));
}
async function preview(body, simulate = true) {
  return answer(await fetch("/console/api/preview" + (simulate ? "" : "?simulate=0"), { method: "POST", headers: headers("application/json"), body: JSON.stringify(body) }));
}
async function odometer() {
  return answer(await fetch("/console/api/odometer", { method: "GET", headers: headers("application/json") }));
}
// WatchQuery as a Connect server stream: enveloped JSON messages, the last one flagged 0x02.
async function* watch(queryId, signal) {
  const json = new TextEncoder().encode(JSON.stringify({ queryId }));
  const frame = new Uint8Array(5 + json.length);
  new DataView(frame.buffer).setUint32(1, json.length);
  frame.set(json, 5);
  const r = await fetch(SERVICE + "WatchQuery", { method: "POST", headers: headers("application/connect+json"), body: frame, signal });
  if (!r.ok) await answer(r);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = new Uint8Array(0);
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    const joined = new Uint8Array(buf.length + value.length);
    joined.set(buf); joined.set(value, buf.length); buf = joined;
    while (buf.length >= 5) {
      const n = new DataView(buf.buffer, buf.byteOffset).getUint32(1);
      if (buf.length < 5 + n) break;
      const flags = buf[0];
      const msg = JSON.parse(dec.decode(buf.subarray(5, 5 + n)) || "{}");
      buf = buf.slice(5 + n);
      if (flags & 2) {
        if (msg.error) throw new ApiError(msg.error.code, msg.error.message || "");
        return;
      }
      yield msg;
    }
  }
}

// proto3 JSON → plain records (64-bit integers arrive as strings, zero values are omitted)
function normQuery(q) {
  const st = (s, p) => (s || (p + "UNSPECIFIED")).replace(p, "").toLowerCase();
  return {
    id: q.queryId, kind: q.kind, dataset: q.dataset || "", epsilon: Number(q.epsilon || 0),
    state: st(q.state, "QUERY_STATE_"), current: q.currentPhase || 0,
    phases: (q.phases || []).map((p) => ({
      index: p.index || 0, state: st(p.state, "PHASE_STATE_"), quota: Number(p.quota || 0),
      received: Number(p.received || 0), opened: Number(p.openedAtMs || 0), deadline: Number(p.deadlineMs || 0),
      closed: Number(p.closedAtMs || 0) })),
    assigned: Number(q.assigned || 0), target: Number(q.targetUsers || 0), created: Number(q.createdAtMs || 0),
    finished: Number(q.finishedAtMs || 0), spec: q.specJson ? JSON.parse(q.specJson) : {}, error: q.error || "",
  };
}
function normResult(r) {
  const est = r.estimateJson ? JSON.parse(r.estimateJson) : {};
  return { id: r.queryId, kind: r.kind, values: r.values || [], low: r.ciLow || [], high: r.ciHigh || [],
    confidence: r.confidence || 0, reports: (r.reportsPerPhase || []).map(Number), est };
}

// ---- scales and axes ----------------------------------------------------------------------------
function ticks(lo, hi, n = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
  return out;
}
function scale(d0, d1, r0, r1, log = false) {
  const f = log ? Math.log : (x) => x;
  const a = f(d0), b = f(d1);
  const s = (x) => r0 + (f(x) - a) / ((b - a) || 1) * (r1 - r0);
  s.domain = [d0, d1]; s.range = [r0, r1]; s.log = log;
  return s;
}
function padded(lo, hi, frac = 0.08) {
  if (!(hi > lo)) { lo -= 0.5; hi += 0.5; }
  const p = (hi - lo) * frac;
  return [lo - p, hi + p];
}
function label(x) {
  const a = Math.abs(x);
  return a === 0 ? "0" : (a >= 1000 || a < 0.001) ? x.toExponential(1) : String(+x.toPrecision(3));
}
// a chart: an <svg> with its scales recorded in data-* (x: data space to pixels, both axes)
function frame(w, h, m, title) {
  const s = svg("svg", { class: "chart", viewBox: `0 0 ${w} ${h}`, role: "img" });
  if (title) s.append(svg("text", { class: "title", x: m.l, y: 14 }, title));
  return s;
}
function record(s, name, sc) {
  s.setAttribute(`data-${name}-domain`, sc.domain.join(","));
  s.setAttribute(`data-${name}-range`, sc.range.join(","));
  if (sc.log) s.setAttribute(`data-${name}-log`, "1");
}
function yAxis(s, y, x0, x1, fmtf = label) {
  const g = svg("g", { class: "axis" });
  for (const t of ticks(Math.min(...y.domain), Math.max(...y.domain))) {
    g.append(svg("line", { class: "gridline", x1: x0, x2: x1, y1: y(t), y2: y(t) }));
    g.append(svg("text", { x: x0 - 6, y: y(t) + 4, "text-anchor": "end" }, fmtf(t)));
  }
  s.append(g);
}
function xAxis(s, x, y0, values, fmtf = label) {
  const g = svg("g", { class: "axis" });
  g.append(svg("line", { x1: x.range[0], x2: x.range[1], y1: y0, y2: y0 }));
  for (const t of values || ticks(Math.min(...x.domain), Math.max(...x.domain))) {
    g.append(svg("line", { x1: x(t), x2: x(t), y1: y0, y2: y0 + 4 }));
    // a label at the right end is anchored there, so the chart does not cut it
    g.append(svg("text", { x: x(t), y: y0 + 16, "text-anchor": x(t) > x.range[1] - 24 ? "end" : "middle" }, fmtf(t)));
  }
  s.append(g);
}
function whisker(g, attrs, x1, y1, x2, y2, cap, vertical) {
  g.append(svg("line", { class: "whisker", x1, y1, x2, y2, ...attrs }));
  if (vertical) {
    g.append(svg("line", { class: "whisker", x1: x1 - cap, x2: x1 + cap, y1, y2: y1 }));
    g.append(svg("line", { class: "whisker", x1: x2 - cap, x2: x2 + cap, y1: y2, y2 }));
  } else {
    g.append(svg("line", { class: "whisker", x1, x2: x1, y1: y1 - cap, y2: y1 + cap }));
    g.append(svg("line", { class: "whisker", x1: x2, x2, y1: y2 - cap, y2: y2 + cap }));
  }
}
const dataOf = (i, v, lo, hi) => ({ "data-component": i, "data-value": v, "data-low": lo, "data-high": hi });

// distribution: bars with error whiskers
function barsChart(r, names) {
  const n = r.values.length, w = 760, h = 320, m = { l: 56, r: 16, t: 26, b: 44 };
  const [lo, hi] = padded(Math.min(0, ...r.low), Math.max(...r.high), 0.05);
  const s = frame(w, h, m, `share of users per category, ${Math.round(r.confidence * 100)}% intervals`);
  const x = scale(0, n, m.l, w - m.r), y = scale(lo, hi, h - m.b, m.t);
  record(s, "x", x); record(s, "y", y); s.setAttribute("data-plot", "bars");
  yAxis(s, y, m.l, w - m.r);
  const bw = (x(1) - x(0)) * 0.62, g = svg("g", {});
  r.values.forEach((v, i) => {
    const cx = (x(i) + x(i + 1)) / 2;
    g.append(svg("rect", { class: "barfill", x: cx - bw / 2, width: bw, y: Math.min(y(v), y(0)), height: Math.abs(y(0) - y(v)), "data-component": i, "data-value": v }));
    whisker(g, { "data-interval": "", ...dataOf(i, v, r.low[i], r.high[i]) }, cx, y(r.low[i]), cx, y(r.high[i]), bw / 4, true);
  });
  s.append(g);
  xAxis(s, x, y(Math.max(lo, 0)), [], label);
  r.values.forEach((_, i) => s.append(svg("text", { x: (x(i) + x(i + 1)) / 2, y: h - m.b + 16, "text-anchor": "middle" }, names ? names[i] : String(i))));
  s.append(svg("text", { x: (m.l + w - m.r) / 2, y: h - 8, "text-anchor": "middle" }, "category"));
  return s;
}
// means: a point and its interval per component
function pointsChart(r) {
  const n = r.values.length, rowH = 26, w = 760, m = { l: 56, r: 24, t: 30, b: 40 };
  const h = m.t + m.b + Math.max(n, 1) * rowH;
  const [lo, hi] = padded(Math.min(...r.low), Math.max(...r.high));
  const s = frame(w, h, m, `estimate and ${Math.round(r.confidence * 100)}% interval per component`);
  const x = scale(lo, hi, m.l, w - m.r), y = scale(0, Math.max(n, 1), m.t, h - m.b);
  record(s, "x", x); record(s, "y", y); s.setAttribute("data-plot", "points");
  for (const t of ticks(lo, hi)) s.append(svg("line", { class: "gridline", x1: x(t), x2: x(t), y1: m.t, y2: h - m.b }));
  if (lo < 0 && hi > 0) s.append(svg("line", { class: "zero", x1: x(0), x2: x(0), y1: m.t, y2: h - m.b }));
  const g = svg("g", {});
  r.values.forEach((v, i) => {
    const cy = (y(i) + y(i + 1)) / 2;
    s.append(svg("text", { x: m.l - 8, y: cy + 4, "text-anchor": "end" }, `#${i}`));
    whisker(g, { "data-interval": "", ...dataOf(i, v, r.low[i], r.high[i]) }, x(r.low[i]), cy, x(r.high[i]), cy, 6, false);
    g.append(svg("circle", { class: "point", cx: x(v), cy, r: 4.5, "data-component": i, "data-value": v }));
  });
  s.append(g);
  xAxis(s, x, h - m.b, null);
  return s;
}
// classify / regress: the learned function over the grid (one feature), with its band
function functionChart(r, spec) {
  const ex = spec.extra || {}, M = Number(ex.grid || 1), d = spec.dim || 1;
  const lo0 = (ex.lo || [0])[0], hi0 = (ex.hi || [1])[0];
  const cells = Math.pow(M, d);
  let vals, lows, highs, ylab;
  if (r.kind === "regress") {
    const K = r.values.length / 2, T = Number(ex.label_bound || 1);
    const floor = Number(ex.density_floor || 0.5) / (2 * cells);
    vals = []; lows = []; highs = [];
    for (let c = 0; c < cells; c++) {
      const q = r.values[c], p = r.values[K + c];
      const pl = Math.max(r.low[K + c], floor), ph = Math.max(r.high[K + c], floor);
      vals.push(p > floor ? T * q / p : 0);
      const ends = [r.low[c] / pl, r.low[c] / ph, r.high[c] / pl, r.high[c] / ph].map((z) => Math.max(-T, Math.min(T, T * z)));
      lows.push(Math.min(...ends)); highs.push(Math.max(...ends));
    }
    ylab = "regression function (label), interval from the cell intervals";
  } else {
    vals = r.values.slice(0, cells); lows = r.low.slice(0, cells); highs = r.high.slice(0, cells);
    ylab = "mean of label·1{cell} (the class is its sign)";
  }
  const w = 760, h = 320, m = { l: 56, r: 16, t: 26, b: 44 };
  const [ylo, yhi] = padded(Math.min(0, ...lows), Math.max(0, ...highs));
  const s = frame(w, h, m, d === 1 ? "the learned function over the feature" : `the learned function per grid cell (${cells} cells)`);
  const x = d === 1 ? scale(lo0, hi0, m.l, w - m.r) : scale(0, cells, m.l, w - m.r);
  const y = scale(ylo, yhi, h - m.b, m.t);
  record(s, "x", x); record(s, "y", y); s.setAttribute("data-plot", "function");
  yAxis(s, y, m.l, w - m.r);
  s.append(svg("line", { class: "zero", x1: m.l, x2: w - m.r, y1: y(0), y2: y(0) }));
  const edge = (c) => d === 1 ? lo0 + (hi0 - lo0) * c / M : c;
  const g = svg("g", {});
  let path = "";
  vals.forEach((v, c) => {
    const xa = x(edge(c)), xb = x(edge(c + 1));
    g.append(svg("rect", { class: "band", x: xa, width: xb - xa, y: y(highs[c]), height: Math.max(y(lows[c]) - y(highs[c]), 0.5), "data-interval": "", ...dataOf(c, v, lows[c], highs[c]) }));
    path += `${c ? "L" : "M"}${xa},${y(v)}L${xb},${y(v)}`;
  });
  s.append(g, svg("path", { class: "line", d: path }));
  xAxis(s, x, h - m.b, null);
  s.append(svg("text", { x: m.l, y: h - 6 }, d === 1 ? "feature" : "cell"), svg("text", { x: w - m.r, y: h - 6, "text-anchor": "end" }, ylab));
  return s;
}
// a line chart (preview curves): points [{x, y, y2}] with the current x marked
function lineChart(pts, opts) {
  const w = 520, h = 240, m = { l: 58, r: 14, t: 26, b: 42 };
  const xs = pts.map((p) => p.x), ys = pts.flatMap((p) => [p.y, p.y2]).filter((v) => v > 0);
  const s = frame(w, h, m, opts.title);
  const x = scale(Math.min(...xs), Math.max(...xs), m.l, w - m.r, true);
  const y = scale(0, Math.max(...ys) * 1.08 || 1, h - m.b, m.t);
  record(s, "x", x); record(s, "y", y); s.setAttribute("data-plot", "line");
  yAxis(s, y, m.l, w - m.r);
  const line = (key) => pts.filter((p) => p[key] > 0).map((p, i) => `${i ? "L" : "M"}${x(p.x)},${y(p[key])}`).join("");
  if (pts.some((p) => p.y2 > 0)) s.append(svg("path", { class: "line2", d: line("y2") }));
  s.append(svg("path", { class: "line", d: line("y") }));
  for (const p of pts) s.append(svg("circle", { class: "point", cx: x(p.x), cy: y(p.y), r: 3, "data-x": p.x, "data-width": p.y }));
  const cur = pts.find((p) => p.x === opts.mark);
  if (cur) s.append(svg("circle", { class: "mark", cx: x(cur.x), cy: y(cur.y), r: 6, "data-current": "", "data-x": cur.x, "data-width": cur.y }));
  xAxis(s, x, h - m.b, xs, opts.xfmt || label);
  s.append(svg("text", { x: (m.l + w - m.r) / 2, y: h - 6, "text-anchor": "middle" }, opts.xlabel));
  return s;
}
// budgets: ε per dataset, one segment per query, coloured by its state
function budgetChart(rows) {
  const rowH = 30, w = 760, m = { l: 150, r: 70, t: 30, b: 36 };
  const h = m.t + m.b + Math.max(rows.length, 1) * rowH;
  const max = Math.max(...rows.map((r) => r.total), 1e-9);
  const s = frame(w, h, m, "ε asked of each dataset, summed over its queries");
  const x = scale(0, max * 1.05, m.l, w - m.r);
  record(s, "x", x); s.setAttribute("data-plot", "budget");
  for (const t of ticks(0, max * 1.05)) s.append(svg("line", { class: "gridline", x1: x(t), x2: x(t), y1: m.t, y2: h - m.b }));
  rows.forEach((r, i) => {
    const y0 = m.t + i * rowH + 4;
    s.append(svg("text", { x: m.l - 8, y: y0 + 15, "text-anchor": "end" }, r.dataset.length > 22 ? r.dataset.slice(0, 21) + "…" : r.dataset));
    let acc = 0;
    for (const q of r.queries) {
      s.append(svg("rect", { class: `seg-${q.state} seg-edge`, x: x(acc), y: y0, width: Math.max(x(acc + q.epsilon) - x(acc), 0.5), height: rowH - 10, "data-query": q.id, "data-epsilon": q.epsilon },
        svg("title", {}, `${q.id}: ε ${q.epsilon} (${q.state})`)));
      acc += q.epsilon;
    }
    s.append(svg("text", { x: x(acc) + 6, y: y0 + 15, "data-total": r.total }, `ε ${label(r.total)}`));
  });
  xAxis(s, x, h - m.b, null);
  return s;
}

// ---- pages --------------------------------------------------------------------------------------
let stop = () => {};
function show(...nodes) { main().replaceChildren(...nodes); }
function badge(state) { return el("span", { class: `badge ${state}`, "data-state": state }, state); }
function phaseBars(q) {
  return el("div", { class: "bars" }, q.phases.map((p) => {
    const b = el("div", { class: `bar ${p.state}`, title: `phase ${p.index}: ${p.received}/${p.quota} (${p.state})` }, el("span"));
    b.firstChild.style.width = `${p.quota ? Math.min(100, 100 * p.received / p.quota) : 0}%`;
    return b;
  }));
}
function live(on) { document.getElementById("live").className = on ? "live on" : "live"; document.getElementById("live").textContent = on ? "live" : ""; }
function failure(e) { return el("p", { class: "error" }, e instanceof ApiError ? `${e.code}: ${e.detail}` : String(e)); }

function loginPage(message) {
  const input = el("input", { type: "password", id: "token", autocomplete: "off", placeholder: "admin token" });
  const msg = el("p", { class: "error", hidden: !message }, message || "");
  const form = el("form", { class: "card login", onsubmit: async (ev) => {
    ev.preventDefault();
    token.set(input.value.trim());
    signingIn = true;
    try { await call("ListQueries", {}); signingIn = false; route(); } catch (e) {
      signingIn = false; token.clear(); msg.hidden = false;
      msg.textContent = e instanceof ApiError ? `${e.code}: ${e.detail}` : String(e);
    }
  } }, el("h1", { text: "Sign in" }),
  el("p", { class: "muted" }, "The collector's admin token (", el("code", { text: "admin.token" }), "). It is kept in this tab only."),
  input, msg, el("button", { type: "submit", id: "signin" }, "Sign in"));
  document.getElementById("signout").hidden = true;
  show(form);
  input.focus();
}
function signOut(message) { token.clear(); stop(); stop = () => {}; loginPage(typeof message === "string" ? message : ""); }

async function queriesPage() {
  const body = el("tbody");
  const table = el("table", { id: "queries" }, el("thead", {}, el("tr", {}, ["query", "kind", "dataset", "ε", "state", "phases", "assigned", "created"].map((h, i) => el("th", { class: [3, 6].includes(i) ? "num" : null }, h)))), body);
  const err = el("div");
  show(el("h1", { text: "Queries" }), el("div", { class: "card" }, table, err));
  let alive = true;
  stop = () => { alive = false; live(false); };
  live(true);
  while (alive) {
    try {
      const qs = ((await call("ListQueries", {})).queries || []).map(normQuery).reverse();
      body.replaceChildren(...(qs.length ? qs.map((q) => el("tr", { "data-query": q.id },
        el("td", {}, el("a", { href: `#/query/${encodeURIComponent(q.id)}` }, q.id)), el("td", { text: q.kind }), el("td", { text: q.dataset }),
        el("td", { class: "num", text: label(q.epsilon) }), el("td", {}, badge(q.state)), el("td", {}, phaseBars(q)),
        el("td", { class: "num", text: `${q.assigned}/${q.target}` }), el("td", { class: "muted", text: when(q.created) }))) :
        [el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No queries yet: ", el("a", { href: "#/new" }, "preview and create one"), "."))]));
      err.replaceChildren();
    } catch (e) { err.replaceChildren(failure(e)); }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function kpi(labelText, value, attrs) { return el("div", {}, el("div", { class: "label", text: labelText }), el("div", { class: "big", ...(attrs || {}) }, value)); }

function resultView(q, r) {
  const est = r.est, auto = est.auto || null, central = (est.privacy && est.privacy.central_epsilon !== undefined) ? est.privacy : null;
  const widths = r.values.map((_, i) => r.high[i] - r.low[i]);
  let chart;
  if (r.kind === "distribution") chart = barsChart(r);
  else if ((r.kind === "classify" || r.kind === "regress") && q.spec.extra && q.spec.extra.grid) chart = functionChart(r, q.spec);
  else chart = pointsChart(r);
  chart.id = "result-chart";
  const rows = r.values.map((v, i) => el("tr", { "data-component": i }, el("td", { text: `#${i}` }), el("td", { class: "num", text: fmt(v) }),
    el("td", { class: "num", text: `[${fmt(r.low[i])}, ${fmt(r.high[i])}]` }), el("td", { class: "num", text: fmt(widths[i]) }),
    el("td", { class: "num", text: est.std_error ? fmt(est.std_error[i]) : "–" })));
  return el("div", { class: "card", id: "result", "data-query": q.id },
    el("h2", { text: "Result" }),
    el("div", { class: "kpis" }, kpi("method", est.method || q.spec.method || "–", { id: "method" }),
      kpi("ε per device", label(q.epsilon)), kpi("central ε", central ? `${label(central.central_epsilon)} (δ ${central.delta})` : "local only", { id: "central" }),
      kpi("confidence", `${Math.round(r.confidence * 100)}%`), kpi("reports", r.reports.reduce((a, b) => a + b, 0))),
    el("p", { class: "muted" }, "Estimand: ", el("b", { id: "estimand", text: estimandOf(r.kind) }),
      auto ? ` · auto chose ${auto.chosen}${auto.mode ? ` (${auto.mode} grouping)` : ""}` : ""),
    chart,
    el("table", { id: "result-table" }, el("thead", {}, el("tr", {}, ["#", "estimate", "interval", "width", "std. error"].map((h, i) => el("th", { class: i ? "num" : null }, h)))), el("tbody", {}, rows)),
    ...(est.advisories || []).map((a) => el("p", { class: "note", text: a })));
}
function estimandOf(kind) {
  return {
    mean: "mean over users of each user's mean", "mean-linf": "mean over users of each user's mean vector",
    "mean-l2": "mean over users of each user's mean vector", "mean-l1": "mean over users of each user's mean vector",
    distribution: "mean over users of each user's category frequencies",
    classify: "per grid cell: mean over users of each user's mean of label·1{x in cell} (its sign is the classifier)",
    regress: "per grid cell: mean over users of each user's mean of label·1{x in cell}, then of 1{x in cell} (their ratio is the regression function)",
    sgd: "model parameters after the private SGD steps",
  }[kind] || "mean over users of each user's statistic";
}

async function queryPage(id) {
  const head = el("div"), phases = el("div", { class: "phases card", id: "phases" }), result = el("div"), err = el("div");
  show(el("p", {}, el("a", { href: "#/queries" }, "← all queries")), head, phases, result, err);
  const ctl = new AbortController();
  let alive = true;
  stop = () => { alive = false; ctl.abort(); live(false); };
  const draw = (q) => {
    head.replaceChildren(el("h1", {}, `${q.id} `, badge(q.state)),
      el("p", { class: "muted" }, `${q.kind} over “${q.dataset}”, ε ${label(q.epsilon)} per device, ${q.target} users, method ${q.spec.method || "auto"}, created ${when(q.created)}`),
      q.error ? el("p", { class: "error", text: q.error }) : "",
      q.state === "running" ? el("button", { class: "danger", id: "cancel", onclick: async () => {
        if (!confirm(`Cancel ${q.id}? Devices that reported keep their ε spent.`)) return;
        try { draw(normQuery(await call("CancelQuery", { queryId: q.id }))); } catch (e) { err.replaceChildren(failure(e)); }
      } }, "Cancel query") : "");
    phases.replaceChildren(el("h2", { text: "Phases" }), ...q.phases.map((p) => {
      const b = el("div", { class: `bar ${p.state}` }, el("span"));
      b.firstChild.style.width = `${p.quota ? Math.min(100, 100 * p.received / p.quota) : 0}%`;
      return el("div", { class: "phase", "data-phase": p.index, "data-received": p.received, "data-quota": p.quota, "data-state": p.state },
        el("span", {}, `phase ${p.index} `, el("span", { class: "muted", text: p.state })), b, el("span", { class: "num", text: `${p.received} / ${p.quota}` }));
    }), el("p", { class: "muted" }, `${q.assigned} of ${q.target} devices assigned`));
  };
  let last = null;
  live(true);
  try {
    for await (const m of watch(id, ctl.signal)) { last = normQuery(m); draw(last); }
  } catch (e) {
    if (!alive) return;
    if (!(e instanceof ApiError)) {  // the stream broke (proxy, restart): fall back to polling
      for (;;) {
        try { last = normQuery(await call("GetQuery", { queryId: id })); draw(last); } catch (e2) { err.replaceChildren(failure(e2)); break; }
        if (last.state !== "running" || !alive) break;
        await new Promise((r) => setTimeout(r, 1000));
      }
    } else { err.replaceChildren(failure(e)); }
  }
  live(false);
  if (!alive || !last) return;
  if (last.state === "done") {
    try { result.replaceChildren(resultView(last, normResult(await call("GetResult", { queryId: id })))); } catch (e) { err.replaceChildren(failure(e)); }
  }
}

async function budgetPage() {
  show(el("h1", { text: "Budgets" }), el("p", { class: "muted" }, "Loading…"));
  stop = () => {};
  let qs;
  try { qs = ((await call("ListQueries", {})).queries || []).map(normQuery); } catch (e) { show(el("h1", { text: "Budgets" }), failure(e)); return; }
  const by = new Map();
  for (const q of qs) {
    const r = by.get(q.dataset) || { dataset: q.dataset, queries: [], total: 0, spent: 0 };
    r.queries.push({ id: q.id, epsilon: q.epsilon, state: q.state });
    r.total += q.epsilon;
    if (q.state !== "cancelled" || q.phases.some((p) => p.received > 0)) r.spent += q.epsilon;
    by.set(q.dataset, r);
  }
  const rows = [...by.values()].sort((a, b) => b.total - a.total);
  // the privacy odometer: shuffled queries composed with a PLD accountant (docs/privacy.md §7.2)
  let odo = new Map();
  try { odo = new Map(((await odometer()).datasets || []).map((o) => [o.dataset, o])); } catch { /* an older collector: no odometer */ }
  const central = (d) => { const o = odo.get(d); return o ? `${label(o.central_epsilon)} (δ ${o.delta}${o.budget != null ? `, budget ${label(o.budget)}` : ""})` : "—"; };
  const table = el("table", { id: "budget-table" }, el("thead", {}, el("tr", {}, ["dataset", "queries", "ε asked (all)", "ε of queries that ran", "largest ε", "central ε, shuffled (composed)"].map((h, i) => el("th", { class: i ? "num" : null }, h)))),
    el("tbody", {}, rows.map((r) => el("tr", { "data-dataset": r.dataset, "data-total": r.total }, el("td", { text: r.dataset }), el("td", { class: "num", text: r.queries.length }),
      el("td", { class: "num", text: label(r.total) }), el("td", { class: "num", text: label(r.spent) }), el("td", { class: "num", text: label(Math.max(...r.queries.map((q) => q.epsilon))) }),
      el("td", { class: "num", "data-central": odo.has(r.dataset) ? odo.get(r.dataset).central_epsilon : "", text: central(r.dataset) })))));
  show(el("h1", { text: "Budgets" }),
    el("p", { class: "muted" }, "A device holding a dataset is asked for the ε of every query over it: a device's ledger refuses any task beyond its own budget, so this is what the queries ask, not what every device spent."),
    el("div", { class: "card" }, rows.length ? budgetChart(rows) : el("p", { class: "muted", text: "No queries yet." }),
      el("div", { class: "legend" }, STATES.map((s) => el("span", {}, el("i", { class: `seg-${s}` }), s)))),
    el("div", { class: "card" }, table));
}

function field(name, labelText, input, wide) { input.name = name; input.id = `f-${name}`; return el("label", { class: wide ? "wide" : null }, labelText, input); }
// what each kind's form shows: no support bound or range for a distribution (its values are
// its categories), a range [lo, hi] only where a value has one (mean, mean-linf)
const RANGED = ["mean", "mean-linf"];
function syncForm(form) {
  const kind = form.elements.kind.value;
  form.elements.bound.closest("label").hidden = kind === "distribution";
  for (const n of ["lo", "hi"]) form.elements[n].closest("label").hidden = !RANGED.includes(kind);
}
// a field left empty is "not given": the collector's rules fill it in, as for the CLI and Python
function requestOf(form) {
  const v = (n) => form.elements[n].value.trim();
  const shown = (n) => !form.elements[n].closest("label").hidden && v(n) !== "";
  const params = {};
  if (v("confidence")) params.confidence = Number(v("confidence"));
  if (v("assume")) params.assume = v("assume");
  if (v("extra")) params.extra = JSON.parse(v("extra"));
  if (form.elements.allow_simulated.checked) params.allow_simulated = true;
  const ranged = shown("lo") || shown("hi");
  if (shown("lo")) params.lo = Number(v("lo"));
  if (shown("hi")) params.hi = Number(v("hi"));
  if (v("by")) { params.by = v("by"); params.groups = v("groups").split(",").map((g) => g.trim()).filter(Boolean); }
  return { kind: v("kind"), epsilon: Number(v("epsilon")), dataset: v("dataset"), users: Number(v("users")),
    samples: Number(v("samples")), dim: Number(v("dim") || 0), bound: ranged || !shown("bound") ? 0 : Number(v("bound")),
    method: v("method"), queryId: v("query_id"), paramsJson: Object.keys(params).length ? JSON.stringify(params) : "",
    phaseTimeoutSeconds: Number(v("phase_timeout") || 0) };
}

async function newPage() {
  stop = () => {};
  const f = el("form", { class: "preview card", id: "preview-form" },
    field("kind", "kind", el("select", {}, KINDS.map((k) => el("option", { value: k }, k)))),
    field("dataset", "dataset (the devices' local dataset)", el("input", { value: "steps", required: true })),
    field("epsilon", "ε per device", el("input", { type: "number", step: "any", min: "0", value: "1" })),
    field("users", "users n", el("input", { type: "number", min: "2", value: "4000" })),
    field("samples", "samples per user m", el("input", { type: "number", min: "1", value: "100" })),
    field("dim", "dimension d (categories for distribution)", el("input", { type: "number", min: "1", value: "1" })),
    field("lo", "range lo (a value's public range [lo, hi])", el("input", { type: "number", step: "any", placeholder: "-D" })),
    field("hi", "range hi", el("input", { type: "number", step: "any", placeholder: "D" })),
    field("bound", "support bound D (the range [-D, D], without lo/hi)", el("input", { type: "number", step: "any", min: "0", value: "1" })),
    field("by", "group by (a categorical dataset, e.g. country; optional)", el("input", { placeholder: "none" })),
    field("groups", "groups (their names in code order, comma-separated)", el("input", { placeholder: "de,fr,it" })),
    field("method", "method", el("select", {}, METHODS.map((m) => el("option", { value: m }, m || "auto (default)")))),
    field("confidence", "confidence", el("input", { type: "number", step: "any", min: "0", max: "1", value: "0.95" })),
    field("assume", "assume (stated publicly, like the range)", el("select", {}, el("option", { value: "" }, "nothing: intervals valid for every population"), el("option", { value: "users-alike" }, "users alike: records i.i.d. from one distribution"))),
    field("query_id", "query id (optional)", el("input", { placeholder: "generated" })),
    field("phase_timeout", "phase timeout (s, 0 = default)", el("input", { type: "number", min: "0", value: "0" })),
    el("label", { class: "check" }, el("input", { type: "checkbox", name: "allow_simulated", id: "f-allow_simulated" }), " accept simulated reports (fleets, demos)"),
    field("extra", "extra (JSON; classify/regress: grid, lo, hi, label_bound; sgd: model, sgd)", el("input", { placeholder: "{\"grid\": 4, \"lo\": [0], \"hi\": [1]}" }), true));
  const out = el("div", { id: "preview-out" }), curves = el("div", { class: "grid2", id: "preview-curves" }), err = el("div");
  const create = el("button", { type: "button", id: "create", disabled: true }, "Create query");
  show(el("h1", { text: "Before you run" }),
    el("p", { class: "muted" }, "Change the public parameters and see the interval the query will likely get, before any device spends anything. The likely width is the planner's prediction on users alike: the privacy noise, the users' spread, and for a two-stage plan what its stage I cannot rule out for all users — the same number auto compared and the curves plot (dashed: with the widest spread of users the support allows)."),
    f, el("div", { class: "card" }, out, curves, el("p", {}, create), err));
  let seq = 0, current = null;
  const refresh = async () => {
    const mine = ++seq;
    let req;
    try { req = requestOf(f); } catch (e) { err.replaceChildren(failure(`extra: ${e.message}`)); return; }
    try {
      const p = await preview(req);
      if (mine !== seq) return;
      current = req;
      err.replaceChildren();
      out.replaceChildren(previewView(p));
      create.disabled = !req.dataset;
      curves.replaceChildren(...await previewCurves(req, mine));
    } catch (e) {
      if (mine !== seq) return;
      current = null; create.disabled = true;
      out.replaceChildren(); curves.replaceChildren(); err.replaceChildren(failure(e));
    }
  };
  let timer = 0;
  syncForm(f);
  f.addEventListener("input", () => { syncForm(f); clearTimeout(timer); timer = setTimeout(refresh, 250); });
  f.addEventListener("submit", (ev) => ev.preventDefault());
  create.addEventListener("click", async () => {
    if (!current) return;
    create.disabled = true;
    try { const q = normQuery(await call("CreateQuery", current)); location.hash = `#/query/${encodeURIComponent(q.id)}`; } catch (e) { err.replaceChildren(failure(e)); create.disabled = false; }
  });
  await refresh();
}
function previewView(p) {
  const hw = p.likely_half_width || p.half_width || [], worst = p.worst_half_width;
  const same = hw.length > 0 && hw.every((x) => Math.abs(x - hw[0]) < 1e-12);
  return el("div", { id: "preview", "data-half-width": hw.length ? Math.max(...hw) : "", "data-method": p.method },
    el("div", { class: "kpis" },
      // full widths, as the curves plot them (the half-width in parentheses)
      kpi("likely interval width", hw.length ? (same ? wide(hw[0]) : `${wide(Math.min(...hw))} … ${wide(Math.max(...hw))}`) : "–", { id: "likely" }),
      p.simulated_half_width ? kpi("width from the noise alone", wide(Math.max(...p.half_width)), { id: "noise" }) :
        kpi("width at most", worst ? wide(Math.max(...worst)) : "–", { id: "at-most" }),
      kpi("method", p.method || "–", { id: "preview-method" }), kpi("phases", (p.phases || []).join(" + ") + " users")),
    runnerUp(p),
    el("p", { class: "muted" }, `${Math.round(p.confidence * 100)}% intervals, ${hw.length} component(s); grouping ${p.mode}${p.regime ? `, ${p.regime} regime` : ""}.`),
    ...(p.advisories || []).map((a) => el("p", { class: "note", text: a })),
    p.note ? el("p", { class: "note", text: p.note }) : "");
}
// auto's runner-up: the best candidate of the other family and what it would likely give
function runnerUp(p) {
  const r = p.runner_up;
  if (!r || !(r.likely_half_width || []).length) return "";
  const share = r.stage1_share ? ` (stage I ${Math.round(r.stage1_share * 100)}%)` : "";
  return el("p", { class: "muted", id: "runner-up", "data-half-width": Math.max(...r.likely_half_width) },
    `runner-up: ${r.method}${share}, likely width ${wide(Math.max(...r.likely_half_width))} (auto minimises the ${p.auto && p.auto.objective === "mse" ? "mean squared error" : "interval's width"}).`);
}
async function previewCurves(req, mine) {
  const eps = [0.25, 0.5, 1, 2, 4, 8].concat([req.epsilon]).filter((v, i, a) => v > 0 && a.indexOf(v) === i).sort((a, b) => a - b);
  const users = [0.25, 0.5, 1, 2, 4].map((k) => Math.max(2, Math.round(req.users * k)));
  const width = async (over) => {
    // the likely width, as the KPI shows it (the planner's prediction on users alike)
    try { const p = await preview({ ...req, ...over }, false); return { y: 2 * Math.max(...(p.likely_half_width || p.half_width)), y2: p.worst_half_width ? 2 * Math.max(...p.worst_half_width) : 0 }; } catch { return null; }
  };
  const a = await Promise.all(eps.map((e) => width({ epsilon: e })));
  const b = await Promise.all(users.map((n) => width({ users: n })));
  if (mine !== undefined && a.some((x) => x === null)) return [];
  const pts = (xs, ys) => xs.map((x, i) => ys[i] && { x, ...ys[i] }).filter(Boolean);
  return [
    lineChart(pts(eps, a), { title: "likely interval width, against ε", xlabel: "ε per device", mark: req.epsilon }),
    lineChart(pts(users, b), { title: "likely interval width, against the number of users", xlabel: "users", mark: req.users }),
  ];
}

// ---- routing ---------------------------------------------------------------------------------
function route() {
  stop(); stop = () => {};
  if (!token.get()) { loginPage(); return; }
  document.getElementById("signout").hidden = false;
  const h = location.hash || "#/queries";
  const [, page, arg] = h.match(/^#\/([a-z]+)\/?(.*)$/) || [null, "queries", ""];
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.nav === page);
  if (page === "query" && arg) queryPage(decodeURIComponent(arg));
  else if (page === "new") newPage();
  else if (page === "budget") budgetPage();
  else queriesPage();
}
window.addEventListener("hashchange", route);
document.getElementById("signout").addEventListener("click", signOut);
route();
