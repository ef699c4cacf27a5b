// Small, plain charts: line and stacked-area charts as SVG, a heatmap on a
// canvas. No library; every chart redraws from its data on each update.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = ["#4fb3ff", "#f5b342", "#3ccf8e", "#c77dff", "#ff7b72",
                 "#8bd3dd", "#e0e070", "#ff9ecf"];

function svgEl(name, attrs, parent) {
  const el = document.createElementNS(SVG_NS, name);
  for (const k in attrs) el.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(el);
  return el;
}

// 1234567 -> "1.23M"; small numbers keep significant digits.
function shortNumber(v) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e12) return (v / 1e12).toFixed(2) + "T";
  if (a >= 1e9) return (v / 1e9).toFixed(2) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  if (Number.isInteger(v)) return String(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 1) return v.toFixed(2);
  if (a === 0) return "0";
  if (a >= 0.001) return v.toFixed(4);
  return v.toExponential(2);
}

// Tick values: about `count` round numbers covering [lo, hi], each with
// the label its spacing calls for (0.5, 1, 1.5 rather than 0.5000, 1).
function niceTicks(lo, hi, count) {
  if (hi <= lo) hi = lo + 1;
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw);
  const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  const ticks = [];
  for (let k = Math.ceil(lo / step); k * step <= hi + step * 1e-9; ++k) {
    const t = k * step;
    const label = Math.abs(t) >= 1e4 ? shortNumber(t)
                : decimals > 4 ? t.toExponential(1) : t.toFixed(decimals);
    ticks.push({value: t, label: label});
  }
  return ticks;
}

// Draws into `figure` (keeping its caption): series [{name, color, points:
// [[x, y], ...]}]; options: stacked, threshold {value, label}, xLabel,
// yMin (default 0 unless the data go below), logY.
function drawChart(figure, series, options) {
  options = options || {};
  figure.querySelectorAll("svg, .legend, .empty").forEach(e => e.remove());
  const drawn = series.filter(s => s.points.length > 0);
  figure.dataset.points = drawn.reduce((n, s) => n + s.points.length, 0);
  if (drawn.length === 0) {
    const empty = document.createElement("div");
    empty.className = "empty";
    empty.textContent = options.empty || "no data yet";
    figure.appendChild(empty);
    return;
  }
  const last = drawn[0].points[drawn[0].points.length - 1];
  figure.dataset.lastX = last[0];
  figure.dataset.lastY = last[1];
  const W = Math.max(figure.clientWidth - 20, 300), H = 170;
  const pad = {l: 52, r: 10, t: 8, b: 22};
  const svg = svgEl("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`});
  // Stacked: each series' y sits on the ones before it, by x.
  let layers = drawn.map(s => s.points.map(p => [p[0], p[1], 0]));
  if (options.stacked) {
    const base = new Map();
    layers = drawn.map(s => s.points.map(p => {
      const b = base.get(p[0]) || 0;
      base.set(p[0], b + (p[1] || 0));
      return [p[0], b + (p[1] || 0), b];
    }));
  }
  let xmin = Infinity, xmax = -Infinity, ymin = Infinity, ymax = -Infinity;
  for (const l of layers)
    for (const p of l) {
      if (p[1] === null || !isFinite(p[1])) continue;
      xmin = Math.min(xmin, p[0]); xmax = Math.max(xmax, p[0]);
      ymin = Math.min(ymin, p[1], options.stacked ? p[2] : p[1]);
      ymax = Math.max(ymax, p[1]);
    }
  if (options.threshold && options.threshold.value > 0)
    ymax = Math.max(ymax, options.threshold.value * 1.1);
  if (!options.fitY) ymin = Math.min(ymin, options.yMin === undefined ? 0 : options.yMin);
  if (ymax === ymin) ymax = ymin + (Math.abs(ymin) || 1);
  if (xmax === xmin) xmax = xmin + 1;
  const span = ymax - ymin;
  if (options.fitY) { ymin -= span * 0.05; ymax += span * 0.05; }
  else ymax += span * 0.05;
  const X = x => pad.l + (x - xmin) / (xmax - xmin) * (W - pad.l - pad.r);
  const Y = y => H - pad.b - (y - ymin) / (ymax - ymin) * (H - pad.t - pad.b);
  for (const t of niceTicks(ymin, ymax, 4)) {
    svgEl("line", {x1: pad.l, x2: W - pad.r, y1: Y(t.value), y2: Y(t.value), class: "grid-line"}, svg);
    svgEl("text", {x: pad.l - 6, y: Y(t.value) + 3, "text-anchor": "end"}, svg)
      .textContent = options.yTick ? options.yTick(t.value) : t.label;
  }
  for (const t of niceTicks(xmin, xmax, options.time ? 4 : 6)) {
    if (!options.time && Math.abs(t.value - Math.round(t.value)) > 1e-9) continue;
    svgEl("text", {x: X(t.value), y: H - 6, "text-anchor": "middle"}, svg)
      .textContent = options.time ? new Date(t.value).toLocaleTimeString() : t.label;
  }
  svgEl("line", {x1: pad.l, x2: W - pad.r, y1: H - pad.b, y2: H - pad.b, class: "axis"}, svg);
  layers.forEach((l, i) => {
    const color = drawn[i].color || PALETTE[i % PALETTE.length];
    const pts = l.filter(p => p[1] !== null && isFinite(p[1]));
    if (pts.length === 0) return;
    const line = pts.map((p, k) => (k ? "L" : "M") + X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1)).join("");
    if (options.stacked) {
      const back = pts.slice().reverse().map(p => "L" + X(p[0]).toFixed(1) + "," + Y(p[2]).toFixed(1)).join("");
      svgEl("path", {d: line + back + "Z", fill: color, "fill-opacity": 0.35, stroke: "none"}, svg);
    }
    svgEl("path", {d: line, fill: "none", stroke: color, "stroke-width": 1.6,
                   "data-series": drawn[i].name, "data-count": pts.length}, svg);
    if (pts.length === 1 || drawn[i].dots)
      for (const p of pts)
        svgEl("circle", {cx: X(p[0]), cy: Y(p[1]), r: 2.5, fill: color}, svg);
  });
  if (options.threshold && options.threshold.value > 0) {
    const y = Y(options.threshold.value);
    svgEl("line", {x1: pad.l, x2: W - pad.r, y1: y, y2: y, class: "threshold"}, svg);
    svgEl("text", {x: W - pad.r, y: y - 3, "text-anchor": "end"}, svg)
      .textContent = options.threshold.label;
  }
  hoverReadout(svg, drawn, X, xmin, xmax, W, pad, options);
  figure.appendChild(svg);
  const legend = document.createElement("div");
  legend.className = "legend";
  drawn.forEach((s, i) => {
    const item = document.createElement("span");
    const swatch = document.createElement("i");
    swatch.style.background = s.color || PALETTE[i % PALETTE.length];
    item.appendChild(swatch);
    const lastPoint = s.points[s.points.length - 1];
    item.appendChild(document.createTextNode(
      s.name + " " + (options.yFormat || shortNumber)(lastPoint[1])));
    legend.appendChild(item);
  });
  figure.appendChild(legend);
}

