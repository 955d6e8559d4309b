// DOM helpers. Every value from the API goes in as a text node or an
// attribute value, never as markup: nothing here parses HTML strings.

const SVG_NS = 'http://www.w3.org/2000/svg';

// h builds an element. attrs: class, on<event> handlers, data (dataset),
// anything else as an attribute; children: nodes, or values shown as text.
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

// s builds an SVG element the same way.
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

function fill(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.setAttribute('class', v);
    else if (k === 'data') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

// append adds children; strings and numbers become text nodes.
export function append(el, children) {
  for (const c of [children].flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

// table builds a table from header labels and rows of cells (nodes or text).
export function table(headers, rows, attrs) {
  return h('table', attrs,
    h('thead', null, h('tr', null, headers.map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', null, rows.map((r) => (r instanceof Node ? r : h('tr', null, r.map((c) => h('td', null, c)))))));
}

// kv is a definition list of [label, value] pairs; empty values are left out.
export function kv(pairs) {
  return h('dl', { class: 'kv' }, pairs
    .filter(([, v]) => v !== undefined && v !== null && v !== '')
    .map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

// link to a route of the console; the route's parts are URI-encoded so a
// hostile id cannot leave the hash.
export function link(parts, text, query) {
  const path = parts.map((p) => encodeURIComponent(String(p))).join('/');
  const q = query ? '?' + new URLSearchParams(query) : '';
  return h('a', { href: '#/' + path + q }, text);
}

export function receiptLink(id, text) {
  return link(['receipts', id], text ?? id);
}

// short abbreviates long hex and ids for tables; the full value is the title.
export function short(v, n = 12) {
  const t = String(v ?? '');
  return t.length > n + 2 ? h('span', { title: t, class: 'mono' }, t.slice(0, n) + '…') : h('span', { class: 'mono' }, t);
}

export function mono(v) {
  return h('span', { class: 'mono' }, v);
}

// errorBox shows an error as text; a refused credential says how to recover.
export function errorBox(err) {
  const box = h('div', { class: 'error-box', role: 'alert' }, h('p', { class: 'error' }, err?.message ?? String(err)));
  if (err?.status === 401) box.append(note('The API refused this credential (expired, revoked or mistyped?): sign out and sign in again.'));
  return box;
}

export function note(text, cls = 'note') {
  return h('p', { class: cls }, text);
}

// time renders Unix seconds as a local date and time, with the UTC ISO
// form as its title.
export function time(sec) {
  if (sec === undefined || sec === null || sec === '') return '';
  const d = new Date(Number(sec) * 1000);
  if (Number.isNaN(d.getTime())) return String(sec);
  return h('time', { datetime: d.toISOString(), title: d.toISOString() }, d.toLocaleString());
}

// The badge styles of the verdicts and task states the console knows; the
// text is the server's, so it never becomes a class name itself.
const BADGE_CLASSES = new Map([
  ['allow', 'badge-allow'], ['passed', 'badge-passed'], ['completed', 'badge-completed'],
  ['deny', 'badge-deny'], ['failed', 'badge-failed'], ['rejected', 'badge-rejected'],
  ['cancelled', 'badge-cancelled'], ['canceled', 'badge-canceled'],
  ['incomplete', 'badge-incomplete'], ['working', 'badge-working'], ['submitted', 'badge-submitted'],
]);

export function badge(text) {
  const t = String(text);
  return h('span', { class: 'badge ' + (BADGE_CLASSES.get(t) ?? 'badge-other') }, t);
}

// chainBoxes draws a chain as nested boxes, outermost first.
export function chainBoxes(levels) {
  let inner = null;
  for (const [label, value] of [...levels].reverse()) {
    inner = h('div', { class: 'chain-box' }, h('div', { class: 'chain-label' }, label, ': ', value), inner);
  }
  return h('div', { class: 'chain' }, inner);
}
