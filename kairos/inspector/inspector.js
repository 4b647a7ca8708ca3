// Kairos trace inspector: plain JavaScript, no dependencies, no build step.
// Served by `kairos serve` at / (ask: the chat endpoint, streamed; benchmark traces: /v1/kairos/traces), or opened
// as a file (standalone: open or drop a trace file). Traces are kairos.Answer dicts (kairos answer --json, a chat
// completion's `kairos.answer`, stream events) or benchmark per-question rows (train/evaluate.py _row).
"use strict";

const $ = (sel) => document.querySelector(sel);
const SVG = "http://www.w3.org/2000/svg";
const state = { models: [], history: [], fileRows: [], benchRows: [], benchMeta: null, current: null };

// ------------------------------------------------------------------------------------------------ DOM helpers
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  }
  if (text !== undefined) node.textContent = text;
  return node;
}
const fmt = (x, d = 3) => (typeof x === "number" && isFinite(x) ? Number(x.toPrecision(d)).toString() : "–");
const isNum = (x) => typeof x === "number" && isFinite(x);
// an axis label: 2 significant digits, tiny or huge values in exponent form (they fit the margin)
const tick = (x) => (isNum(x) && x !== 0 && (Math.abs(x) < 1e-2 || Math.abs(x) >= 1e4) ? x.toExponential(1) : fmt(x, 2));

function showError(msg) {
  const box = $("#error");
  box.textContent = msg;
  box.hidden = !msg;
}

// ------------------------------------------------------------------------------------------------ traces
// One shape for every source: {question, questionId, answer, answerLine, status, calls, policy, tokens, seconds,
// steps: [{index, text, isAnswer, signals, retrieve, retrieved, capped, probability, threshold, signal, value,
// direction, query, queryMode, passages: [{id, title, text, score, injected}], regenerated, label, tokens,
// seconds}], meta: {kind, signal, direction, threshold}, live}
function normStep(s, i) {
  const det = s.details || {};
  return {
    index: s.index || i + 1, text: s.text || "", isAnswer: !!s.is_answer, signals: s.signals || {},
    retrieve: !!s.retrieve, retrieved: !!s.retrieved, capped: !!s.capped,
    probability: isNum(s.probability) ? s.probability : null, threshold: isNum(s.threshold) ? s.threshold : null,
    signal: det.signal || null, value: isNum(det.value) ? det.value : null, direction: det.direction || null,
    modes: det.mode_probabilities || null,
    query: s.query || null, queryMode: s.query_mode || null, passages: s.passages || [],
    regenerated: s.regenerated ?? null, label: null, tokens: s.tokens, seconds: s.seconds,
  };
}
function fromAnswer(a) {
  return {
    question: a.question, questionId: a.question_id, answer: a.answer, answerLine: a.answer_line,
    status: a.answer_status, calls: a.calls, policy: a.policy, tokens: a.tokens, seconds: a.seconds,
    steps: (a.steps || []).map(normStep), meta: null, live: false,
  };
}
function fromBenchRow(r, meta) {
  meta = meta || {};
  const steps = (r.decisions || []).map((d, i) => {
    const act = Array.isArray(d.action) ? d.action : [d.action, 0];
    const retrieved = !!Number(act[0]);
    const injected = new Set(d.passage_ids || []);
    const ids = d.ranked_ids && d.ranked_ids.length ? d.ranked_ids : d.passage_ids || [];
    const signals = {};
    for (const [k, v] of Object.entries(d.signals || {})) if (isNum(v)) signals[k] = v;
    const sig = meta.kind === "threshold" ? meta.signal : null;
    return {
      index: i + 1, text: d.step || "", isAnswer: /^\s*answer\s*:/i.test(d.step || ""), signals,
      retrieve: retrieved || !!d.capped, retrieved, capped: !!d.capped, probability: null,
      threshold: isNum(meta.threshold) && meta.kind !== "learned" ? meta.threshold : null,
      signal: sig, value: sig && isNum(signals[sig]) ? signals[sig] : null, direction: meta.direction || null,
      query: retrieved ? d.query : null, queryMode: null,
      passages: retrieved ? ids.map((id) => ({ id, title: "", text: "", score: null, injected: injected.has(id) })) : [],
      regenerated: d.regenerated ?? null, label: d.label || null,
      tokens: null, seconds: null,
    };
  });
  const line = r.answer || null;
  return {
    question: r.question || `question #${r.question_index}`, questionId: r.question_id,
    answer: line ? line.replace(/^\s*answer\s*:\s*/i, "") : null, answerLine: line, status: r.answer_status,
    calls: r.calls, policy: meta.method || "", tokens: r.tokens, seconds: r.seconds, quality: r.quality,
    steps, meta, live: false,
  };
}
function toTrace(item, meta) {
  if (item && item.kairos && item.kairos.answer) return fromAnswer(item.kairos.answer);
  if (item && item.event === "answer" && item.answer) return fromAnswer(item.answer);
  if (item && Array.isArray(item.decisions)) return fromBenchRow(item, meta);
  if (item && Array.isArray(item.steps)) return fromAnswer(item);
  return null;
}
function parseTraceText(text) {
  text = text.trim();
  if (!text) throw new Error("the file is empty");
  let items;
  try {
    const data = JSON.parse(text);
    items = Array.isArray(data) ? data : Array.isArray(data.rows) ? data.rows : [data];
  } catch (e) {
    items = text.split(/\r?\n/).filter((l) => l.trim()).map((l, n) => {
      try { return JSON.parse(l); } catch (err) { throw new Error(`line ${n + 1}: not JSON (${err.message})`); }
    });
  }
  const traces = items.map((x) => toTrace(x)).filter(Boolean);
  if (!traces.length) throw new Error("no trace in the file: expected kairos answers (kairos answer --json), a chat " +
                                      "completion with `kairos`, or a benchmark's per-question rows");
  return traces;
}

