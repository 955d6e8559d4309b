// The console's API client: the signed-in credential goes in the
// Authorization header of every call (never a cookie), and errors come back
// as text the page shows.

const TOKEN_KEY = 'chio.token';
const PINS_KEY = 'chio.pins';

let ledgerBase = '';

// The session's credential lives in sessionStorage: it is gone when the tab
// closes, and no other site can send it (there is no cookie).
export const session = {
  token: () => sessionStorage.getItem(TOKEN_KEY) ?? '',
  signIn: (t) => sessionStorage.setItem(TOKEN_KEY, t.trim()),
  signOut: () => sessionStorage.removeItem(TOKEN_KEY),
};

// Pinned keys live in localStorage: they are trust decisions, kept across
// sessions, and hold nothing secret.
export const pins = {
  get() {
    try {
      const p = JSON.parse(localStorage.getItem(PINS_KEY) ?? '{}');
      return { logKey: p.logKey ?? '', kernelKey: p.kernelKey ?? '', witnessKeys: Array.isArray(p.witnessKeys) ? p.witnessKeys : [] };
    } catch {
      return { logKey: '', kernelKey: '', witnessKeys: [] };
    }
  },
  set(p) { localStorage.setItem(PINS_KEY, JSON.stringify(p)); },
  clear() { localStorage.removeItem(PINS_KEY); },
};

// loadConfig reads where the ledger API lives (empty: this origin).
export async function loadConfig() {
  try {
    const res = await fetch('config.json', { cache: 'no-store', credentials: 'omit' });
    if (res.ok) ledgerBase = ((await res.json()).ledgerUrl ?? '').replace(/\/$/, '');
  } catch {
    ledgerBase = '';
  }
}

// The ledger serves the log and the receipts; the projections (this
// origin) serve everything else.
function baseOf(path) {
  return /^\/(log\/|v1\/log\/|v1\/receipts|v1\/checkpoints)/.test(path) ? ledgerBase : '';
}

export class APIError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function request(path) {
  const headers = {};
  const tok = session.token();
  if (tok) headers.Authorization = 'Bearer ' + tok;
  let res;
  try {
    res = await fetch(baseOf(path) + path, { headers, credentials: 'omit', cache: 'no-store' });
  } catch (e) {
    throw new APIError(0, `GET ${path}: ${e.message}`);
  }
  if (!res.ok) throw await errorOf(path, res);
  return res;
}

// errorOf turns an error answer into an APIError naming the server's reason.
async function errorOf(path, res) {
  let msg = res.statusText || 'error';
  let code = '';
  try {
    const body = await res.json();
    msg = body.error ?? msg;
    code = body.code ?? '';
  } catch { /* not JSON: keep the status text */ }
  return new APIError(res.status, `GET ${path.split('?')[0]}: ${res.status} ${msg}`, code);
}

export async function getJSON(path) {
  return (await request(path)).json();
}

export async function getText(path) {
  return (await request(path)).text();
}

// getBytes reads a body as bytes: what verification hashes must not go
// through a string decoder first.
export async function getBytes(path) {
  return new Uint8Array(await (await request(path)).arrayBuffer());
}

// query builds a query string from the non-empty values of obj.
export function query(obj) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(obj)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? '?' + s : '';
}
