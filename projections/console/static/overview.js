// The overview: calls per minute by outcome and denials by guard and by
// tool (GET /v1/stats/calls), the log's size, checkpoint age and witness
// cosignatures (public: /v1/checkpoints/latest, /log/checkpoint), and how
// far the ledger and the projections lag (GET /v1/status).

import { h, table, kv, mono, errorBox, note, time } from './dom.js';
import { getJSON, getText, query, session, APIError } from './api.js';
import { stackedBars, legend, byName } from './charts.js';
import { parseNote, parseCheckpoint } from './verify.js';

const RANGES = [['15m', 900, 60], ['1h', 3600, 60], ['6h', 21600, 300], ['24h', 86400, 900]];
const OUTCOMES = ['allow', 'deny', 'cancelled', 'incomplete'];

export async function overviewPage(main, _params, q) {
  const range = RANGES.find((r) => r[0] === q.get('range')) ?? RANGES[1];
  main.append(h('h1', null, 'Overview'), rangePicker(range[0]));
  const grid = h('div', { class: 'grid' });
  const log = h('section', { class: 'card', id: 'log-status' }, h('h2', null, 'Log'));
  const lag = h('section', { class: 'card', id: 'lag' }, h('h2', null, 'Lag'));
  grid.append(log, lag);
  const charts = h('section', { id: 'charts' });
  main.append(grid, charts);
  await Promise.all([logStatus(log), session.token() ? lagStatus(lag) : lag.append(note('Sign in to see the lag.')),
    session.token() ? callCharts(charts, range) : charts.append(note('Sign in to see the calls.'))]);
}

function rangePicker(current) {
  return h('p', { class: 'range' }, 'Range: ', RANGES.map(([name]) =>
    h('a', { href: '#/?range=' + name, class: name === current ? 'current' : null }, name)));
}

async function logStatus(sec) {
  try {
    const [stmt, text] = await Promise.all([getJSON('/v1/checkpoints/latest'), getText('/log/checkpoint')]);
    const n = parseNote(text);
    const cp = parseCheckpoint(n.body);
    const body = stmt.body ?? {};
    const age = Math.max(0, Math.round(Date.now() / 1000 - Number(body.issued_at ?? 0)));
    const cosigners = n.sigs.filter((s) => s.sig.length === 76).map((s) => s.name);
    sec.append(kv([
      ['Origin', cp.origin],
      ['Tree size', h('span', { id: 'tree-size' }, String(body.tree_size ?? cp.size))],
      ['Checkpoint age', h('span', { id: 'checkpoint-age' }, `${age} s (issued `, time(body.issued_at), ')')],
      ['Served checkpoint', `size ${cp.size}`],
      ['Witness cosignatures', cosigners.length ? cosigners.join(', ') : 'none'],
      ['Kernel key', mono(body.kernel_key ?? '')],
    ]));
  } catch (e) {
    sec.append(e instanceof APIError && e.status === 404 ? note('The log has no checkpoint yet.') : errorBox(e));
  }
}

async function lagStatus(sec) {
  try {
    const st = await getJSON('/v1/status');
    const l = st.ledger ?? {};
    // Readers of less than every receipt get no stream positions.
    const rows = [['Ledger behind', String(l.behind ?? '?')]];
    if (l.integrated_seq !== undefined) rows.push(['Ledger integrated seq', String(l.integrated_seq)]);
    sec.append(kv(rows),
      table(['Stream', 'Consumer', 'Behind'], (st.projections ?? []).map((p) => [p.stream, p.consumer, String(p.behind)]), { id: 'lag-table' }));
  } catch (e) {
    sec.append(e instanceof APIError && e.status === 404 ? note('This server does not report lag (/v1/status).') : errorBox(e));
  }
}

async function callCharts(sec, [, span, bucket]) {
  const until = Math.floor(Date.now() / 1000);
  const since = until - span;
  let st;
  try {
    st = await getJSON('/v1/stats/calls' + query({ since, until, bucket }));
  } catch (e) {
    if (e instanceof APIError && e.status === 403) {
      sec.append(note('The call statistics cover every tenant, so only readers of every receipt see them; this credential reads less. Its own receipts are on the Receipts page.', 'warning'));
    } else {
      sec.append(errorBox(e));
    }
    return;
  }
  const points = (st.series ?? []).map((p) => ({ t: p.t, counts: new Map(OUTCOMES.map((o) => [o, Number(p[o] ?? 0)])) }));
  const b = Number(st.bucket_seconds ?? bucket);
  // Buckets are aligned to their size, so the first may start before since.
  const opts = { since: Math.min(Number(st.since ?? since), points[0]?.t ?? Infinity), until: Math.max(Number(st.until ?? until), (points.at(-1)?.t ?? 0) + b), bucket: b };
  const totals = new Map(OUTCOMES.map((o) => [o, points.reduce((n, p) => n + p.counts.get(o), 0)]));
  const perMin = opts.bucket === 60 ? 'per minute' : `per ${opts.bucket / 60} minutes`;
  sec.append(h('section', { class: 'card' }, h('h2', null, `Calls ${perMin} by outcome`), stackedBars('calls', points, OUTCOMES, opts), legend(OUTCOMES, totals)));
  for (const [name, field, title] of [['denials-by-guard', 'guard', 'Denials by guard'], ['denials-by-tool', 'tool', 'Denials by tool']]) {
    const g = byName(name === 'denials-by-guard' ? st.denials_by_guard : st.denials_by_tool, field);
    sec.append(h('section', { class: 'card' }, h('h2', null, title), stackedBars(name, g.points, g.keys, opts),
      g.keys.length ? legend(g.keys, g.totals) : note('No denials in this range.')));
  }
}
