// The dashboard's page: polls this process's JSON (or reads a report's
// snapshot), keeps what it has seen, and redraws. Read-only: every request
// it makes is a GET.
"use strict";

const SNAPSHOT = window.TUTTI_SNAPSHOT || null;
const params = new URLSearchParams(location.search);
const REFRESH_MS = Math.max(500, Number(params.get("refresh")) || 2000);
const HISTORY = 600; // polls kept for the charts built from /metrics
// The JSON routes sit under the page's own path (/dashboard/api/...).
const API = location.pathname.replace(/\/+$/, "") + "/api/";

const seen = {
  overview: null, metrics: null, steps: [], lastStep: 0, experts: null,
  events: [], eventKeys: new Set(), polls: [], expertPolls: [],
  previousHistograms: {}, updates: 0, errors: [], pairs: null,
  pairsLayer: -1,
};

window.addEventListener("error", e => noteError(e.message));
const consoleError = console.error.bind(console);
console.error = (...args) => { noteError(args.join(" ")); consoleError(...args); };
window.addEventListener("unhandledrejection", e => noteError(String(e.reason)));
function noteError(text) {
  seen.errors.push(text);
  document.body.dataset.errors = seen.errors.length;
  document.body.dataset.lastError = text;
}

const $ = id => document.getElementById(id);

// -- reading /metrics' JSON ------------------------------------------------

function samplesOf(name) {
  return (seen.metrics && seen.metrics.metrics[name]) || [];
}
function matches(labels, want) {
  for (const k in want) if (labels[k] !== want[k]) return false;
  return true;
}
function metric(name, want) {
  const s = samplesOf(name).find(([labels]) => matches(labels, want || {}));
  return s ? s[1] : null;
}
// A histogram's buckets as [[le, cumulative count], ...], ascending.
function buckets(name) {
  return samplesOf(name + "_bucket")
    .map(([l, v]) => [l.le === "+Inf" ? Infinity : Number(l.le), v])
    .sort((a, b) => a[0] - b[0]);
}
// The q-quantile of the observations between two bucket snapshots, as
// Prometheus' histogram_quantile interpolates it; null without any.
function quantile(q, now, before) {
  const delta = now.map(([le, c], i) => [le, c - (before && before[i] ? before[i][1] : 0)]);
  const total = delta.length ? delta[delta.length - 1][1] : 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const [le, c] of delta) {
    if (c >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * (c > prevCount ? (rank - prevCount) / (c - prevCount) : 0);
    }
    prevLe = le; prevCount = c;
  }
  return prevLe;
}

// -- fetching --------------------------------------------------------------

async function getJSON(path) {
  const res = await fetch(path, {cache: "no-store", credentials: "same-origin"});
  if (!res.ok) throw new Error(path + ": HTTP " + res.status + " " + (await res.text()).trim());
  return res.json();
}

function windowSteps() { return Number($("window").value); }

async function poll() {
  try {
    if (SNAPSHOT) {
      seen.overview = SNAPSHOT.overview;
      takeSteps(SNAPSHOT.steps);
      seen.experts = SNAPSHOT.windows[String(windowSteps())] || SNAPSHOT.steps.experts;
      takeEvents(SNAPSHOT.events);
    } else {
      if (!seen.overview) seen.overview = await getJSON(API + "overview");
      const since = seen.events.length ? seen.events[seen.events.length - 1].time_ms : 0;
      const [metrics, steps, events] = await Promise.all([
        getJSON(API + "metrics"),
        getJSON(API + "steps?since=" + seen.lastStep + "&window=" + windowSteps()),
        getJSON(API + "events?since=" + since)]);
      seen.metrics = metrics;
      takeSteps(steps);
      if (steps.experts) seen.experts = steps.experts;
      takeEvents(events);
      remember(metrics);
      // Routing windows end every few steps: ask again every fifth poll.
      const layer = Number($("pair-layer").value || 0);
      if (training() && (layer !== seen.pairsLayer || seen.updates % 5 === 0)) {
        seen.pairs = await getJSON(API + "coactivation?layer=" + layer);
        seen.pairsLayer = layer;
      }
    }
    $("problem").hidden = true;
    render();
    seen.updates += 1;
    document.body.dataset.updates = seen.updates;
  } catch (e) {
    $("problem").hidden = false;
    $("problem").textContent = "Cannot read the dashboard's data: " + e.message;
  }
  if (!SNAPSHOT) setTimeout(poll, REFRESH_MS);
}

