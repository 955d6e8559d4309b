// The console's shell: a hash router, the sign-in form and the pinned-keys
// page. Each page module renders into its own container in <main>, which
// is marked data-loaded="<page>" when done: the browser tests wait for it.

import { h, clear, errorBox, note, kv, mono } from './dom.js';
import { session, pins, loadConfig, getJSON } from './api.js';
import { parseVerifierKey } from './verify.js';
import { overviewPage } from './overview.js';
import { receiptsPage, receiptPage } from './receipts.js';
import { tasksPage, taskPage } from './tasks.js';
import { authzPage } from './authz.js';

const routes = [
  { re: /^\/?$/, page: 'overview', render: overviewPage, signedIn: false },
  { re: /^\/receipts$/, page: 'receipts', render: receiptsPage, signedIn: true },
  { re: /^\/receipts\/([^/]+)$/, page: 'receipt', render: receiptPage, signedIn: true },
  { re: /^\/tasks$/, page: 'tasks', render: tasksPage, signedIn: true },
  { re: /^\/tasks\/([^/]+)$/, page: 'task', render: taskPage, signedIn: true },
  { re: /^\/authz$/, page: 'authz', render: authzPage, signedIn: true },
  { re: /^\/keys$/, page: 'keys', render: keysPage, signedIn: false },
  { re: /^\/signin$/, page: 'signin', render: signInPage, signedIn: false },
];

let generation = 0;

// parseHash splits "#/receipts/ID?verify=1" into a path and its query.
function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const q = raw.indexOf('?');
  return { path: q < 0 ? raw : raw.slice(0, q), query: new URLSearchParams(q < 0 ? '' : raw.slice(q + 1)) };
}

// route renders the current hash's page into a container of its own that
// replaces the last page's: a page still awaiting an answer after the user
// moved on keeps writing into its container, which is no longer in the
// document, so nothing of it reaches the page now shown.
async function route() {
  const gen = ++generation;
  const current = () => gen === generation;
  const main = document.getElementById('main');
  const view = h('div', { class: 'view' });
  const { path, query } = parseHash();
  const r = routes.find((x) => x.re.test(path));
  main.replaceChildren(view);
  delete main.dataset.loaded;
  renderNav(r?.page);
  if (!r) {
    view.append(h('h1', null, 'Not found'), note(`No console page at ${path}.`));
    main.dataset.page = 'notfound';
    main.dataset.loaded = 'notfound';
    return;
  }
  main.dataset.page = r.page;
  if (r.signedIn && !session.token()) {
    signInForm(view, `Sign in to see ${r.page === 'receipt' ? 'this receipt' : 'this page'}.`);
    main.dataset.loaded = 'signin';
    return;
  }
  try {
    const params = r.re.exec(path).slice(1).map(decodeURIComponent);
    await r.render(view, params, query, current);
  } catch (e) {
    view.append(errorBox(e));
  }
  if (current()) main.dataset.loaded = r.page;
}

function renderNav(active) {
  const nav = clear(document.getElementById('nav'));
  const items = [['overview', '#/', 'Overview'], ['receipts', '#/receipts', 'Receipts'], ['tasks', '#/tasks', 'Tasks'],
    ['authz', '#/authz', 'Authorization'], ['keys', '#/keys', 'Pinned keys']];
  for (const [page, href, text] of items) {
    const current = active === page || (active === 'receipt' && page === 'receipts') || (active === 'task' && page === 'tasks');
    nav.append(h('a', { href, class: current ? 'current' : null, 'aria-current': current ? 'page' : null }, text));
  }
  const who = clear(document.getElementById('who'));
  if (session.token()) {
    who.append(h('span', { class: 'signed-in' }, 'Signed in'),
      h('button', { type: 'button', id: 'signout', onclick: signOut }, 'Sign out'));
  } else {
    who.append(h('a', { href: '#/signin', id: 'signin-link' }, 'Sign in'));
  }
}

function signOut() {
  session.signOut();
  location.hash = '#/signin';
  route();
}

