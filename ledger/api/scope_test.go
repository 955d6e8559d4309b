package api

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	tlog "github.com/transparency-dev/formats/log"

	"github.com/chio-ledger/chio/internal/dpopreplay"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/internal/revocation"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// tenants is a trusted issuer, two tenants A and B (root holders), A's
// delegate A1, and tokens for them and for read grants, authenticated
// against a real revocation mirror on embedded JetStream.
type tenants struct {
	auth *readauth.Authenticator
	// paths[i] are the authority-path principals of the receipts made
	// with cap-i: cap-0 by A, cap-1 by A's delegate A1, cap-2 by B.
	paths [3][]string
	// tokens by reader name.
	tokens map[string]string
	// signers prove possession for the tokens (by text) that need a
	// proof: those that can delegate.
	signers map[string]*dpop.Signer
	// keys by holder name: "A", "A1", "reader", "readerChild".
	keys   map[string]ed25519.PrivateKey
	revoke func(id string)
	// rebuilt is A's token as A1 rebuilds it from its own chain.
	rebuilt string
}

func newTenants(t *testing.T) *tenants {
	t.Helper()
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	kv, err := js.CreateOrUpdateKeyValue(ctx, schemas.RevocationsConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	revs, err := revocation.Watch(ctx, kv, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(revs.Stop)
	replay, err := dpopreplay.Open(ctx, js, 1, dpop.DefaultLifetime, dpop.DefaultSkew)
	if err != nil {
		t.Fatal(err)
	}
	key := func() (ed25519.PrivateKey, string) {
		pub, priv, _ := ed25519.GenerateKey(rand.Reader)
		return priv, schemas.EncodePublicKey(pub)
	}
	issuer, issuerPub := key()
	aKey, a := key()
	a1Key, a1 := key()
	bKey, b := key()
	auditorKey, auditor := key()
	readerKey, reader := key()
	readerChildKey, readerChild := key()
	now := uint64(time.Now().Unix())
	issue := func(id, subject string, grants ...schemas.ToolGrant) *schemas.CapabilityToken {
		tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{ID: id, Issuer: issuerPub, Subject: subject,
			Scope: schemas.Scope{Grants: grants}, IssuedAt: now - 10, ExpiresAt: now + 3600})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	tool := schemas.ToolGrant{ServerID: "fs", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}
	read := func(target string) schemas.ToolGrant {
		g, err := schemas.ReadGrant(target)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	tokA := issue("tok-a", a, tool)
	tokA1, err := schemas.Delegate(aKey, tokA, schemas.CapabilityBody{ID: "tok-a1", Subject: a1,
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "fs", ToolName: "read", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: now - 5, ExpiresAt: now + 1800})
	if err != nil {
		t.Fatal(err)
	}
	pathA := schemas.PathPrincipals(issuerPub, []string{a})
	tn := &tenants{
		paths: [3][]string{pathA, schemas.PathPrincipals(issuerPub, []string{a, a1}), schemas.PathPrincipals(issuerPub, []string{b})},
		auth: readauth.New(readauth.WithTrustedIssuers(issuerPub), readauth.WithRevocations(revs),
			readauth.WithServiceToken(operatorToken), readauth.WithReplay(replay)),
		keys: map[string]ed25519.PrivateKey{"A": aKey, "A1": a1Key, "reader": readerKey, "readerChild": readerChildKey},
	}
	// reader holds chio.read/*:read,delegate and delegates
	// chio.read/receipts to readerChild.
	readAllDelegating := read(schemas.ReadAll)
	readAllDelegating.Operations = append(readAllDelegating.Operations, schemas.OpDelegate)
	tokReader := issue("tok-reader", reader, readAllDelegating)
	tokReaderChild, err := schemas.Delegate(readerKey, tokReader, schemas.CapabilityBody{ID: "tok-reader-child", Subject: readerChild,
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{read(schemas.ReadReceipts)}}, IssuedAt: now - 5, ExpiresAt: now + 1800})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{ID: "tok-old", Issuer: issuerPub, Subject: a,
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{tool}}, IssuedAt: now - 7200, ExpiresAt: now - 3600})
	if err != nil {
		t.Fatal(err)
	}
	untrustedPriv, untrustedPub := key()
	untrusted, err := schemas.IssueCapability(untrustedPriv, schemas.CapabilityBody{ID: "tok-u", Issuer: untrustedPub, Subject: a,
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{read(schemas.ReadAll)}}, IssuedAt: now - 10, ExpiresAt: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	tn.tokens = map[string]string{}
	holders := map[string]ed25519.PrivateKey{"A": aKey, "B": bKey, "revokedA": aKey, "expired": aKey, "invokeOnly": auditorKey, "reader": readerKey}
	tn.signers = map[string]*dpop.Signer{}
	for name, tok := range map[string]*schemas.CapabilityToken{
		"reader": tokReader, "readerChild": tokReaderChild,
		"A": tokA, "A1": tokA1, "B": issue("tok-b", b, tool),
		"auditor":    issue("tok-audit", auditor, read(schemas.ReadReceipts)),
		"all":        issue("tok-all", auditor, read(schemas.ReadAll)),
		"tenantA":    issue("tok-ta", auditor, read(pathA[0])),
		"expired":    expired,
		"untrusted":  untrusted,
		"revokedA":   issue("tok-revoked", a, tool),
		"invokeOnly": issue("tok-io", auditor, tool),
	} {
		text, err := schemas.EncodeCapabilityHeader(tok)
		if err != nil {
			t.Fatal(err)
		}
		tn.tokens[name] = text
		if k := holders[name]; k != nil {
			if tn.signers[text], err = dpop.NewSigner(k, text); err != nil {
				t.Fatal(err)
			}
		}
	}
	if tn.rebuilt, err = schemas.EncodeCapabilityHeader(tokA1.Ancestor(len(tokA1.DelegationChain) - 1)); err != nil {
		t.Fatal(err)
	}
	tn.tokens["operator"] = operatorToken
	tn.tokens["garbage"] = "not-a-token"
	tn.revoke = func(id string) {
		raw, _ := json.Marshal(schemas.Revocation{CapabilityID: id, RevokedAt: now, Reason: "test"})
		if _, err := kv.Put(ctx, schemas.KVKey(id), raw); err != nil {
			t.Fatal(err)
		}
	}
	return tn
}

// TestReadsAreScopedToTheReader checks every private path for every kind of
// reader, and that nothing private leaks in a refusal: receipts r-NNN were
// made with cap-(N%3), by A, A's delegate A1 and B in turn, and carry the
// argument text secret-NNN.
func TestReadsAreScopedToTheReader(t *testing.T) {
	f := newFixture(t, 12)
	f.tenants.revoke("tok-revoked")
	// byA, byA1, byB: one receipt of each; the tree is checkpointed at 12.
	const byA, byA1, byB = "r-003", "r-004", "r-005"
	receiptPaths := func(id string) []string {
		return []string{"/v1/receipts/" + id, "/v1/receipts/" + id + "/inclusion-proof", "/v1/receipts/" + id + "/tlog-proof"}
	}
	type want struct {
		status int
		code   string
	}
	ok, hidden := want{200, ""}, want{404, "receipt_not_found"}
	unauth, forbidden := want{401, "unauthorized"}, want{403, "forbidden"}
	cases := []struct {
		reader           string
		a, a1, b         want
		bundle           want
		queryIDs         string // the receipts a query without filters returns
		revocationFailed bool
	}{
		{reader: "", a: unauth, a1: unauth, b: unauth, bundle: unauth},
		{reader: "garbage", a: unauth, a1: unauth, b: unauth, bundle: unauth},
		{reader: "expired", a: unauth, a1: unauth, b: unauth, bundle: unauth},
		{reader: "untrusted", a: unauth, a1: unauth, b: unauth, bundle: unauth},
		{reader: "revokedA", a: unauth, a1: unauth, b: unauth, bundle: unauth},
		{reader: "A", a: ok, a1: ok, b: hidden, bundle: forbidden, queryIDs: "r-000 r-001 r-003 r-004 r-006 r-007 r-009 r-010"},
		{reader: "A1", a: hidden, a1: ok, b: hidden, bundle: forbidden, queryIDs: "r-001 r-004 r-007 r-010"},
		{reader: "B", a: hidden, a1: hidden, b: ok, bundle: forbidden, queryIDs: "r-002 r-005 r-008 r-011"},
		{reader: "tenantA", a: ok, a1: ok, b: hidden, bundle: forbidden, queryIDs: "r-000 r-001 r-003 r-004 r-006 r-007 r-009 r-010"},
		{reader: "invokeOnly", a: hidden, a1: hidden, b: hidden, bundle: forbidden, queryIDs: ""},
		{reader: "auditor", a: ok, a1: ok, b: ok, bundle: ok},
		{reader: "all", a: ok, a1: ok, b: ok, bundle: ok},
		{reader: "operator", a: ok, a1: ok, b: ok, bundle: ok},
	}
	for _, c := range cases {
		t.Run("reader="+c.reader, func(t *testing.T) {
			token := f.tenants.tokens[c.reader]
			check := func(path string, w want, secret string) {
				t.Helper()
				status, hdr, body := f.getAs(t, token, path)
				if status != w.status {
					t.Fatalf("%s: status %d, want %d: %s", path, status, w.status, body)
				}
				if w.status == 200 {
					return
				}
				var e Error
				if err := json.Unmarshal(body, &e); err != nil || e.Code != w.code {
					t.Errorf("%s: body %s, want code %q", path, body, w.code)
				}
				if w.status == 401 && hdr.Get("WWW-Authenticate") == "" {
					t.Errorf("%s: 401 without WWW-Authenticate", path)
				}
				for _, leak := range []string{secret, "cap-", `"fs"`, "tool_name", "p:"} {
					if leak != "" && strings.Contains(string(body), leak) {
						t.Errorf("%s: refusal leaks %q: %s", path, leak, body)
					}
				}
			}
			for _, p := range receiptPaths(byA) {
				check(p, c.a, "secret-003")
			}
			for _, p := range receiptPaths(byA1) {
				check(p, c.a1, "secret-004")
			}
			for _, p := range receiptPaths(byB) {
				check(p, c.b, "secret-005")
			}
			check("/log/tile/entries/000.p/12", c.bundle, "secret-")
			// Queries: refused like the receipts when the credential is, else scoped.
			status, _, body := f.getAs(t, token, "/v1/receipts/query?limit=100")
			switch {
			case c.a.status == 401:
				if status != 401 || strings.Contains(string(body), "secret-") {
					t.Fatalf("query: %d %s", status, body)
				}
			case c.bundle.status == 200:
				var q queryBody
				if status != 200 || json.Unmarshal(body, &q) != nil || len(q.Receipts) != 12 || q.TotalCount != 12 {
					t.Fatalf("query: %d %s", status, body)
				}
			default:
				var q queryBody
				if status != 200 || json.Unmarshal(body, &q) != nil {
					t.Fatalf("query: %d %s", status, body)
				}
				var ids []string
				for _, r := range q.Receipts {
					var rc schemas.Receipt
					if err := json.Unmarshal(r, &rc); err != nil {
						t.Fatal(err)
					}
					ids = append(ids, rc.ID)
				}
				if got := strings.Join(ids, " "); got != c.queryIDs || q.TotalCount != uint64(len(ids)) {
					t.Errorf("query: got [%s] (total %d), want [%s]", got, q.TotalCount, c.queryIDs)
				}
				// A filter naming another tenant's capability finds nothing.
				_, _, body = f.getAs(t, token, "/v1/receipts/query?capabilityId=cap-2&limit=100")
				if c.reader != "B" && strings.Contains(string(body), "secret-") {
					t.Errorf("filtered query leaks B's receipts: %s", body)
				}
			}
		})
	}
}

// TestPublicHalfNeedsNoCredential is a monitor and a witness with no
// credential: they read checkpoints, hash tiles and consistency proofs,
// verify the checkpoint signature with sumdb/note and consistency with
// transparency-dev/merkle, and recompute the root from the hash tiles.
func TestPublicHalfNeedsNoCredential(t *testing.T) {
	f := newFixture(t, 300)
	status, _, raw := f.getAs(t, "", "/log/checkpoint")
	if status != 200 {
		t.Fatalf("checkpoint: %d %s", status, raw)
	}
	n, err := note.Open(raw, note.VerifierList(f.verifier))
	if err != nil {
		t.Fatalf("witness: checkpoint signature: %v", err)
	}
	var cp tlog.Checkpoint
	if _, err := cp.Unmarshal([]byte(n.Text)); err != nil || cp.Size != 300 {
		t.Fatalf("checkpoint: %v %+v", err, cp)
	}
	// The monitor's earlier view: the checkpoint signed at size 7.
	old, err := f.store.Checkpoint(7)
	if err != nil {
		t.Fatal(err)
	}
	on, err := note.Open(old, note.VerifierList(f.verifier))
	if err != nil {
		t.Fatal(err)
	}
	var oldCp tlog.Checkpoint
	if _, err := oldCp.Unmarshal([]byte(on.Text)); err != nil {
		t.Fatal(err)
	}
	status, _, body := f.getAs(t, "", fmt.Sprintf("/v1/log/consistency-proof?from=%d&to=%d", oldCp.Size, cp.Size))
	if status != 200 {
		t.Fatalf("consistency: %d %s", status, body)
	}
	var cons ConsistencyProof
	if err := json.Unmarshal(body, &cons); err != nil {
		t.Fatal(err)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, oldCp.Size, cp.Size, decodeHashes(t, cons.Proof), oldCp.Hash, cp.Hash); err != nil {
		t.Fatalf("monitor: consistency: %v", err)
	}
	// The root from the public hash tiles alone: level-0 tile 000 (256
	// leaf hashes) and the partial 001.p/44, then level-1 tile 000.p/1.
	status, _, t0 := f.getAs(t, "", "/log/tile/0/000")
	if status != 200 || len(t0) != 256*32 {
		t.Fatalf("tile 0/000: %d", status)
	}
	status, _, t1 := f.getAs(t, "", "/log/tile/0/001.p/44")
	if status != 200 || len(t1) != 44*32 {
		t.Fatalf("tile 0/001.p/44: %d", status)
	}
	leaves := append(t0, t1...)
	hashes := make([][]byte, 300)
	for i := range hashes {
		hashes[i] = leaves[i*32 : (i+1)*32]
	}
	if root := merkleRoot(hashes); string(root) != string(cp.Hash) {
		t.Fatal("the root recomputed from public hash tiles differs from the checkpoint")
	}
	for _, p := range []string{"/v1/log/keys", "/v1/checkpoints/latest"} {
		if status, _, body := f.getAs(t, "", p); status != 200 || strings.Contains(string(body), "secret-") {
			t.Errorf("%s: %d %s", p, status, body)
		}
	}
	// A garbage credential on a public path is not needed and not checked.
	if status, _, _ := f.getAs(t, "garbage", "/log/checkpoint"); status != http.StatusOK {
		t.Errorf("checkpoint with a stray credential: %d", status)
	}
}

// queryBody decodes a QueryResponse.
type queryBody struct {
	TotalCount uint64            `json:"totalCount"`
	Receipts   []json.RawMessage `json:"receipts"`
}

// merkleRoot is RFC 6962's MTH over leaf hashes.
func merkleRoot(h [][]byte) []byte {
	if len(h) == 1 {
		return h[0]
	}
	k := 1
	for k*2 < len(h) {
		k *= 2
	}
	return rfc6962.DefaultHasher.HashChildren(merkleRoot(h[:k]), merkleRoot(h[k:]))
}

func decodeHashes(t *testing.T, in []string) [][]byte {
	t.Helper()
	out := make([][]byte, len(in))
	for i, s := range in {
		h, err := schemas.ParseHash(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = h
	}
	return out
}