function takeSteps(steps) {
  for (const r of steps.steps || []) {
    // A resumed run repeats steps: keep the newest record of each.
    while (seen.steps.length && seen.steps[seen.steps.length - 1].step >= r.step) seen.steps.pop();
    seen.steps.push(r);
  }
  seen.lastStep = Math.max(seen.lastStep, steps.last_step || 0);
}

function takeEvents(events) {
  for (const e of events) {
    const key = e.time_ms + "|" + e.kind + "|" + e.text;
    if (seen.eventKeys.has(key)) continue;
    seen.eventKeys.add(key);
    seen.events.push(e);
  }
  seen.events.sort((a, b) => a.time_ms - b.time_ms);
}

// What the serving charts draw: a point per poll from /metrics.
function remember(metrics) {
  const t = metrics.time_ms;
  const point = {t: t};
  for (const name of ["tutti_serve_time_to_first_token_seconds",
                      "tutti_serve_inter_token_latency_seconds"]) {
    const now = buckets(name);
    if (!now.length) continue;
    const before = seen.previousHistograms[name];
    point[name] = [0.5, 0.9, 0.99].map(q => quantile(q, now, before));
    seen.previousHistograms[name] = now;
  }
  for (const name of ["tutti_serve_prompt_tokens_total", "tutti_serve_generation_tokens_total"])
    point[name] = metric(name);
  seen.polls.push(point);
  if (seen.polls.length > HISTORY) seen.polls.shift();
  const experts = samplesOf("tutti_serve_expert_tokens_total");
  if (experts.length) {
    seen.expertPolls.push(experts.map(([l, v]) => [Number(l.layer), Number(l.expert), v]));
    if (seen.expertPolls.length > 101) seen.expertPolls.shift();
  }
}

// -- drawing ---------------------------------------------------------------

function training() { return seen.overview && seen.overview.kind === "training"; }

function render() {
  const o = seen.overview;
  const training = o.kind === "training";
  document.title = "tutti · " + o.title;
  $("title").textContent = (SNAPSHOT ? "report · " : "") + o.title;
  renderHeader(training);
  renderTiles(training);
  show("training", training);
  show("traffic", training);
  show("serving", !training);
  show("experts", o.experts > 0);
  show("cluster", !SNAPSHOT);
  show("events", true);
  show("pairs-block", training);
  if (!training && !seen.arranged) {
    // A service's own numbers first, then its experts.
    $("experts").before($("serving"));
    for (const o of $("window").options)
      o.textContent = {"1": "last poll", "10": "10 polls", "100": "100 polls", "0": "since the start"}[o.value];
    // Counters since the service started: the default window.
    $("window").value = "0";
    seen.arranged = true;
  }
  if (training) renderTraining(); else renderServing();
  renderExperts(training);
  renderPairs(training);
  if (!SNAPSHOT) renderCluster(training);
  renderEvents();
  renderNav();
}

function show(id, on) { $(id).hidden = !on; }

function renderNav() {
  const nav = $("nav");
  nav.textContent = "";
  for (const s of document.querySelectorAll("section.view"))
    if (!s.hidden) {
      const a = document.createElement("a");
      a.href = "#" + s.id;
      a.textContent = s.querySelector("h2").firstChild.textContent.trim();
      nav.appendChild(a);
    }
}

function renderHeader(training) {
  let state = training ? "unknown" : "serving";
  for (const [l, v] of samplesOf("tutti_job_state")) if (v === 1) state = l.state;
  if (SNAPSHOT) state = "finished";
  const badge = $("state");
  badge.textContent = state;
  badge.className = "badge " + state;
  const step = training ? (metric("tutti_job_step") ?? seen.lastStep) : null;
  const steps = seen.overview.steps;
  document.body.dataset.step = step ?? "";
  $("progress-bar").style.width = training && steps ? Math.min(100, 100 * step / steps) + "%" : "0";
  $("progress-bar").parentElement.hidden = !training;
  const parts = [];
  if (training) parts.push("step " + step + " / " + steps);
  const epoch = metric("tutti_job_epoch");
  if (epoch) parts.push("epoch " + epoch);
  const recoveries = metric("tutti_recoveries_total");
  if (recoveries) parts.push(recoveries + " recoveries");
  if (seen.metrics) parts.push("updated " + new Date(seen.metrics.time_ms).toLocaleTimeString());
  $("meta").textContent = parts.join(" · ");
}