// ------------------------------------------------------------------------------------------------ charts
// The decision chart: per step, the policy's retrieve probability (or the trigger's signal) against its threshold,
// retrieval steps marked; without either, the decisions alone.
function decisionSeries(t) {
  const st = t.steps;
  if (st.some((s) => s.probability !== null)) {
    const thr = st.map((s) => s.threshold).find((x) => x !== null);
    return { label: "π(retrieve)", values: st.map((s) => s.probability), threshold: thr ?? null, lo: 0, hi: 1,
             rule: thr !== null && thr !== undefined ? `retrieve when π > ${fmt(thr)}` : "" };
  }
  const sig = st.map((s) => s.signal).find(Boolean);
  if (sig) {
    const thr = st.map((s) => s.threshold).find((x) => x !== null);
    const dir = st.map((s) => s.direction).find(Boolean) || "below";
    return { label: sig, values: st.map((s) => (s.value !== null ? s.value : s.signals[sig] ?? null)),
             threshold: thr ?? null, rule: thr !== null && thr !== undefined
               ? `retrieve when ${sig} ${dir === "above" ? ">" : "<"} ${fmt(thr)}` : "" };
  }
  return { label: "retrieve", values: st.map((s) => (s.retrieve ? 1 : 0)), threshold: null, lo: 0, hi: 1, rule: "",
           decisionsOnly: true };
}
function lineChart(opts) {
  const { width, height, values, steps, threshold } = opts;
  const pad = { l: 42, r: 10, t: 8, b: 18 };
  const n = values.length;
  const nums = values.filter(isNum).concat(isNum(threshold) ? [threshold] : []);
  let lo = isNum(opts.lo) ? opts.lo : Math.min(...nums);
  let hi = isNum(opts.hi) ? opts.hi : Math.max(...nums);
  if (!nums.length) { lo = 0; hi = 1; }
  if (hi - lo < 1e-9) { hi += 0.5; lo -= 0.5; }
  const x = (i) => pad.l + (n <= 1 ? (width - pad.l - pad.r) / 2 : (i * (width - pad.l - pad.r)) / (n - 1));
  const y = (v) => pad.t + (1 - (v - lo) / (hi - lo)) * (height - pad.t - pad.b);
  const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: opts.cls || "chart" });
  const bw = n > 1 ? (width - pad.l - pad.r) / (n - 1) : 20;
  steps.forEach((s, i) => {
    if (s.retrieved) root.append(svg("rect", { class: "band", x: x(i) - bw / 2, y: pad.t, width: bw,
                                                 height: height - pad.t - pad.b }));
  });
  root.append(svg("line", { class: "axis", x1: pad.l, x2: width - pad.r, y1: height - pad.b, y2: height - pad.b }));
  root.append(svg("text", { x: pad.l - 4, y: pad.t + 8, "text-anchor": "end" }, tick(hi)));
  root.append(svg("text", { x: pad.l - 4, y: height - pad.b, "text-anchor": "end" }, tick(lo)));
  steps.forEach((s, i) => root.append(svg("text", { x: x(i), y: height - 4, "text-anchor": "middle" }, String(s.index))));
  if (isNum(threshold)) {
    root.append(svg("line", { class: "threshold", x1: pad.l, x2: width - pad.r, y1: y(threshold), y2: y(threshold) }));
    root.append(svg("text", { x: width - pad.r, y: y(threshold) - 3, "text-anchor": "end" }, `τ ${fmt(threshold)}`));
  }
  let d = "";
  values.forEach((v, i) => { if (isNum(v)) d += `${d ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)}`; });
  if (d) root.append(svg("path", { class: "series", d }));
  values.forEach((v, i) => {
    if (!isNum(v)) return;
    const s = steps[i];
    const c = svg("circle", { class: `pt ${s.retrieved ? "retrieved" : s.capped ? "capped" : "continue"}`,
                              cx: x(i), cy: y(v), r: opts.r || 4, "data-step": s.index });
    c.append(svg("title", {}, `step ${s.index}: ${fmt(v, 4)}${s.retrieved ? " — retrieved" : ""}`));
    root.append(c);
  });
  return root;
}
function renderCharts(t) {
  const box = $("#decision-chart");
  box.replaceChildren();
  const ds = decisionSeries(t);
  box.dataset.series = ds.label;
  box.append(el("figcaption", { text: ds.decisionsOnly ? "decisions (retrieval points shaded)"
                                                       : `${ds.label} per step — ${ds.rule || "no threshold"}` }));
  box.append(lineChart({ width: 360, height: 150, values: ds.values, steps: t.steps, threshold: ds.threshold,
                         lo: ds.lo, hi: ds.hi, cls: "decision", r: 5 }));
  const sigBox = $("#signal-charts");
  sigBox.replaceChildren();
  const names = [];
  for (const s of t.steps) for (const [k, v] of Object.entries(s.signals)) if (isNum(v) && !names.includes(k)) names.push(k);
  names.sort();
  const first = ds.label && names.includes(ds.label) ? [ds.label] : [];
  for (const name of first.concat(names.filter((n) => !first.includes(n))).slice(0, 12)) {
    const fig = el("figure", { class: "signal-chart", "data-signal": name });
    fig.append(el("figcaption", { text: name }));
    fig.append(lineChart({ width: 170, height: 70, values: t.steps.map((s) => (isNum(s.signals[name]) ? s.signals[name] : null)),
                           steps: t.steps, threshold: name === ds.label ? ds.threshold : null, cls: "signal", r: 2.5 }));
    sigBox.append(fig);
  }
}

