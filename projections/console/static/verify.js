// Receipt verification in the browser, with WebCrypto alone:
//   1. the receipt's Ed25519 signature against its kernel_key (and that key
//      against the pinned kernel key, if one is pinned);
//   2. its RFC 6962 leaf hash against the inclusion proof's;
//   3. the audit path up to a root, against the checkpoint's size and root;
//   4. the checkpoint's C2SP signed-note signature, by the pinned log key
//      (else the server's own);
//   5. each pinned witness's C2SP tlog-cosignature of that checkpoint.
// The leaf is the RFC 8785 (JCS) form of the signed receipt, as the ledger
// logs it; the signature covers the JCS of the receipt without
// "signature" (and without the unsigned "algorithm" hint).

const enc = new TextEncoder();

export class VerifyError extends Error {}

function fail(msg) {
  throw new VerifyError(msg);
}

// ---- encodings ----

export function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}

export function unhex(s, len, what) {
  if (typeof s !== 'string' || !/^([0-9a-f]{2})*$/.test(s) || (len && s.length !== 2 * len)) {
    fail(`${what} is not ${len ? len + ' bytes of ' : ''}lowercase hex`);
  }
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.slice(2 * i, 2 * i + 2), 16);
  return out;
}

export function b64(s, what) {
  if (typeof s !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) fail(`${what} is not base64`);
  const bin = atob(s);
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  return out;
}

function equal(a, b) {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

async function sha256(...parts) {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', concat(...parts)));
}

// parseHash reads the API's hash form: "0x" and 64 lowercase hex.
function parseHash(s, what) {
  if (typeof s !== 'string' || !s.startsWith('0x')) fail(`${what} is not 0x-prefixed hex`);
  return unhex(s.slice(2), 32, what);
}

async function ed25519Verify(pub, sig, msg) {
  const key = await crypto.subtle.importKey('raw', pub, { name: 'Ed25519' }, false, ['verify']);
  return crypto.subtle.verify({ name: 'Ed25519' }, key, sig, msg);
}

// ---- RFC 8785 ----

// canonical is RFC 8785 JSON: keys sorted by UTF-16 code units (JS's
// default sort), numbers and strings as ECMAScript's JSON.stringify writes
// them, which is what RFC 8785 specifies.
export function canonical(v) {
  if (v === null || typeof v !== 'object') {
    if (typeof v === 'number' && !Number.isFinite(v)) fail('a number is not finite');
    return JSON.stringify(v);
  }
  if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
  return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canonical(v[k])).join(',') + '}';
}

// ---- the receipt ----

// leafOf reads GET /v1/receipts/{id}'s body: {"receipt": …, "leaf_index"}
// gives the leaf as the receipt's JCS (the body's JSON encoder may escape
// characters the leaf holds literally, so its bytes are not the leaf's);
// {"raw": base64, "unreadable": why, …} (a receipt no reader can decode)
// gives it as stored. The receipt page draws from this and verifyReceipt
// checks the same bytes, so what is shown is what was verified.
export function leafOf(bodyBytes) {
  let body;
  try {
    body = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bodyBytes));
  } catch (e) {
    fail(`the receipt answer is not JSON: ${e.message}`);
  }
  if (body && typeof body.receipt === 'object' && body.receipt !== null) {
    return { leaf: enc.encode(canonical(body.receipt)), receipt: body.receipt, leafIndex: body.leaf_index };
  }
  if (body && typeof body.raw === 'string') {
    const leaf = b64(body.raw, 'raw');
    let receipt = null;
    try { receipt = JSON.parse(new TextDecoder().decode(leaf)); } catch { /* unreadable: signature check fails below */ }
    return { leaf, receipt, leafIndex: body.leaf_index, unreadable: String(body.unreadable ?? 'undecodable') };
  }
  fail('the receipt answer holds neither a receipt nor its raw bytes');
}

// checkReceipt verifies the signature (and the parameter hash) and returns
// the kernel key that signed it.
export async function checkReceipt(receipt, pinnedKernel) {
  if (!receipt || typeof receipt !== 'object' || Array.isArray(receipt)) fail('the leaf is not a JSON object');
  if (receipt.algorithm !== undefined && receipt.algorithm !== 'ed25519') fail(`algorithm ${receipt.algorithm} is not ed25519`);
  const pub = unhex(receipt.kernel_key, 32, 'kernel_key');
  const sig = unhex(receipt.signature, 64, 'signature');
  const body = { ...receipt };
  delete body.signature;
  delete body.algorithm;
  if (!(await ed25519Verify(pub, sig, enc.encode(canonical(body))))) {
    fail(`the receipt's signature does not verify against its kernel_key ${receipt.kernel_key}`);
  }
  if (pinnedKernel && receipt.kernel_key !== pinnedKernel.toLowerCase()) {
    fail(`the receipt is signed by kernel key ${receipt.kernel_key}, not the pinned kernel key ${pinnedKernel}`);
  }
  const params = receipt.action?.parameters;
  if (params === undefined || hex(await sha256(enc.encode(canonical(params)))) !== receipt.action?.parameter_hash) {
    fail('action.parameter_hash does not match the parameters');
  }
  return receipt.kernel_key;
}