function tile(key, label, value, format, alert) {
  return {key: key, label: label, value: value, format: format || shortNumber, alert: alert};
}

function renderTiles(training) {
  const last = seen.steps[seen.steps.length - 1] || {};
  const evals = seen.steps.filter(r => r.eval_loss !== undefined);
  const list = [];
  if (training) {
    const firing = samplesOf("tutti_alert_firing").length;
    const links = last.alltoall_bytes_by_link;
    const linked = links ? links.intra_node + links.intra_rack + links.inter_rack : 0;
    const lastShare = linked > 0 ? links.inter_rack / linked : null;
    const droppedSum = seen.steps.reduce((n, r) => n + (r.dropped_tokens || 0), 0);
    list.push(tile("loss", "loss", metric("tutti_loss") ?? last.loss, v => v.toFixed(4)),
      tile("eval-loss", "held-out loss", evals.length ? evals[evals.length - 1].eval_loss : null, v => v.toFixed(4)),
      tile("tokens-per-s", "tokens / s", metric("tutti_tokens_per_second") ?? last.tokens_per_s),
      tile("step-time", "step time", metric("tutti_step_time_seconds", {part: "total"}) ?? last.step_time_s, v => v.toFixed(3) + " s"),
      tile("grad-norm", "grad norm", last.grad_norm),
      tile("lr", "learning rate", last.lr, v => v.toExponential(2)),
      tile("imbalance", "load max/mean", last.load_imbalance, v => v.toFixed(2),
           last.load_imbalance > (seen.overview.thresholds.expert_imbalance || Infinity)),
      tile("dropped", "dropped tokens", metric("tutti_dropped_tokens_total") ?? droppedSum),
      tile("cross-rack", "cross-rack share", metric("tutti_alltoall_cross_rack_share") ?? lastShare,
           v => (100 * v).toFixed(1) + "%",
           (metric("tutti_alltoall_cross_rack_share") ?? lastShare) > (seen.overview.thresholds.cross_rack_share || Infinity)));
    if (!SNAPSHOT)
      list.push(tile("checkpoint", "last checkpoint", metric("tutti_checkpoint_last_step"), v => "step " + v),
                tile("alerts", "alerts firing", firing, v => String(v), firing > 0));
  } else {
    const p = latestPolls(2);
    const rate = name => p.length === 2 && p[1][name] !== null && p[0][name] !== null
      ? (p[1][name] - p[0][name]) / ((p[1].t - p[0].t) / 1000) : null;
    const ttft = lastQuantile("tutti_serve_time_to_first_token_seconds", 0);
    const itl = lastQuantile("tutti_serve_inter_token_latency_seconds", 0);
    list.push(tile("running", "running", metric("tutti_serve_requests_running")),
      tile("waiting", "waiting", metric("tutti_serve_requests_waiting")),
      tile("kv", "KV cache used", metric("tutti_serve_kv_cache_usage_ratio"), v => (100 * v).toFixed(1) + "%"),
      tile("gen-rate", "generated tok/s", rate("tutti_serve_generation_tokens_total")),
      tile("ttft", "TTFT p50", ttft, v => (1000 * v).toFixed(1) + " ms"),
      tile("itl", "ITL p50", itl, v => (1000 * v).toFixed(1) + " ms"),
      tile("offloaded", "offloaded experts", metric("tutti_serve_offloaded_experts")),
      tile("generated", "tokens generated", metric("tutti_serve_generation_tokens_total")));
  }
  const box = $("tiles");
  box.textContent = "";
  for (const t of list) {
    const div = document.createElement("div");
    div.className = "tile" + (t.alert ? " alert" : "");
    const k = document.createElement("div");
    k.className = "k"; k.textContent = t.label;
    const v = document.createElement("div");
    v.className = "v"; v.id = "tile-" + t.key;
    const ok = t.value !== null && t.value !== undefined && isFinite(t.value);
    v.textContent = ok ? t.format(t.value) : "–";
    if (ok) v.dataset.value = t.value;
    div.append(k, v);
    box.appendChild(div);
  }
}