// ------------------------------------------------------------------------------------------------ the steps
function wordDiff(a, b) {
  const x = a.split(/\s+/).filter(Boolean), y = b.split(/\s+/).filter(Boolean);
  const L = Array.from({ length: x.length + 1 }, () => new Array(y.length + 1).fill(0));
  for (let i = x.length - 1; i >= 0; i--) for (let j = y.length - 1; j >= 0; j--)
    L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = el("span", { class: "diff" });
  let i = 0, j = 0;
  const word = (tag, w) => { out.append(tag ? el(tag, { text: w }) : document.createTextNode(w)); out.append(" "); };
  while (i < x.length && j < y.length) {
    if (x[i] === y[j]) { word(null, x[i]); i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) word("del", x[i++]);
    else word("ins", y[j++]);
  }
  while (i < x.length) word("del", x[i++]);
  while (j < y.length) word("ins", y[j++]);
  return out;
}
function stepItem(s) {
  const kind = s.retrieved ? "retrieved" : s.capped ? "capped" : "continued";
  const li = el("li", { class: `step ${kind}${s.isAnswer ? " is-answer" : ""}`, "data-index": s.index,
                        "data-retrieved": String(s.retrieved) });
  const why = [];
  if (s.probability !== null) why.push(`π(retrieve) ${fmt(s.probability)}`);
  if (s.signal && s.value !== null) why.push(`${s.signal} ${fmt(s.value, 4)}`);
  if (s.threshold !== null) why.push(`τ ${fmt(s.threshold)}`);
  if (s.modes) why.push("query modes " + Object.entries(s.modes).map(([k, v]) => `${k} ${fmt(v, 2)}`).join(", "));
  if (s.label) why.push(`label: ${s.label}`);
  const cost = [isNum(s.tokens) ? `${s.tokens} tok` : null, isNum(s.seconds) ? `${fmt(s.seconds, 2)} s` : null]
    .filter(Boolean).join(" · ");
  li.append(el("div", { class: "step-head" },
    el("span", { class: "idx", text: `#${s.index}` }),
    el("span", { class: `marker ${s.retrieved ? "retrieve" : s.capped ? "capped" : "continue"}`,
                 text: s.retrieved ? "retrieve" : s.capped ? "retrieve (capped)" : "go on" }),
    el("span", { class: "why", text: why.join(" · ") }),
    el("span", { class: "cost", text: cost })));
  li.append(el("div", { class: "step-text", text: s.text }));
  const sig = Object.entries(s.signals).filter(([, v]) => isNum(v));
  if (sig.length) {
    li.append(el("details", { class: "signals" }, el("summary", { text: `signals (${sig.length})` }),
      el("table", {}, sig.map(([k, v]) => el("tr", {}, el("td", { text: k }), el("td", { text: fmt(v, 4) }))))));
  }
  if (s.retrieved) {
    const box = el("div", { class: "retrieval" });
    box.append(el("div", { class: "query" }, el("b", { text: "query" }), s.queryMode ? ` (${s.queryMode})` : "", ": ",
                  el("span", { class: "query-text", text: s.query || "" })));
    if (s.passages.length) {
      box.append(el("ol", { class: "passages" }, s.passages.map((p) => el("li", { class: `passage${p.injected ? " injected" : ""}` },
        el("span", { class: "pid", text: `[${p.id}]` }), " ", p.title ? el("b", { text: `${p.title}: ` }) : "",
        p.text || "", isNum(p.score) ? el("span", { class: "pid", text: ` (${fmt(p.score)})` }) : ""))));
    }
    const after = el("div", { class: "after" }, el("b", { text: "after injection: " }));
    if (s.regenerated === null || s.regenerated === undefined) after.append(el("span", { class: "same", text: "(not recorded)" }));
    else if (s.regenerated === s.text) after.append(el("span", { class: "same", text: "unchanged" }));
    else after.append(wordDiff(s.text, s.regenerated));
    box.append(after);
    li.append(box);
  }
  return li;
}
function render(t) {
  state.current = t;
  $("#empty").hidden = true;
  $("#trace").hidden = false;
  const head = $("#trace-head");
  head.replaceChildren(
    el("div", { class: "q", text: t.question || "" }),
    t.live ? el("div", { class: "a live", text: "deciding…" })
           : el("div", { class: `a${t.answer ? "" : " none"}`, id: "answer", text: t.answer || "(no answer)" }),
    el("div", { class: "meta", text: [
      t.status ? `status ${t.status}` : null,
      isNum(t.calls) ? `${t.calls} retrieval call${t.calls === 1 ? "" : "s"}` : null,
      `${t.steps.length} step${t.steps.length === 1 ? "" : "s"}`,
      isNum(t.quality) ? `quality ${fmt(t.quality)}` : null,
      isNum(t.tokens) ? `${t.tokens} tokens` : null,
      t.policy ? `policy ${t.policy}` : null,
      t.questionId ? `id ${t.questionId}` : null].filter(Boolean).join(" · ") }));
  renderCharts(t);
  $("#steps").replaceChildren(...t.steps.map(stepItem));
  document.body.dataset.steps = String(t.steps.length);
}