// ---- RFC 6962 / RFC 9162 ----

export async function leafHash(leaf) {
  return sha256(Uint8Array.of(0), leaf);
}

// rootFromInclusion runs RFC 9162 §2.1.3.2: the root an audit path gives
// for leaf index of a tree of size, or a failure when the path's length
// does not fit the tree.
export async function rootFromInclusion(index, size, hash, path) {
  let fn = BigInt(index);
  let sn = BigInt(size) - 1n;
  if (fn > sn) fail(`leaf index ${index} is not in a tree of size ${size}`);
  let r = hash;
  for (const p of path) {
    if (sn === 0n) fail('the audit path is longer than the tree allows');
    if ((fn & 1n) === 1n || fn === sn) {
      r = await sha256(Uint8Array.of(1), p, r);
      if ((fn & 1n) === 0n) {
        while ((fn & 1n) === 0n && fn !== 0n) { fn >>= 1n; sn >>= 1n; }
      }
    } else {
      r = await sha256(Uint8Array.of(1), r, p);
    }
    fn >>= 1n;
    sn >>= 1n;
  }
  if (sn !== 0n) fail('the audit path is shorter than the tree needs');
  return r;
}

// ---- C2SP signed notes ----

// parseNote splits a signed note into its body text (with its final
// newline) and its signature lines.
export function parseNote(text) {
  const cut = text.indexOf('\n\n');
  if (cut < 0 || !text.endsWith('\n')) fail('the checkpoint is not a signed note');
  const body = text.slice(0, cut + 1);
  const sigs = text.slice(cut + 2).split('\n').filter((l) => l !== '').map((line) => {
    const m = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!m) fail('a checkpoint signature line is malformed');
    return { name: m[1], sig: b64(m[2], 'a checkpoint signature') };
  });
  if (sigs.length === 0) fail('the checkpoint has no signature');
  return { body, sigs };
}

// parseCheckpoint reads a C2SP checkpoint body: origin, size, root.
export function parseCheckpoint(body) {
  const lines = body.split('\n');
  if (lines.length < 4 || !lines[0] || !/^[0-9]+$/.test(lines[1])) fail('the checkpoint body is malformed');
  const root = b64(lines[2], 'the checkpoint root');
  if (root.length !== 32) fail('the checkpoint root is not 32 bytes');
  return { origin: lines[0], size: BigInt(lines[1]), root };
}

// parseVerifierKey reads a note verifier key, name+hexhash+base64(alg‖key),
// of the given algorithm (0x01 Ed25519 notes, 0x04 cosignature/v1), and
// checks its key hash: SHA-256(name ‖ "\n" ‖ alg ‖ key)[:4].
export async function parseVerifierKey(vkey, alg) {
  // The name holds no '+'; the base64 key may.
  const text = String(vkey ?? '').trim();
  const m = /^([^+\s]+)\+([0-9a-f]{8})\+(\S+)$/.exec(text);
  if (!m) fail(`verifier key ${text} is not name+hash+key`);
  const [, name, hashHex, keyB64] = m;
  const data = b64(keyB64, 'the verifier key');
  if (data.length !== 33 || data[0] !== alg) {
    fail(`verifier key ${name} is not an ${alg === 1 ? 'Ed25519 note key (0x01)' : 'Ed25519 cosignature key (0x04)'}`);
  }
  const keyHash = (await sha256(enc.encode(name + '\n'), data)).slice(0, 4);
  if (hex(keyHash) !== hashHex) fail(`verifier key ${name}: its key hash does not match its key`);
  return { name, keyHash, pub: data.slice(1), text };
}

function signatureBy(sigs, key, len) {
  return sigs.find((s) => s.name === key.name && s.sig.length === len && equal(s.sig.slice(0, 4), key.keyHash));
}

export async function checkNoteSignature(note, key) {
  const s = signatureBy(note.sigs, key, 68);
  if (!s) fail(`the checkpoint carries no signature by log key ${key.name}`);
  if (!(await ed25519Verify(key.pub, s.sig.slice(4), enc.encode(note.body)))) {
    fail(`the checkpoint's signature by ${key.name} does not verify`);
  }
}