function series(name, field, color) {
  return {name: name, color: color,
          points: seen.steps.filter(r => r[field] !== undefined && r[field] !== null).map(r => [r.step, r[field]])};
}

function renderTraining() {
  const th = seen.overview.thresholds;
  drawChart($("chart-loss"), [series("loss", "loss"), Object.assign(series("held-out", "eval_loss", "#f5b342"), {dots: true})], {fitY: true, yFormat: v => v.toFixed(3)});
  drawChart($("chart-throughput"), [series("tokens/s", "tokens_per_s", "#3ccf8e")]);
  const part = (name, f, color) => ({name: name, color: color, points: seen.steps.map(r => [r.step, f(r)])});
  drawChart($("chart-split"), [
    part("compute", r => r.time_compute_s, "#4fb3ff"),
    part("all-to-all", r => Math.max(0, r.time_alltoall_s - r.time_alltoall_wait_s), "#c77dff"),
    part("waiting", r => r.time_alltoall_wait_s + (r.time_data_s || 0), "#ff7b72"),
    part("all-reduce", r => r.time_allreduce_s, "#f5b342"),
    part("other", r => r.time_other_s, "#8796a8")], {stacked: true, yFormat: v => v.toFixed(3)});
  drawChart($("chart-grad"), [series("grad norm", "grad_norm", "#c77dff")], {fitY: true});
  drawChart($("chart-lr"), [series("lr", "lr", "#8bd3dd")], {yFormat: v => v.toExponential(1)});
  drawChart($("chart-imbalance"), [series("max/mean", "load_imbalance", "#f5b342")],
            {threshold: {value: th.expert_imbalance || 0, label: "alerts.expert_imbalance"}, yFormat: v => v.toFixed(2)});
  drawChart($("chart-dropped"), [series("dropped", "dropped_tokens", "#ff7b72")]);
  const link = (name, key, color) => ({name: name, color: color,
    points: seen.steps.filter(r => r.alltoall_bytes_by_link).map(r => [r.step, r.alltoall_bytes_by_link[key]])});
  drawChart($("chart-links"), [link("same rank", "same_rank", "#8796a8"), link("node", "intra_node", "#4fb3ff"),
    link("rack", "intra_rack", "#3ccf8e"), link("cross-rack", "inter_rack", "#ff7b72")], {stacked: true});
  const share = seen.steps.filter(r => r.alltoall_bytes_by_link).map(r => {
    const b = r.alltoall_bytes_by_link, linked = b.intra_node + b.intra_rack + b.inter_rack;
    return [r.step, linked > 0 ? b.inter_rack / linked : 0];
  });
  drawChart($("chart-cross"), [{name: "cross-rack share", color: "#ff7b72", points: share}],
            {threshold: {value: th.cross_rack_share || 0, label: "alerts.cross_rack_share"},
             yFormat: v => (100 * v).toFixed(1) + "%", yTick: v => (100 * v).toFixed(0) + "%"});
}

function latestPolls(n) { return seen.polls.slice(-n); }
function lastQuantile(name, i) {
  for (let k = seen.polls.length - 1; k >= 0; --k)
    if (seen.polls[k][name] && seen.polls[k][name][i] !== null) return seen.polls[k][name][i];
  return null;
}

