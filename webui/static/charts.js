/* Small hand-rolled SVG charts (no library, no network): line charts of training
   metrics and horizontal bars of per-task success. All text goes through
   textContent. */
(function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var COLOURS = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#4b5563'];

  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) { parent.appendChild(e); }
    return e;
  }
  function text(parent, x, y, s, cls, anchor) {
    var t = el('text', { x: x, y: y, 'class': cls || '', 'text-anchor': anchor || 'start' }, parent);
    t.textContent = s;
    return t;
  }
  function fmt(v) {
    if (v === null || v === undefined || isNaN(v)) { return '–'; }
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) { return v.toExponential(1); }
    return String(Math.round(v * 1000) / 1000);
  }
  function ticks(lo, hi, n) {
    if (hi === lo) { return [lo]; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    step *= err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1;
    var out = [];
    for (var v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) { out.push(Math.round(v / step) * step); }
    return out;
  }

  /* series: [{name, label (optional, shown instead of name), points: [[x, y], ...]}] */
  function line(container, title, series, opts) {
    opts = opts || {};
    var W = 360, H = 190, L = 44, R = 12, T = 24, B = 26;
    var svg = el('svg', { viewBox: '0 0 ' + W + ' ' + H, 'class': 'chart', role: 'img' });
    text(svg, L, 15, title, 'chart-title');
    var xs = [], ys = [];
    series.forEach(function (s) {
      s.points.forEach(function (p) { if (p[1] !== null) { xs.push(p[0]); ys.push(p[1]); } });
    });
    if (!xs.length) {
      text(svg, W / 2, H / 2, 'no data', 'chart-empty', 'middle');
      container.appendChild(svg);
      return svg;
    }
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    if (opts.unit) { y0 = Math.min(0, y0); y1 = Math.max(1, y1); }
    if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
    if (x0 === x1) { x0 -= 1; x1 += 1; }
    var sx = function (v) { return L + (v - x0) / (x1 - x0) * (W - L - R); };
    var sy = function (v) { return T + (1 - (v - y0) / (y1 - y0)) * (H - T - B); };
    ticks(y0, y1, 4).forEach(function (v) {
      el('line', { x1: L, x2: W - R, y1: sy(v), y2: sy(v), 'class': 'grid' }, svg);
      text(svg, L - 5, sy(v) + 3.5, fmt(v), 'tick', 'end');
    });
    ticks(x0, x1, 5).forEach(function (v) {
      if (Math.round(v) !== v) { return; }
      text(svg, sx(v), H - B + 14, String(v), 'tick', 'middle');
    });
    el('line', { x1: L, x2: W - R, y1: H - B, y2: H - B, 'class': 'axis' }, svg);
    series.forEach(function (s, k) {
      var colour = COLOURS[k % COLOURS.length];
      var pts = s.points.filter(function (p) { return p[1] !== null; });
      el('polyline', { points: pts.map(function (p) { return sx(p[0]).toFixed(1) + ',' + sy(p[1]).toFixed(1); }).join(' '),
        fill: 'none', stroke: colour, 'stroke-width': 1.8, 'class': 'series', 'data-name': s.name }, svg);
      if (pts.length <= 80) {
        pts.forEach(function (p) {
          var c = el('circle', { cx: sx(p[0]), cy: sy(p[1]), r: 2.4, fill: colour }, svg);
          el('title', {}, c).textContent = (s.label || s.name) + ' @ ' + p[0] + ': ' + fmt(p[1]);
        });
      }
    });
    var wrap = document.createElement('figure');
    wrap.className = 'chart-box';
    wrap.appendChild(svg);
    if (series.length > 1 || opts.legend) {
      var legend = document.createElement('figcaption');
      legend.className = 'legend';
      series.forEach(function (s, k) {
        var item = document.createElement('span');
        var sw = document.createElement('i');
        sw.className = 'swatch c' + (k % COLOURS.length);
        item.appendChild(sw);
        item.appendChild(document.createTextNode(s.label || s.name));  // label: e.g. the name with its weight
        legend.appendChild(item);
      });
      wrap.appendChild(legend);
    }
    container.appendChild(wrap);
    return svg;
  }

  /* items: [{label, value in [0, 1], note}] */
  function bars(container, title, items) {
    var W = 400, row = 20, T = 24, L = 140, R = 84;
    var H = T + row * items.length + 6;
    var svg = el('svg', { viewBox: '0 0 ' + W + ' ' + H, 'class': 'chart bars', role: 'img' });
    text(svg, 4, 15, title, 'chart-title');
    items.forEach(function (it, k) {
      var y = T + k * row;
      var label = it.label.length > 22 ? it.label.slice(0, 21) + '…' : it.label;
      text(svg, L - 6, y + 13, label, 'tick', 'end');
      el('rect', { x: L, y: y + 3, width: W - L - R, height: row - 7, 'class': 'bar-bg' }, svg);
      var r = el('rect', { x: L, y: y + 3, width: Math.max(0, (W - L - R) * (it.value || 0)), height: row - 7, 'class': 'bar' }, svg);
      el('title', {}, r).textContent = it.label + ': ' + (it.note || fmt(it.value));
      text(svg, W - R + 4, y + 13, it.note || fmt(it.value), 'tick');
    });
    var wrap = document.createElement('figure');
    wrap.className = 'chart-box wide';
    wrap.appendChild(svg);
    container.appendChild(wrap);
    return svg;
  }

  window.GuiCharts = { line: line, bars: bars, fmt: fmt };
}());
