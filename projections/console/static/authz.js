// The authorization-context report (GET
// /v1/reports/authorization-context): one row per governed receipt the
// kernel authorized, with its grant, intent, sender constraint and call
// chain, drawn as nested boxes.

import { h, table, kv, link, receiptLink, short, mono, errorBox, note, time, chainBoxes } from './dom.js';
import { getJSON, query } from './api.js';

const PARAMS = ['capabilityId', 'toolServer', 'toolName', 'since', 'until'];
const LABELS = { capabilityId: 'Capability', toolServer: 'Tool server', toolName: 'Tool', since: 'Since', until: 'Until' };

function filterForm(q) {
  const form = h('form', { id: 'authz-form', class: 'filters' },
    PARAMS.map((p) => h('label', null, LABELS[p], h('input', { name: p, id: 'a-' + p, value: q.get(p) ?? '', placeholder: p === 'since' || p === 'until' ? 'Unix seconds' : '' }))),
    h('button', { type: 'submit' }, 'Show'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const next = new URLSearchParams();
    for (const p of PARAMS) if (form.elements[p].value.trim()) next.set(p, form.elements[p].value.trim());
    location.hash = '#/authz' + (next.toString() ? '?' + next : '');
  });
  return form;
}

export async function authzPage(main, _params, q) {
  main.append(h('h1', null, 'Authorization context'), filterForm(q));
  let rep;
  try {
    const params = Object.fromEntries(PARAMS.map((p) => [p, q.get(p) ?? '']));
    rep = await getJSON('/v1/reports/authorization-context' + query({ ...params, authorizationLimit: 200 }));
  } catch (e) {
    main.append(errorBox(e));
    return;
  }
  const s = rep.summary ?? {};
  main.append(h('section', { class: 'card', id: 'authz-summary' }, kv([
    ['Matching receipts', String(s.matchingReceipts ?? 0)], ['With a call chain', String(s.callChainReceipts ?? 0)],
    ['Sender bound', String(s.senderBoundReceipts ?? 0)], ['DPoP bound', String(s.dpopBoundReceipts ?? 0)],
    ['Delegated, sender bound', String(s.delegatedSenderBoundReceipts ?? 0)],
  ])));
  const rows = rep.receipts ?? [];
  if (rows.length === 0) {
    main.append(note('No governed receipts the kernel authorized match, or none you may read.'));
    return;
  }
  main.append(table(['Time', 'Receipt', 'Capability', 'Grant', 'Intent', 'Sender'], rows.map(row), { id: 'authz-table' }));
  const chains = rows.filter((r) => r.transactionContext?.callChain);
  main.append(h('section', { id: 'authz-chains' }, h('h2', null, 'Call chains'),
    chains.length ? chains.map(chainOf) : note('None of these calls was made on behalf of another.')));
}

function row(r) {
  const d = (r.authorizationDetails ?? [])[0] ?? {};
  const sc = r.senderConstraint ?? {};
  return h('tr', { data: { receiptId: r.receiptId } },
    h('td', null, time(r.timestamp)),
    h('td', null, receiptLink(r.receiptId)),
    h('td', null, link(['authz'], r.capabilityId, { capabilityId: r.capabilityId })),
    h('td', null, `${d.type ?? ''} ${(d.locations ?? []).join(',')} ${(d.actions ?? []).join(',')}`.trim(), d.purpose ? h('div', { class: 'muted' }, d.purpose) : null),
    h('td', null, mono(r.transactionContext?.intentId ?? '')),
    h('td', null, sc.proofRequired ? `${sc.proofType} ` : 'bearer ', sc.proofKeyThumbprint ? short(sc.proofKeyThumbprint, 10) : '',
      h('div', { class: 'muted' }, 'subject ', short(sc.subjectKey, 10))));
}

function chainOf(r) {
  const c = r.transactionContext.callChain;
  return h('div', { class: 'card' }, h('p', null, 'Chain ', mono(c.chainId), ` — evidence ${c.evidenceClass}`),
    chainBoxes([
      ['Origin', c.originSubject],
      ['Delegator', c.delegatorSubject],
      ['Parent', c.parentReceiptId ? receiptLink(c.parentReceiptId) : 'request ' + c.parentRequestId],
      ['Call', receiptLink(r.receiptId)],
    ]));
}