function renderServing() {
  const over = (name, f, color) => ({name: name, color: color, points: seen.polls.map(p => [p.t, f(p)]).filter(p => p[1] !== null && p[1] !== undefined)});
  // Running and waiting are read live; keep them in the poll history too.
  const p = seen.polls[seen.polls.length - 1];
  if (p) {
    p.running = metric("tutti_serve_requests_running");
    p.waiting = metric("tutti_serve_requests_waiting");
    p.kvUsed = metric("tutti_serve_kv_cache_blocks_used");
    p.kvAll = metric("tutti_serve_kv_cache_blocks");
    p.cross = metric("tutti_serve_cross_rack_share") ?? metric("tutti_serve_alltoall_cross_rack_share");
    p.offloaded = metric("tutti_serve_offloaded_experts");
  }
  const time = {time: true};
  drawChart($("chart-requests"), [over("running", p => p.running, "#4fb3ff"), over("waiting", p => p.waiting, "#f5b342")], time);
  const pct = (name, h) => [0, 1, 2].map(i => over(["p50", "p90", "p99"][i], p => p[h] ? p[h][i] : null, ["#3ccf8e", "#f5b342", "#ff7b72"][i]));
  drawChart($("chart-ttft"), pct("ttft", "tutti_serve_time_to_first_token_seconds"), Object.assign({yFormat: v => v.toFixed(3), empty: "no requests in this window"}, time));
  drawChart($("chart-itl"), pct("itl", "tutti_serve_inter_token_latency_seconds"), Object.assign({yFormat: v => v.toFixed(4), empty: "no requests in this window"}, time));
  drawChart($("chart-kv"), [over("used", p => p.kvUsed, "#c77dff"), over("all", p => p.kvAll, "#8796a8")], time);
  const rate = name => ({name: name.includes("prompt") ? "prompt" : "generated",
    color: name.includes("prompt") ? "#8bd3dd" : "#3ccf8e",
    points: seen.polls.slice(1).map((q, i) => {
      const a = seen.polls[i];
      return [q.t, q[name] !== null && a[name] !== null ? (q[name] - a[name]) / ((q.t - a.t) / 1000) : null];
    }).filter(x => x[1] !== null)});
  drawChart($("chart-gen"), [rate("tutti_serve_prompt_tokens_total"), rate("tutti_serve_generation_tokens_total")], time);
  drawChart($("chart-serve-cross"), [over("cross-rack share", p => p.cross, "#ff7b72"), over("offloaded experts", p => p.offloaded, "#c77dff")], time);
}

// The layer x expert table of the chosen window: the run's step log when
// training, the serving counters' growth over the last polls when serving.
function expertTable(training) {
  const o = seen.overview;
  if (training) return seen.experts && seen.experts.layers ? {counts: seen.experts.counts, window: seen.experts.window, dropped: seen.experts.dropped} : null;
  if (!seen.expertPolls.length) return null;
  const w = windowSteps();
  const now = seen.expertPolls[seen.expertPolls.length - 1];
  const then = w > 0 ? seen.expertPolls[Math.max(0, seen.expertPolls.length - 1 - w)] : null;
  const counts = Array.from({length: o.layers}, () => new Array(o.experts).fill(0));
  now.forEach(([l, e, v], i) => {
    if (l < o.layers && e < o.experts) counts[l][e] = v - (then && then !== now && then[i] ? then[i][2] : 0);
  });
  return {counts: counts, window: w, dropped: null};
}

function whereExpert(layer, expert) {
  const o = seen.overview;
  const rank = o.expert_rank.length ? o.expert_rank[layer * o.experts + expert] : undefined;
  if (rank === undefined) return "placement not known";
  const node = o.nodes.findIndex(n => rank >= n.first_rank && rank < n.first_rank + n.ranks);
  return "rank " + rank + (node >= 0 ? ", node " + node + (o.nodes[node].rack ? ", rack " + o.nodes[node].rack : "") : "");
}

