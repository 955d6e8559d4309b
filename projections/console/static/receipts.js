// Receipts: the search (GET /v1/receipts/query) and one receipt's page
// with its decision, evidence, call chain, holder binding and the
// in-browser verification.

import { h, append, clear, table, kv, link, receiptLink, short, mono, errorBox, note, time, badge, chainBoxes } from './dom.js';
import { getJSON, getBytes, query, pins, APIError } from './api.js';
import { verifyReceipt, leafOf } from './verify.js';

const FILTERS = ['toolServer', 'toolName', 'outcome', 'principal', 'capabilityId', 'since', 'until'];

// toUnix reads a datetime-local value as Unix seconds (the query's unit).
function toUnix(v) {
  if (!v) return '';
  const t = Date.parse(v);
  return Number.isNaN(t) ? '' : String(Math.floor(t / 1000));
}

function toLocalInput(sec) {
  if (!sec) return '';
  const d = new Date(Number(sec) * 1000);
  const pad = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

function searchForm(q) {
  const field = (name, label, attrs) => h('label', null, label, h('input', { name, id: 'q-' + name, value: q.get(name) ?? '', ...attrs }));
  const outcome = h('select', { name: 'outcome', id: 'q-outcome' },
    ['', 'allow', 'deny', 'cancelled', 'incomplete'].map((o) => h('option', { value: o, selected: q.get('outcome') === o }, o || 'any')));
  const form = h('form', { id: 'receipt-search', class: 'filters' },
    field('toolServer', 'Tool server'), field('toolName', 'Tool'), h('label', null, 'Outcome', outcome),
    field('principal', 'Principal'), field('capabilityId', 'Capability'),
    h('label', null, 'Since', h('input', { type: 'datetime-local', name: 'since', id: 'q-since', value: toLocalInput(q.get('since')) })),
    h('label', null, 'Until', h('input', { type: 'datetime-local', name: 'until', id: 'q-until', value: toLocalInput(q.get('until')) })),
    h('button', { type: 'submit' }, 'Search'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const next = new URLSearchParams();
    for (const name of FILTERS) {
      const el = form.elements[name];
      const v = name === 'since' || name === 'until' ? toUnix(el.value) : el.value.trim();
      if (v) next.set(name, v);
    }
    location.hash = '#/receipts' + (next.toString() ? '?' + next : '');
  });
  return form;
}

function receiptRow(r) {
  if (r.unreadable !== undefined) {
    return h('tr', { data: { receiptId: r.id } }, h('td'), h('td', null, receiptLink(r.id)), h('td', { colspan: 4 }, 'unreadable: ' + r.unreadable));
  }
  return h('tr', { data: { receiptId: r.id } },
    h('td', null, time(r.timestamp)),
    h('td', null, receiptLink(r.id)),
    h('td', null, `${r.tool_server}/${r.tool_name}`),
    h('td', null, badge(r.decision?.verdict ?? '?'), r.decision?.guard ? ' ' + r.decision.guard : ''),
    h('td', null, short(r.capability_id, 20)),
    h('td', null, r.tenant_id ?? ''));
}

export async function receiptsPage(main, _params, q) {
  main.append(h('h1', null, 'Receipts'), searchForm(q));
  const params = {};
  for (const name of [...FILTERS, 'cursor']) params[name] = q.get(name) ?? '';
  params.limit = 50;
  const results = h('section', { id: 'receipt-results' });
  main.append(results);
  let page;
  try {
    page = await getJSON('/v1/receipts/query' + query(params));
  } catch (e) {
    results.append(errorBox(e));
    return;
  }
  const rows = page.receipts ?? [];
  results.append(h('p', { class: 'count', id: 'receipt-count' }, `${page.totalCount ?? rows.length} matching receipt(s)` + (q.get('cursor') ? ', this page after the cursor' : '')));
  if (rows.length === 0) {
    results.append(note('No receipts match, or none you may read.'));
  } else {
    results.append(table(['Time', 'Receipt', 'Tool', 'Outcome', 'Capability', 'Tenant'], rows.map(receiptRow), { id: 'receipt-table' }));
  }
  const nav = h('p', { class: 'pager' });
  if (q.get('cursor')) {
    const first = new URLSearchParams(q);
    first.delete('cursor');
    nav.append(h('a', { href: '#/receipts?' + first, id: 'first-page' }, 'First page'), ' ');
  }
  if (page.nextCursor !== null && page.nextCursor !== undefined) {
    const next = new URLSearchParams(q);
    next.set('cursor', String(page.nextCursor));
    nav.append(h('a', { href: '#/receipts?' + next, id: 'next-page' }, 'Next page'));
  }
  results.append(nav);
}

// ---- one receipt ----

// receiptPage fetches the receipt once and draws everything from those
// bytes, which Verify then checks: a second fetch could serve a doctored
// copy to draw and the genuine one to verify.
export async function receiptPage(main, [id], q, current) {
  main.append(h('h1', null, 'Receipt ', mono(id)));
  let bytes;
  let got;
  try {
    bytes = await getBytes('/v1/receipts/' + encodeURIComponent(id));
    got = leafOf(bytes);
  } catch (e) {
    main.append(errorBox(e));
    return;
  }
  if (!current()) return;
  const verifyBox = verifySection(id, bytes);
  const r = got.receipt;
  if (got.unreadable !== undefined || !r) {
    main.append(note(`The log holds this receipt (leaf ${got.leafIndex}) but no reader can decode it: ${got.unreadable}`, 'error'), verifyBox.section);
  } else {
    main.append(summary(r, got.leafIndex), verifyBox.section, decision(r), evidence(r), parameters(r), binding(r), identity(r), callChain(r));
    const chain = await lineage(r.capability_id);
    if (!current()) return;
    main.append(chain, rawReceipt(r));
  }
  if (q.get('verify') === '1') await verifyBox.run();
}

function summary(r, leafIndex) {
  const m = r.metadata ?? {};
  return h('section', { class: 'card', id: 'receipt-summary' }, kv([
    ['Tool', h('span', { id: 'receipt-tool' }, `${r.tool_server}/${r.tool_name}`)],
    ['Time', time(r.timestamp)],
    ['Outcome', badge(r.decision?.verdict ?? '?')],
    // An allow a gateway carried out: nobody reported its result.
    ['Result', m.outcome === 'not_observed'
      ? h('span', { id: 'receipt-result' }, 'not observed: carried out by a gateway' + (typeof m.gateway === 'string' ? ` (${m.gateway})` : ''))
      : ''],
    ['Capability', r.capability_id ? link(['authz'], r.capability_id, { capabilityId: r.capability_id }) : ''],
    ['Tenant', r.tenant_id],
    ['Trust level', r.trust_level],
    ['Leaf index', leafIndex],
    ['Trace', m.trace_id ? mono(m.trace_id) : ''],
    ['Decided by', h('span', { id: 'receipt-edge' }, edgeOf(m.edge))],
    ['Kernel key', mono(r.kernel_key)],
    ['Policy hash', short(r.policy_hash, 24)],
    ['Content hash', short(r.content_hash, 24)],
  ]));
}

// edgeOf names the certified edge that decided (metadata.edge, inside the
// kernel's signature), or says that the ledger recorded none.
function edgeOf(e) {
  if (!e) return 'no edge recorded (a ledger without edge trust signed it)';
  return h('span', null, `edge ${e.edge_id} · credential `, mono(e.credential_id ?? ''), ' · key ', short(e.key, 16));
}

function decision(r) {
  const d = r.decision ?? {};
  return h('section', null, h('h2', null, 'Decision'), kv([
    ['Verdict', badge(d.verdict ?? '?')], ['Reason', d.reason], ['Guard', d.guard ? mono(d.guard) : ''],
  ]));
}

function evidence(r) {
  const ev = r.evidence ?? [];
  return h('section', null, h('h2', null, 'Guard evidence'), ev.length === 0 ? note('No guard evidence recorded.') :
    table(['Guard', 'Verdict', 'Details'], ev.map((e) => [mono(e.guard_name), badge(e.verdict ? 'passed' : 'failed'), e.details ?? '']), { id: 'evidence' }));
}

function parameters(r) {
  return h('section', null, h('h2', null, 'Parameters'),
    h('pre', { id: 'parameters', class: 'json' }, JSON.stringify(r.action?.parameters, null, 2)),
    kv([['Parameter hash', mono(r.action?.parameter_hash ?? '')]]));
}

const BINDINGS = {
  bearer: 'the token alone (bearer)',
  dpop: 'an RFC 9449 DPoP proof by the capability\'s subject key',
  chio_dpop_v1: 'a chio.dpop_proof.v1 tool proof by the capability\'s subject key',
};

function binding(r) {
  const a = r.metadata?.attribution;
  if (!a) return h('section', null, h('h2', null, 'Holder binding'), note('The receipt records no attribution.'));
  const b = a.binding;
  return h('section', { id: 'binding' }, h('h2', null, 'Holder binding'), kv([
    ['Proved by', b ? (BINDINGS[b.method] ?? `unknown method ${b.method}`) : 'none recorded (signed before holder binding)'],
    ['Key thumbprint (jkt)', b?.jkt ? mono(b.jkt) : ''],
    ['Subject key', mono(a.subject_key ?? '')],
    ['Issuer key', mono(a.issuer_key ?? '')],
    ['Delegation depth', a.delegation_depth],
    ['Grant index', a.grant_index],
  ]));
}

// identity shows who an access-token caller was, as its identity
// provider said (metadata.attribution.identity): every value is the
// caller's own, so each is shown as text.
function identity(r) {
  const id = r.metadata?.attribution?.identity;
  const sec = h('section', { id: 'identity' }, h('h2', null, 'Caller identity'));
  if (!id) return append(sec, note('The caller presented a chio capability, not an identity provider\'s access token.'));
  const actors = (Array.isArray(id.act) ? id.act : []).filter((a) => a && typeof a === 'object')
    .map((a) => [a.sub, a.iss && `of ${a.iss}`, a.client_id && `client ${a.client_id}`].filter(Boolean).map(String).join(' '));
  return append(sec, kv([
    ['Subject', mono(String(id.subject ?? ''))],
    ['Issuer', mono(String(id.issuer ?? ''))],
    ['Client', id.client_id ? mono(String(id.client_id)) : ''],
    ['Audience', (Array.isArray(id.audience) ? id.audience : []).join(', ')],
    ['Token id', mono(String(id.token_id ?? ''))],
    ['Policy rule', id.rule],
    ['Acting for the subject', actors.length ? actors.join(' ← ') : 'no one: the subject itself'],
    ['Bound to key (cnf.jkt)', id.cnf_jkt ? mono(String(id.cnf_jkt)) : 'no (bearer token)'],
  ]));
}

// callChain shows metadata.governed_transaction: the intent and, for a
// call made on behalf of another, the chain it extends.
function callChain(r) {
  const tx = r.metadata?.governed_transaction;
  const sec = h('section', { id: 'call-chain' }, h('h2', null, 'Governed intent and call chain'));
  if (!tx) return append(sec, note('Not a governed call: no intent, no call chain.'));
  sec.append(kv([['Intent', mono(tx.intent_id)], ['Purpose', tx.purpose], ['Intent hash', short(tx.intent_hash, 24)]]));
  const c = tx.call_chain;
  if (!c) return append(sec, note('No call chain: this call was not made on behalf of another.'));
  sec.append(chainBoxes([
    ['Origin', c.originSubject],
    ['Delegator', c.delegatorSubject],
    ['Parent call', c.parentReceiptId ? receiptLink(c.parentReceiptId, 'receipt ' + c.parentReceiptId) : 'request ' + c.parentRequestId],
    ['This call', `${r.tool_server}/${r.tool_name}`],
  ]), kv([['Chain', mono(c.chainId)], ['Evidence', `${c.evidenceClass} (${(c.evidenceSources ?? []).join(', ')})`]]));
  return sec;
}

// lineage shows the capability's delegation chain (GET
// /v1/lineage/{id}/chain), root first, as the reader may see it.
async function lineage(capabilityID) {
  const sec = h('section', { id: 'lineage' }, h('h2', null, 'Capability chain'));
  if (!capabilityID) return sec;
  try {
    const body = await getJSON(`/v1/lineage/${encodeURIComponent(capabilityID)}/chain`);
    sec.append(chainBoxes((body.chain ?? []).map((c) => [`depth ${c.delegation_depth}`,
      h('span', null, mono(c.capability_id), ' subject ', short(c.subject_key, 16), ' expires ', time(c.expires_at))])));
  } catch (e) {
    sec.append(e instanceof APIError && e.status === 404 ? note('No lineage you may read for this capability.') : errorBox(e));
  }
  return sec;
}

function rawReceipt(r) {
  return h('details', null, h('summary', null, 'The signed receipt (JSON)'), h('pre', { class: 'json' }, JSON.stringify(r, null, 2)));
}

// ---- verification ----

// verifySection checks bytes, the receipt answer the page was drawn from.
function verifySection(id, bytes) {
  const out = h('div', { id: 'verify-output' });
  const button = h('button', { type: 'button', id: 'verify' }, 'Verify');
  const run = async () => {
    button.disabled = true;
    clear(out).append(h('p', { class: 'note', 'data-verify': 'running' }, 'Verifying…'));
    const res = await verifyReceipt(id, bytes, { json: getJSON }, pins.get());
    clear(out).append(verifyResult(res));
    button.disabled = false;
  };
  button.addEventListener('click', run);
  const section = h('section', { id: 'verify-section', class: 'card' }, h('h2', null, 'Verification'),
    note('Checks in this browser, on the receipt shown on this page: the kernel\'s signature, the leaf hash, the inclusion proof up to the checkpoint root, the checkpoint\'s signature and the pinned witnesses\' cosignatures.'),
    button, out);
  return { section, run };
}

// unpinnedWarning says whose keys a check used unless the log key is
// pinned: only a pinned log key ties the checkpoint to a log you chose, so
// a pinned kernel key alone does not make the result independent.
function unpinnedWarning(res) {
  if (res.logPinned) return null;
  const own = res.kernelPinned ? 'log key' : 'kernel key and log key';
  const lead = res.kernelPinned ? 'The log key is not pinned' : 'No keys are pinned';
  return h('p', { class: 'warning', id: 'verify-unpinned' },
    `${lead}: this checked against the server's own keys (its ${own}). That proves the receipt, its proof and the checkpoint are consistent with each other, not whose log it is. Pin the log key you got another way on the Pinned keys page.`);
}

function verifyResult(res) {
  const el = h('div', { id: 'verify-result', class: res.ok ? 'verify ok' : 'verify failed', 'data-verify': res.ok ? 'ok' : 'failed', role: 'status' });
  el.append(h('p', { class: 'verdict' }, res.ok ? 'Verified' : 'Verification failed: ' + res.reason));
  append(el, unpinnedWarning(res));
  el.append(kv([
    ['Kernel key', res.kernelKey ? h('span', null, mono(res.kernelKey), ` (${res.kernelKeySource === 'pinned' ? 'pinned' : 'server\'s own'})`) : ''],
    ['Log key', res.logKey ? h('span', null, mono(res.logKey), ` (${res.logKeySource === 'pinned' ? 'pinned' : 'server\'s own'})`) : ''],
    ['Checkpoint', res.checkpoint ? h('span', { id: 'verify-checkpoint' }, `${res.checkpoint.origin}, size ${res.checkpoint.size}, root `, mono(res.checkpoint.root)) : ''],
    ['Witnesses checked', res.witnesses.length ? res.witnesses.map((w) => h('div', null, `${w.name} at ${new Date(w.time * 1000).toISOString()}`)) : (res.ok ? 'none pinned' : '')],
    ['Cosignatures not checked', res.unchecked?.length ? res.unchecked.join(', ') + ' (no pinned key)' : ''],
  ]));
  el.append(h('ol', { class: 'steps' }, res.steps.map((s) => h('li', null, '✓ ', s)), res.ok ? null : h('li', { class: 'error' }, '✗ ', res.reason)));
  return el;
}