// checkCosignature verifies a witness's cosignature/v1 and returns its time.
export async function checkCosignature(note, key) {
  const s = signatureBy(note.sigs, key, 76);
  if (!s) fail(`the checkpoint carries no cosignature by witness ${key.name}`);
  const ts = new DataView(s.sig.buffer, s.sig.byteOffset + 4, 8).getBigUint64(0, false);
  const msg = enc.encode(`cosignature/v1\ntime ${ts}\n` + note.body);
  if (!(await ed25519Verify(key.pub, s.sig.slice(12), msg))) fail(`witness ${key.name}'s cosignature does not verify`);
  return Number(ts);
}

// ---- the whole check ----

// verifyReceipt runs every check on bodyBytes, the body of GET
// /v1/receipts/{id} the page drew (it is not fetched again: a second copy
// could differ from the one shown), with the rest from the API ({json})
// and pins ({logKey, kernelKey, witnessKeys}). It never throws: the result
// says ok or names the first failure, with what was checked so far.
export async function verifyReceipt(id, bodyBytes, api, pin) {
  const res = { ok: false, steps: [], logPinned: Boolean(pin.logKey), kernelPinned: Boolean(pin.kernelKey), witnesses: [] };
  const step = (text) => res.steps.push(text);
  try {
    const rid = encodeURIComponent(id);
    const { leaf, receipt, leafIndex } = leafOf(bodyBytes);
    if (receipt?.id !== undefined && receipt.id !== id) fail(`the log answered receipt ${receipt.id} for ${id}`);
    let serverKeys = null;
    if (!pin.logKey || !pin.kernelKey) serverKeys = await api.json('/v1/log/keys');
    const kernelPin = pin.kernelKey || serverKeys?.kernel_key;
    res.kernelKey = await checkReceipt(receipt, kernelPin);
    res.kernelKeySource = pin.kernelKey ? 'pinned' : 'server';
    step(`Signature by kernel key ${res.kernelKey} (${pin.kernelKey ? 'the pinned key' : "the server's own kernel key"})`);

    const proof = await api.json(`/v1/receipts/${rid}/inclusion-proof`);
    if (proof.receipt_id !== id) fail(`the proof is for receipt ${proof.receipt_id}, not ${id}`);
    if (leafIndex !== undefined && proof.leaf_index !== leafIndex) fail(`the proof is for leaf ${proof.leaf_index}, the receipt is leaf ${leafIndex}`);
    const lh = await leafHash(leaf);
    if (!equal(lh, parseHash(proof.leaf_hash, 'leaf_hash'))) fail("the receipt's leaf hash is not the proof's leaf_hash");
    step(`Leaf hash 0x${hex(lh)} is leaf ${proof.leaf_index}`);

    const path = (proof.audit_path ?? []).map((p, i) => parseHash(p, `audit_path[${i}]`));
    const root = await rootFromInclusion(proof.leaf_index, proof.tree_size, lh, path);
    const note = parseNote(String(proof.checkpoint ?? ''));
    const cp = parseCheckpoint(note.body);
    res.checkpoint = { origin: cp.origin, size: cp.size.toString(), root: btoa(String.fromCharCode(...cp.root)) };
    if (cp.size !== BigInt(proof.tree_size)) fail(`the checkpoint is of size ${cp.size}, the proof of size ${proof.tree_size}`);
    if (!equal(root, cp.root)) fail("the audit path does not lead to the checkpoint's root");
    step(`Audit path of ${path.length} hashes leads to the root of tree size ${cp.size}`);

    const logKey = await parseVerifierKey(pin.logKey || serverKeys.checkpoint_vkey, 1);
    if (cp.origin !== logKey.name) fail(`the checkpoint's origin ${cp.origin} is not the log key's name ${logKey.name}`);
    await checkNoteSignature(note, logKey);
    res.logKey = logKey.text;
    res.logKeySource = pin.logKey ? 'pinned' : 'server';
    step(`Checkpoint signed by log key ${logKey.text} (${pin.logKey ? 'the pinned key' : "the server's own log key"})`);

    const pinnedNames = new Set();
    for (const w of pin.witnessKeys ?? []) {
      const key = await parseVerifierKey(w, 4);
      const at = await checkCosignature(note, key);
      pinnedNames.add(key.name);
      res.witnesses.push({ name: key.name, time: at });
      step(`Cosigned by witness ${key.name} at ${new Date(at * 1000).toISOString()}`);
    }
    // Cosignatures by witnesses nobody pinned are listed, not trusted.
    res.unchecked = note.sigs.filter((x) => x.sig.length === 76 && !pinnedNames.has(x.name)).map((x) => x.name);
    res.ok = true;
  } catch (e) {
    res.reason = e instanceof VerifyError ? e.message : `verification stopped: ${e.message}`;
  }
  return res;
}