function renderExperts(training) {
  const canvas = $("heatmap");
  const table = expertTable(training);
  if (!table) {
    canvas.dataset.cells = 0;
    $("heat-summary").textContent = "no routing statistics yet";
    return;
  }
  // Each layer's share of its tokens: rows compare even when layers differ.
  const shares = table.counts.map(row => {
    const sum = row.reduce((a, b) => a + b, 0);
    return row.map(v => sum > 0 ? v / sum : 0);
  });
  let max = 0, total = 0;
  for (const row of shares) for (const v of row) max = Math.max(max, v);
  for (const row of table.counts) for (const v of row) total += v;
  // Coloured against an even share (the middle of the scale), so a
  // balanced layer looks even and a hot expert stands out at any size.
  const box = canvas.parentElement;
  const relative = shares.map(row => row.map(v => v * row.length));
  const geometry = drawHeatmap(canvas, relative, 2, Math.max(box.clientWidth - 20, 300));
  drawScale($("heat-scale"));
  $("heat-max").textContent = "2x an even share or more (busiest: " + (100 * max).toFixed(1) + "% of a layer)";
  Object.assign(canvas.dataset, {cells: geometry.rows * geometry.cols, layers: geometry.rows,
    experts: geometry.cols, sum: total, window: table.window, step: seen.lastStep});
  canvas.onmousemove = ev => {
    const r = canvas.getBoundingClientRect();
    const e = Math.floor((ev.clientX - r.left - geometry.left) / geometry.cell);
    const l = Math.floor((ev.clientY - r.top - geometry.top) / geometry.cellH);
    if (e < 0 || l < 0 || e >= geometry.cols || l >= geometry.rows) return;
    $("heat-hover").innerHTML = "";
    const lines = ["layer " + l + ", expert " + e,
      (100 * shares[l][e]).toFixed(2) + "% of the layer's tokens (" + shortNumber(table.counts[l][e]) + ")",
      "an even share is " + (100 / geometry.cols).toFixed(2) + "%", whereExpert(l, e)];
    for (const line of lines) { const d = document.createElement("div"); d.textContent = line; $("heat-hover").appendChild(d); }
  };
  // Per layer: max over mean; the worst few listed.
  const imbalance = table.counts.map((row, l) => {
    const sum = row.reduce((a, b) => a + b, 0), top = Math.max(...row);
    return [l, sum > 0 ? top / (sum / row.length) : 0];
  }).sort((a, b) => b[1] - a[1]);
  const summary = $("heat-summary");
  summary.textContent = "";
  const add = (k, v) => { const d = document.createElement("div"); const a = document.createElement("span"); a.textContent = k; const b = document.createElement("b"); b.textContent = v; d.append(a, b); summary.appendChild(d); };
  add("window", training ? (table.window + " step" + (table.window === 1 ? "" : "s")) : (table.window ? table.window + " polls" : "since the start"));
  add("tokens routed", shortNumber(total));
  if (table.dropped !== null) add("tokens dropped", shortNumber(table.dropped));
  const cold = shares.reduce((n, row) => n + row.filter(v => v < 0.1 / row.length).length, 0);
  add("experts under 10% of an even share", String(cold));
  for (const [l, v] of imbalance.slice(0, 6)) add("layer " + l + " max/mean", v.toFixed(2));
}

function renderPairs(training) {
  const o = seen.overview, select = $("pair-layer");
  if (select.options.length !== o.layers) {
    select.textContent = "";
    for (let l = 0; l < o.layers; ++l) select.add(new Option("L" + l, l));
  }
  const layer = Number(select.value || 0);
  const pairs = SNAPSHOT ? (SNAPSHOT.coactivation || [])[layer] : seen.pairs;
  const canvas = $("pairs");
  if (!training || !pairs) {
    canvas.dataset.cells = 0;
    canvas.width = 300; canvas.height = 40;
    const g = canvas.getContext("2d");
    g.fillStyle = "#171e26"; g.fillRect(0, 0, canvas.width, canvas.height);
    g.fillStyle = "#8796a8"; g.font = "12px system-ui, sans-serif";
    g.fillText(training ? "no routing window yet (moe_config.routing_stats_window)" : "serving counts no co-activation", 8, 24);
    $("pair-window").textContent = "";
    return;
  }
  let max = 0;
  for (const row of pairs.counts) for (const v of row) max = Math.max(max, v);
  const side = Math.min(pairs.experts * 22, Math.max(240, Math.min(canvas.parentElement.clientWidth - 20, 560)));
  const geometry = drawHeatmap(canvas, pairs.counts, max, side, "E");
  Object.assign(canvas.dataset, {cells: pairs.experts * pairs.experts, layer: pairs.layer});
  $("pair-window").textContent = "steps " + pairs.first_step + "–" + pairs.last_step + ", " + shortNumber(pairs.tokens) + " tokens";
  canvas.onmousemove = ev => {
    const r = canvas.getBoundingClientRect();
    const f = Math.floor((ev.clientX - r.left - geometry.left) / geometry.cell);
    const e = Math.floor((ev.clientY - r.top - geometry.top) / geometry.cellH);
    if (e < 0 || f < 0 || e >= geometry.rows || f >= geometry.cols) return;
    $("pair-hover").textContent = "experts " + e + " and " + f + " of layer " + pairs.layer + ": "
      + shortNumber(pairs.counts[e][f]) + " tokens together";
  };
}

