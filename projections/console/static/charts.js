// SVG charts built with createElementNS: stacked bars over time. Every bar
// segment is a <rect> with data-t, data-key and data-count, so tests and
// people can read the numbers behind it (its <title> says them too).

import { h, s } from './dom.js';

const W = 1100;
const H = 220;
const PAD = { left: 40, right: 10, top: 10, bottom: 24 };

// Fixed colours for outcomes; other keys take a palette colour in order.
const OUTCOME_COLOURS = new Map([['allow', '#2f9e44'], ['deny', '#e03131'], ['cancelled', '#868e96'], ['incomplete', '#f08c00']]);
const PALETTE = ['#1c7ed6', '#ae3ec9', '#f76707', '#0ca678', '#e64980', '#5c940d', '#1098ad', '#7048e8'];

export function colourOf(key, i) {
  return OUTCOME_COLOURS.get(key) ?? PALETTE[i % PALETTE.length];
}

function hhmm(t) {
  const d = new Date(t * 1000);
  return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
}

// stackedBars draws points [{t, counts: Map key → n}] with one stacked bar
// per point over [since, until). name goes in data-chart.
export function stackedBars(name, points, keys, { since, until, bucket }) {
  const iw = W - PAD.left - PAD.right;
  const ih = H - PAD.top - PAD.bottom;
  const span = Math.max(until - since, bucket);
  const max = Math.max(1, ...points.map((p) => keys.reduce((n, k) => n + (p.counts.get(k) ?? 0), 0)));
  const x = (t) => PAD.left + ((t - since) / span) * iw;
  const bw = Math.max(2, (bucket / span) * iw - 1);
  const y = (n) => PAD.top + ih - (n / max) * ih;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': name, data: { chart: name } });
  svg.append(axes(since, until, max, x, y));
  for (const p of points) {
    let base = 0;
    keys.forEach((k, i) => {
      const n = p.counts.get(k) ?? 0;
      if (n <= 0) return;
      const rect = s('rect', {
        x: x(p.t).toFixed(1), y: y(base + n).toFixed(1), width: bw.toFixed(1), height: Math.max(1, y(base) - y(base + n)).toFixed(1),
        fill: colourOf(k, i), data: { t: String(p.t), key: k, count: String(n) },
      }, s('title', null, `${hhmm(p.t)} ${k}: ${n}`));
      svg.append(rect);
      base += n;
    });
  }
  return svg;
}

function axes(since, until, max, x, y) {
  const g = s('g', { class: 'axes' });
  g.append(s('line', { x1: PAD.left, y1: y(0), x2: W - PAD.right, y2: y(0) }));
  g.append(s('line', { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: y(0) }));
  g.append(s('text', { x: PAD.left - 4, y: y(max) + 4, 'text-anchor': 'end' }, String(max)));
  g.append(s('text', { x: PAD.left - 4, y: y(0), 'text-anchor': 'end' }, '0'));
  const ticks = 6;
  for (let i = 0; i <= ticks; i++) {
    const t = since + ((until - since) * i) / ticks;
    g.append(s('text', { x: x(t), y: H - 6, 'text-anchor': i === 0 ? 'start' : i === ticks ? 'end' : 'middle' }, hhmm(t)));
  }
  return g;
}

// legend lists keys with their colours and totals (a Map key → n).
export function legend(keys, totals) {
  return h('ul', { class: 'legend' }, keys.map((k, i) => h('li', null,
    swatch(colourOf(k, i)), `${k} (${totals.get(k) ?? 0})`)));
}

// swatch is a small SVG square: presentation attributes, since the CSP
// allows no inline style.
function swatch(colour) {
  return s('svg', { class: 'swatch', viewBox: '0 0 10 10', width: 10, height: 10, 'aria-hidden': 'true' },
    s('rect', { width: 10, height: 10, fill: colour }));
}

// byName turns [{t, <field>, count}] into points and the names, most
// frequent first. Names are agents' (tools, guards): Maps, not objects, so
// "__proto__" or "constructor" is a name like any other.
export function byName(rows, field) {
  const points = new Map();
  const totals = new Map();
  const add = (m, k, n) => m.set(k, (m.get(k) ?? 0) + n);
  for (const r of rows ?? []) {
    const name = String(r[field] ?? '?');
    const p = points.get(r.t) ?? { t: r.t, counts: new Map() };
    add(p.counts, name, Number(r.count ?? 0));
    points.set(r.t, p);
    add(totals, name, Number(r.count ?? 0));
  }
  const keys = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a) || a.localeCompare(b));
  return { points: [...points.values()], keys, totals };
}