// A tooltip with every series' value at the x under the pointer.
function hoverReadout(svg, series, X, xmin, xmax, W, pad, options) {
  const tip = document.getElementById("tip");
  svg.addEventListener("mousemove", ev => {
    const box = svg.getBoundingClientRect();
    const x = xmin + (ev.clientX - box.left - pad.l) / (W - pad.l - pad.r) * (xmax - xmin);
    const lines = [(options.time ? new Date(x).toLocaleTimeString() : "step " + Math.round(x))];
    for (const s of series) {
      let best = s.points[0];
      for (const p of s.points) if (Math.abs(p[0] - x) < Math.abs(best[0] - x)) best = p;
      lines.push(s.name + ": " + (options.yFormat || shortNumber)(best[1]));
    }
    tip.textContent = lines.join("  ·  ");
    tip.style.left = (ev.clientX + 12) + "px";
    tip.style.top = (ev.clientY + 12) + "px";
    tip.hidden = false;
  });
  svg.addEventListener("mouseleave", () => { tip.hidden = true; });
}

// Colour of a share in [0, 1] (0: dark blue, 1: bright yellow).
function heatColor(t) {
  t = Math.max(0, Math.min(1, t));
  const stops = [[13, 27, 42], [31, 94, 155], [79, 179, 255], [245, 179, 66], [255, 240, 140]];
  const f = t * (stops.length - 1), i = Math.min(Math.floor(f), stops.length - 2);
  const u = f - i, a = stops[i], b = stops[i + 1];
  return `rgb(${Math.round(a[0] + (b[0] - a[0]) * u)},${Math.round(a[1] + (b[1] - a[1]) * u)},${Math.round(a[2] + (b[2] - a[2]) * u)})`;
}

// Draws rows x cols of values scaled by `max` on `canvas`, rows labelled
// rowPrefix + index (L for layers), columns by index; returns the geometry
// the hover handler needs.
function drawHeatmap(canvas, values, max, width, rowPrefix) {
  rowPrefix = rowPrefix || "L";
  const rows = values.length, cols = rows ? values[0].length : 0;
  const left = 34, top = 6, bottom = 18;
  const cell = Math.max(3, Math.min(28, (width - left) / Math.max(cols, 1)));
  const cellH = Math.max(3, Math.min(22, Math.floor(420 / Math.max(rows, 1))));
  canvas.width = Math.ceil(left + cell * cols + 2);
  canvas.height = top + cellH * rows + bottom;
  const g = canvas.getContext("2d");
  g.fillStyle = "#171e26";
  g.fillRect(0, 0, canvas.width, canvas.height);
  for (let l = 0; l < rows; ++l)
    for (let e = 0; e < cols; ++e) {
      g.fillStyle = heatColor(max > 0 ? values[l][e] / max : 0);
      const x0 = Math.round(left + e * cell), x1 = Math.round(left + (e + 1) * cell);
      g.fillRect(x0, top + l * cellH, x1 - x0 - (cell > 6 ? 1 : 0), cellH - (cellH > 6 ? 1 : 0));
    }
  g.fillStyle = "#8796a8";
  g.font = "10px system-ui, sans-serif";
  g.textAlign = "right";
  const rowEvery = Math.ceil(12 / cellH);
  for (let l = 0; l < rows; l += rowEvery) g.fillText(rowPrefix + l, left - 4, top + l * cellH + cellH / 2 + 3);
  g.textAlign = "center";
  const colEvery = Math.ceil(22 / cell);
  for (let e = 0; e < cols; e += colEvery) g.fillText(String(e), left + e * cell + cell / 2, top + rows * cellH + 12);
  return {left: left, top: top, cell: cell, cellH: cellH, rows: rows, cols: cols};
}

function drawScale(canvas) {
  const g = canvas.getContext("2d");
  for (let x = 0; x < canvas.width; ++x) {
    g.fillStyle = heatColor(x / (canvas.width - 1));
    g.fillRect(x, 0, 1, canvas.height);
  }
}