function renderCluster(training) {
  const o = seen.overview;
  const table = $("nodes");
  table.textContent = "";
  const head = table.insertRow();
  for (const h of ["node", "host", "rack", "ranks", "heartbeat age", "memory"]) {
    const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
  }
  o.nodes.forEach((n, i) => {
    const row = table.insertRow();
    const age = metric("tutti_node_heartbeat_age_seconds", {node: String(i)});
    const mem = metric("tutti_node_resident_memory_bytes", {node: String(i)}) ?? (i === 0 ? metric("tutti_daemon_resident_memory_bytes") : null);
    for (const v of [String(i), n.host, n.rack || "–", n.first_rank + "–" + (n.first_rank + n.ranks - 1),
                     age === null ? (training ? "not joined" : "–") : age.toFixed(1) + " s",
                     mem === null ? "–" : shortNumber(mem) + "B"])
      row.insertCell().textContent = v;
  });
  const list = $("alerts");
  list.textContent = "";
  const firing = samplesOf("tutti_alert_firing");
  for (const [l] of firing) {
    const li = document.createElement("li");
    li.className = l.level;
    li.textContent = l.level + ": " + l.alert;
    list.appendChild(li);
  }
  if (!firing.length) {
    const li = document.createElement("li");
    li.className = "none";
    li.textContent = training ? "none" : "a service's alerts are its Prometheus rules";
    list.appendChild(li);
  }
}

function eventColor(kind) {
  if (/resolved|recovered|resumed|committed|started/.test(kind)) return "#3ccf8e";
  if (/alert/.test(kind)) return "#f5b342";
  if (/fail|lost|error|kill|abort|crash/.test(kind)) return "#ff5f5f";
  if (/checkpoint/.test(kind)) return "#4fb3ff";
  if (/operator|audit|shell|chaos/.test(kind)) return "#c77dff";
  return "#8796a8";
}

function renderEvents() {
  const svg = $("timeline");
  svg.textContent = "";
  const events = seen.events;
  svg.dataset.events = events.length;
  const W = Math.max(svg.clientWidth, 300), H = 64;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  if (events.length) {
    const t0 = events[0].time_ms;
    const t1 = Math.max(SNAPSHOT ? events[events.length - 1].time_ms : Date.now(), t0 + 1000);
    const X = t => 10 + (t - t0) / (t1 - t0) * (W - 20);
    svgEl("line", {x1: 10, x2: W - 10, y1: 34, y2: 34, class: "axis"}, svg);
    for (const e of events) {
      const c = svgEl("circle", {cx: X(e.time_ms), cy: 34, r: 5, fill: eventColor(e.kind), "fill-opacity": 0.85}, svg);
      svgEl("title", {}, c).textContent = new Date(e.time_ms).toLocaleString() + "  " + e.kind + ": " + e.text;
    }
    svgEl("text", {x: 10, y: 58}, svg).textContent = new Date(t0).toLocaleTimeString();
    svgEl("text", {x: W - 10, y: 58, "text-anchor": "end"}, svg).textContent = new Date(t1).toLocaleTimeString();
  } else {
    svgEl("text", {x: 10, y: 36}, svg).textContent = "no events yet";
  }
  const table = $("event-list");
  table.textContent = "";
  for (const e of events.slice(-200).reverse()) {
    const row = table.insertRow();
    row.insertCell().textContent = new Date(e.time_ms).toLocaleString();
    const kind = document.createElement("span");
    kind.className = "kind";
    kind.style.color = eventColor(e.kind);
    kind.textContent = e.kind;
    row.insertCell().appendChild(kind);
    row.insertCell().textContent = e.text;
  }
}

$("pair-layer").addEventListener("change", () => {
  if (SNAPSHOT) render(); else seen.pairsLayer = -1;
});
$("window").addEventListener("change", () => {
  if (SNAPSHOT) { poll(); return; }
  seen.experts = null;
});
window.addEventListener("resize", () => { if (seen.overview) render(); });
poll();
