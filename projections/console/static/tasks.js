// Tasks: the list (GET /v1/tasks) and one task's timeline, generation by
// generation (GET /v1/tasks/{id}/timeline): states, events, artifacts,
// receipts and the replica that served each.

import { h, table, kv, link, receiptLink, mono, errorBox, note, badge } from './dom.js';
import { getJSON, query, APIError } from './api.js';

export async function tasksPage(main, _params, q) {
  main.append(h('h1', null, 'Tasks'));
  const list = await getJSON('/v1/tasks' + query({ state: q.get('state'), contextId: q.get('contextId'), cursor: q.get('cursor'), limit: 50 }));
  const tasks = list.tasks ?? [];
  if (tasks.length === 0) {
    main.append(note('No tasks, or none you may read.'));
    return;
  }
  main.append(table(['Task', 'State', 'Context', 'Updated', 'Receipts'], tasks.map((t) => h('tr', { data: { taskId: t.id } },
    h('td', null, link(['tasks', t.id], t.id)), h('td', null, badge(stateName(t.status?.state))),
    h('td', null, mono(t.contextId ?? '')), h('td', null, t.status?.timestamp ?? ''), h('td', null, String((t.receiptIds ?? []).length)))),
  { id: 'task-table' }));
  if (list.nextCursor) {
    const next = new URLSearchParams(q);
    next.set('cursor', list.nextCursor);
    main.append(h('p', { class: 'pager' }, h('a', { href: '#/tasks?' + next, id: 'next-page' }, 'Next page')));
  }
}

// stateName shortens TASK_STATE_WORKING to working.
function stateName(s) {
  return String(s ?? '?').replace(/^TASK_STATE_/, '').toLowerCase();
}

export async function taskPage(main, [id]) {
  main.append(h('h1', null, 'Task ', mono(id)));
  const t = await getJSON('/v1/tasks/' + encodeURIComponent(id));
  main.append(h('section', { class: 'card' }, kv([
    ['State', badge(stateName(t.status?.state))], ['Context', mono(t.contextId ?? '')], ['Updated', t.status?.timestamp],
    ['Artifacts', String((t.artifacts ?? []).length)],
    ['Receipts', (t.receiptIds ?? []).map((r) => h('div', null, receiptLink(r)))],
  ])));
  const sec = h('section', { id: 'timeline' }, h('h2', null, 'Timeline'));
  main.append(sec);
  try {
    const tl = await getJSON(`/v1/tasks/${encodeURIComponent(id)}/timeline`);
    const gens = tl.generations ?? [];
    if (gens.length === 0) sec.append(note('No generations recorded.'));
    sec.append(h('ol', { class: 'timeline' }, gens.map(generation)));
  } catch (e) {
    sec.append(e instanceof APIError && e.status === 404 ? note('This server has no timeline for the task (/v1/tasks/{id}/timeline).') : errorBox(e));
  }
}

// artifacts lists a commit's artifact events: each artifact's name or id
// and its text parts, as text.
function artifacts(list) {
  if (!Array.isArray(list)) return String(list ?? 0);
  if (list.length === 0) return 'none';
  return list.map((a) => {
    const art = a?.artifact ?? {};
    const texts = (art.parts ?? []).map((p) => p?.text).filter((t) => typeof t === 'string');
    const text = texts.join(' ');
    return h('div', null, mono(art.name || art.artifactId || 'artifact'), a?.append ? ' (appended)' : '',
      text ? h('span', { class: 'muted' }, ' ' + (text.length > 200 ? text.slice(0, 200) + '…' : text)) : '');
  });
}

function generation(g) {
  const events = (g.events ?? []).map((e) => (typeof e === 'string' ? e : [e.type, e.state && stateName(e.state)].filter(Boolean).join(' ')));
  return h('li', { class: 'generation', data: { generation: String(g.generation) } },
    h('div', { class: 'gen-head' }, h('strong', null, `Generation ${g.generation}`), ' ', badge(stateName(g.state)),
      h('span', { class: 'muted' }, ` seq ${g.seq} · ${g.time ?? ''}`)),
    kv([
      ['Replica', g.replica ? mono(g.replica) : 'not recorded'],
      ['Events', events.join(', ')],
      ['Artifacts', artifacts(g.artifacts)],
      ['Receipts', (g.receipt_ids ?? []).map((r) => h('div', null, receiptLink(r)))],
    ]));
}