// signInForm asks for the credential: an operator token, or an auditor's
// or tenant's capability token. It is kept in sessionStorage only.
function signInForm(main, why) {
  const input = h('textarea', { id: 'token', name: 'token', rows: 4, autocomplete: 'off', spellcheck: 'false', required: true,
    placeholder: 'operator token, or an auditor\'s or tenant\'s capability token' });
  const form = h('form', { id: 'signin', class: 'card' },
    h('label', { for: 'token' }, 'Credential'), input,
    h('p', { class: 'hint' }, 'Sent as Authorization: Bearer on each API call and kept in this tab\'s session storage until you sign out or close the tab. ' +
      'You see exactly what the API lets this credential read.'),
    h('button', { type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (!input.value.trim()) return;
    session.signIn(input.value);
    const back = sessionStorage.getItem('chio.after') ?? '#/';
    sessionStorage.removeItem('chio.after');
    if (location.hash === back) route(); else location.hash = back;
  });
  if (!location.hash.startsWith('#/signin')) sessionStorage.setItem('chio.after', location.hash || '#/');
  main.append(h('h1', null, 'Sign in'), note(why), form);
}

async function signInPage(main) {
  if (session.token()) {
    main.append(h('h1', null, 'Signed in'), note('This tab holds a credential. Sign out to use another.'));
    return;
  }
  signInForm(main, 'The console reads the ledger and projection APIs as you.');
}

// keysPage pins the log's verifier key, the kernel key and witness keys:
// receipts then verify against these instead of the server's own keys.
async function keysPage(main) {
  const p = pins.get();
  const logKey = h('input', { id: 'pin-log', name: 'log', value: p.logKey, spellcheck: 'false', placeholder: 'origin+hash+key (checkpoint.vkey)' });
  const kernelKey = h('input', { id: 'pin-kernel', name: 'kernel', value: p.kernelKey, spellcheck: 'false', placeholder: '64 hex (kernel.pub)' });
  const witnesses = h('textarea', { id: 'pin-witnesses', name: 'witnesses', rows: 3, spellcheck: 'false', placeholder: 'one witness verifier key per line' });
  witnesses.value = p.witnessKeys.join('\n');
  const status = h('p', { id: 'pin-status', role: 'status' });
  let shown = currentPins(p);
  const save = async (ev) => {
    ev.preventDefault();
    try {
      const next = await checkPins(logKey.value, kernelKey.value, witnesses.value);
      pins.set(next);
      shown.replaceWith(shown = currentPins(next));
      status.textContent = 'Saved. Receipts now verify against these keys.';
      status.className = 'ok';
    } catch (e) {
      status.textContent = e.message;
      status.className = 'error';
    }
  };
  const fromServer = async () => {
    try {
      const k = await getJSON('/v1/log/keys');
      logKey.value = k.checkpoint_vkey ?? '';
      kernelKey.value = k.kernel_key ?? '';
      status.textContent = 'Filled in from this server. Compare them with keys you got another way before saving: pinning what the server says proves nothing about whose log it is.';
      status.className = 'note';
    } catch (e) {
      status.textContent = e.message;
      status.className = 'error';
    }
  };
  const clearPins = () => {
    pins.clear();
    shown.replaceWith(shown = currentPins(pins.get()));
    logKey.value = kernelKey.value = witnesses.value = '';
    status.textContent = 'Cleared. Receipts verify against the server\'s own keys.';
    status.className = 'note';
  };
  const form = h('form', { id: 'pins', class: 'card', onsubmit: save },
    h('label', { for: 'pin-log' }, 'Log verifier key (C2SP signed-note key of the checkpoints)'), logKey,
    h('label', { for: 'pin-kernel' }, 'Kernel key (signs receipts)'), kernelKey,
    h('label', { for: 'pin-witnesses' }, 'Witness verifier keys (cosignature/v1)'), witnesses,
    h('div', { class: 'buttons' }, h('button', { type: 'submit', id: 'pin-save' }, 'Save'),
      h('button', { type: 'button', id: 'pin-fill', onclick: fromServer }, 'Fill in from this server'),
      h('button', { type: 'button', id: 'pin-clear', onclick: clearPins }, 'Clear')),
    status);
  main.append(h('h1', null, 'Pinned keys'),
    note('Keys you obtained out of band (from the operator, a published policy, a witness). With them pinned, the Verify button proves a receipt was signed by that kernel and is in that log, as the witnesses saw it. Without them it checks against the server\'s own keys: that proves the log is consistent, not whose log it is.'),
    form, shown);
}

async function checkPins(log, kernel, witnessText) {
  const next = { logKey: log.trim(), kernelKey: kernel.trim().toLowerCase(), witnessKeys: witnessText.split('\n').map((l) => l.trim()).filter(Boolean) };
  if (next.logKey) await parseVerifierKey(next.logKey, 1);
  if (next.kernelKey && !/^[0-9a-f]{64}$/.test(next.kernelKey)) throw new Error('the kernel key must be 64 hex characters');
  for (const w of next.witnessKeys) await parseVerifierKey(w, 4);
  return next;
}

function currentPins(p) {
  return h('section', { id: 'pinned' }, h('h2', null, 'Now pinned'), kv([
    ['Log key', p.logKey ? mono(p.logKey) : 'none (the server\'s own)'],
    ['Kernel key', p.kernelKey ? mono(p.kernelKey) : 'none (the server\'s own)'],
    ['Witnesses', p.witnessKeys.length ? p.witnessKeys.map((w) => h('div', null, mono(w))) : 'none'],
  ]));
}

async function start() {
  await loadConfig();
  addEventListener('hashchange', route);
  await route();
}

start();