// ------------------------------------------------------------------------------------------------ lists
function rowList(ul, traces, onPick) {
  ul.replaceChildren(...traces.map((t, i) => {
    const li = el("li", { "data-row": i, title: t.questionId || "" },
      el("span", { text: (t.question || "").slice(0, 90) }),
      el("span", { class: "calls", text: t.calls ? `↻${t.calls}` : "" }));
    li.addEventListener("click", () => {
      for (const x of ul.querySelectorAll("li.active")) x.classList.remove("active");
      li.classList.add("active");
      onPick(t);
    });
    return li;
  }));
}

// ------------------------------------------------------------------------------------------------ the server
async function getJSON(url) {
  const r = await fetch(url);
  const body = await r.json().catch(() => null);
  if (!r.ok) throw new Error(body && body.error ? body.error.message : `${url}: HTTP ${r.status}`);
  return body;
}
async function connect() {
  if (location.protocol === "file:") { document.body.classList.add("standalone"); return; }
  try {
    const models = await getJSON("v1/models");
    state.models = models.data.map((m) => m.id);
    $("#model").replaceChildren(...state.models.map((m) => el("option", { value: m, text: m })));
    const health = await getJSON("health");
    $("#server-info").textContent = `${health.pipeline.policy} · reasoner ${health.pipeline.reasoner} · ` +
      `${health.pipeline.passages} passages · replica ${health.replica}`;
    const traces = await getJSON("v1/kairos/traces");
    if (!traces.enabled) $("#bench-panel").hidden = true;
    else {
      $("#trace-file").append(...traces.data.map((f) => el("option", { value: f.id,
        text: `${f.method} [${f.split}]${f.bench !== "." ? " — " + f.bench : ""}` })));
    }
  } catch (e) {
    document.body.classList.add("standalone");
  }
}
async function openBenchFile(id) {
  showError("");
  $("#trace-rows").replaceChildren();
  if (!id) return;
  try {
    const data = await getJSON(`v1/kairos/traces/${id.split("/").map(encodeURIComponent).join("/")}`);
    const meta = { ...(data.policy || {}), method: data.method };
    state.benchRows = data.rows.map((r) => fromBenchRow(r, meta));
    filterRows();
    if (data.total > data.rows.length) showError(`showing ${data.rows.length} of ${data.total} questions`);
  } catch (e) { showError(e.message); }
}
function filterRows() {
  const q = $("#row-filter").value.trim().toLowerCase();
  const rows = q ? state.benchRows.filter((t) => (t.question + " " + (t.questionId || "")).toLowerCase().includes(q))
                 : state.benchRows;
  rowList($("#trace-rows"), rows, render);
}

// Streams a question through the chat endpoint: each decided step is drawn as it arrives.
async function ask(question, model) {
  showError("");
  const btn = $("#ask");
  btn.disabled = true;
  const t = { question, steps: [], live: true, meta: null };
  render(t);
  try {
    const r = await fetch("v1/chat/completions", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model, stream: true, messages: [{ role: "user", content: question }] }) });
    if (!r.ok) {
      const body = await r.json().catch(() => null);
      const err = body && body.error;
      throw new Error(err ? `${err.message}${err.param ? ` (field: ${err.param})` : ""}` : `HTTP ${r.status}`);
    }
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "", final = null;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let k;
      while ((k = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, k);
        buf = buf.slice(k + 2);
        for (const line of block.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const ev = JSON.parse(data);
          if (ev.error) throw new Error(ev.error.message);
          const kx = ev.kairos;
          if (kx && kx.event === "step") { t.steps.push(normStep(kx.step, t.steps.length)); render(t); }
          if (kx && kx.event === "answer") final = fromAnswer(kx.answer);
        }
      }
    }
    if (!final) throw new Error("the stream ended without an answer");
    render(final);
    state.history.unshift(final);
    rowList($("#history"), state.history, render);
  } catch (e) {
    showError(e.message);
  } finally {
    btn.disabled = false;
  }
}

// ------------------------------------------------------------------------------------------------ files
async function openFile(file) {
  showError("");
  try {
    const traces = parseTraceText(await file.text());
    state.fileRows = traces;
    rowList($("#file-rows"), traces, render);
    render(traces[0]);
    const first = $("#file-rows li");
    if (first) first.classList.add("active");
  } catch (e) {
    showError(`${file.name}: ${e.message}`);
  }
}

// ------------------------------------------------------------------------------------------------ wiring
function init() {
  $("#ask-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const q = $("#question").value.trim();
    if (q) ask(q, $("#model").value || state.models[0]);
  });
  $("#trace-file").addEventListener("change", (e) => openBenchFile(e.target.value));
  $("#row-filter").addEventListener("input", filterRows);
  $("#file-input").addEventListener("change", (e) => { if (e.target.files[0]) openFile(e.target.files[0]); });
  const overlay = $("#drop-overlay");
  window.addEventListener("dragover", (e) => { e.preventDefault(); overlay.hidden = false; });
  window.addEventListener("dragleave", (e) => { if (e.target === overlay || !e.relatedTarget) overlay.hidden = true; });
  window.addEventListener("drop", (e) => {
    e.preventDefault();
    overlay.hidden = true;
    if (e.dataTransfer.files[0]) openFile(e.dataTransfer.files[0]);
  });
  connect().then(() => { document.body.dataset.ready = "true"; });
}
init();
