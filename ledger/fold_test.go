package ledger

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// jsonObjectOfSize returns a JSON object {key: s} whose canonical form has
// exactly n bytes.
func jsonObjectOfSize(t *testing.T, key string, n int) json.RawMessage {
	t.Helper()
	overhead := len(`{"` + key + `":""}`)
	raw := json.RawMessage(fmt.Sprintf(`{%q:%q}`, key, strings.Repeat("x", n-overhead)))
	c, err := schemas.CanonicalizeJSON(raw)
	if err != nil || len(c) != n {
		t.Fatalf("canonical size %d, %v", len(c), err)
	}
	return raw
}

// The largest events that validate still fold into a receipt that fits in
// a C2SP entry bundle (65,535 bytes): validation is the only gate, so an
// accepted event can never stop the ledger.
func TestLargestEventsFitInALeaf(t *testing.T) {
	id := strings.Repeat("r", schemas.MaxIDLength)
	name := strings.Repeat("n", 256)
	// The largest intent: a call chain of the longest names, and a
	// context filling it to MaxIntentBytes. Metadata gets what it leaves.
	intent := &schemas.GovernedIntent{ID: name, ServerID: name, ToolName: name, Purpose: strings.Repeat("p", 1024),
		CallChain: &schemas.CallChain{ChainID: name, ParentRequestID: name, ParentReceiptID: id, OriginSubject: name, DelegatorSubject: name}}
	c, _ := schemas.Canonical(intent)
	intent.Context = jsonObjectOfSize(t, "c", schemas.MaxIntentBytes-len(c)-len(`,"context":`))
	if c, _ = schemas.Canonical(intent); len(c) != schemas.MaxIntentBytes {
		t.Fatalf("intent of %d bytes", len(c))
	}
	d := schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(id), ReceiptID: id, Timestamp: 1,
		CapabilityID: name, ToolServer: name, ToolName: name, GovernedIntent: intent,
		Parameters: jsonObjectOfSize(t, "p", schemas.MaxParametersBytes), Metadata: jsonObjectOfSize(t, "m", schemas.MaxMetadataBytes-len(c)),
		Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, PolicyHash: strings.Repeat("h", 64), TenantID: strings.Repeat("\u0001", 100)}
	// Grow the evidence until the decision's text bound is reached.
	for i := 0; i < schemas.MaxEvidence; i++ {
		d.Evidence = append(d.Evidence, schemas.GuardEvidence{GuardName: "g", Verdict: true})
		if d.Validate() != nil {
			d.Evidence = d.Evidence[:i]
			break
		}
		for len(d.Evidence[i].Details) < schemas.MaxTextBytes {
			d.Evidence[i].Details += "\u0002\u0002\u0002\u0002"
			if d.Validate() != nil {
				d.Evidence[i].Details = d.Evidence[i].Details[:len(d.Evidence[i].Details)-4]
				break
			}
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	o := schemas.OutcomeEvent{Schema: schemas.OutcomeEventSchema, EventID: schemas.OutcomeEventID(id), ReceiptID: id, Timestamp: 1 << 40,
		Outcome: schemas.OutcomeFailed, ContentHash: schemas.EmptyContentHash, Reason: strings.Repeat("\u0003", schemas.MaxTextBytes),
		Metadata: jsonObjectOfSize(t, "n", schemas.MaxMetadataBytes)}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	for _, b := range []*schemas.ReceiptBody{bodyFromOutcome(&d, schemas.EvidenceObserved, &o), bodyFromDecision(&d, schemas.EvidenceAsserted, schemas.Decision{Verdict: schemas.VerdictDeny,
		Reason: strings.Repeat("\u0004", schemas.MaxTextBytes), Guard: strings.Repeat("\u0005", schemas.MaxTextBytes)}, 1, schemas.EmptyContentHash)} {
		leaf, err := schemas.SignReceiptLeaf(key, *b)
		if err != nil {
			t.Fatal(err)
		}
		if len(leaf) > schemas.MaxEncodedReceipt {
			t.Fatalf("leaf of %d bytes exceeds %d", len(leaf), schemas.MaxEncodedReceipt)
		}
		t.Logf("largest leaf: %d bytes", len(leaf))
	}
}

// Events the JCS library cannot canonicalize are rejected by validation,
// so the fold skips them instead of failing to sign.
func TestUncanonicalizableEventsAreMalformed(t *testing.T) {
	for _, params := range []string{`{"a":1,"a":2}`, `{"a":1e400}`, `{"a":"\ud800"}`} {
		d := decisionEvent(newCall(schemas.VerdictDeny, ""), 1)
		d.Parameters = json.RawMessage(params)
		if err := d.Validate(); err == nil {
			t.Errorf("parameters %s validate", params)
		}
		d.Parameters, d.Metadata = json.RawMessage(`{}`), json.RawMessage(params)
		if err := d.Validate(); err == nil {
			t.Errorf("metadata %s validates", params)
		}
	}
}

// The fold is a function of the event sequence alone: folding a random mix
// of decisions, outcomes, stray and duplicate timeouts in one batch, or cut
// into random batches with the pending cache dropped at random (a restart),
// gives the same log. This is what makes Rebuild reproduce the live log.
func TestFoldIsIndependentOfBatching(t *testing.T) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, testOrigin)
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	keys := Keys{Kernel: kernel, Checkpoint: signer, CheckpointVerifier: verifier}
	iterations := 300
	if testing.Short() {
		iterations = 100
	}
	for iter := range iterations {
		r := mrand.New(mrand.NewPCG(uint64(iter), 2026))
		events := randomEvents(r, 2+r.IntN(12))
		whole := foldInto(t, keys, events, func() int { return len(events) }, nil)
		cut := foldInto(t, keys, events, func() int { return 1 + r.IntN(3) }, r)
		if whole.Size != cut.Size || !bytes.Equal(whole.Root, cut.Root) {
			t.Fatalf("iteration %d: one batch gives %d receipts, cut batches %d", iter, whole.Size, cut.Size)
		}
	}
}

// randomEvents draws events over two receipt ids: allow and deny
// decisions, completed outcomes and timeouts, each possibly repeated.
func randomEvents(r *mrand.Rand, n int) []event {
	var events []event
	for i := range n {
		id := []string{"0190f3c2-aaaa", "0190f3c2-bbbb"}[r.IntN(2)]
		c := call{id: id, params: json.RawMessage(`{}`), verdict: schemas.VerdictAllow, outcome: schemas.OutcomeCompleted}
		var subject string
		var v any
		switch r.IntN(4) {
		case 0:
			subject, v = schemas.SubjectDecision, decisionEvent(c, 100)
		case 1:
			c.verdict = schemas.VerdictDeny
			subject, v = schemas.SubjectDecision, decisionEvent(c, 100)
		case 2:
			subject, v = schemas.SubjectOutcome, outcomeEvent(c, 101)
		default:
			subject, v = schemas.SubjectTimeout, schemas.TimeoutEvent{Schema: schemas.TimeoutEventSchema,
				EventID: schemas.TimeoutEventID(id), ReceiptID: id, Timestamp: 700, Reason: "no outcome"}
		}
		events = append(events, event{seq: uint64(i + 1), subject: subject, data: mustJSON(v)})
	}
	return events
}

// foldInto folds events into a fresh log in batches of next() events,
// dropping the pending cache after a batch when r says so.
func foldInto(t *testing.T, keys Keys, events []event, next func() int, r *mrand.Rand) logstore.State {
	t.Helper()
	dir, err := os.MkdirTemp("", "fold-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir) // each store preallocates its WAL: do not keep hundreds
	store, l := offlineLedger(t, dir, keys)
	defer store.Close()
	for i := 0; i < len(events); {
		j := min(len(events), i+next())
		if _, _, _, err := l.apply(events[i:j], nil); err != nil {
			t.Fatal(err)
		}
		if r != nil && r.IntN(2) == 0 {
			l.pending = newPendingCache()
		}
		i = j
	}
	return store.State()
}

// Whatever decision event validates can be signed into a leaf that fits a
// bundle: validation is the only gate between the stream and the log.
func FuzzValidatedDecisionSigns(f *testing.F) {
	for _, v := range []schemas.Verdict{schemas.VerdictAllow, schemas.VerdictDeny} {
		f.Add(mustJSON(decisionEvent(call{id: "r-1", verdict: v, params: json.RawMessage(`{"a":[1,2.5,"x"]}`)}, 1)))
	}
	f.Add([]byte(`{"schema":"chio.event.decision.v1","event_id":"a.decision","receipt_id":"a","timestamp":1,"capability_id":"c","tool_server":"s","tool_name":"t","parameters":{"\u2028":"\ud83d\ude00"},"decision":{"verdict":"allow"},"policy_hash":"p","metadata":{"k":1e20}}`))
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var d schemas.DecisionEvent
		if json.Unmarshal(raw, &d) != nil || d.Validate() != nil {
			return
		}
		leaf, err := schemas.SignReceiptLeaf(key, *bodyFromDecision(&d, schemas.EvidenceObserved, d.Decision, d.Timestamp, schemas.EmptyContentHash))
		if err != nil {
			t.Fatalf("a validated decision does not sign: %v", err)
		}
		if len(leaf) > schemas.MaxEncodedReceipt {
			t.Fatalf("leaf of %d bytes", len(leaf))
		}
		r, err := schemas.ParseReceipt(leaf)
		if err != nil || r.Verify() != nil {
			t.Fatalf("leaf does not parse and verify: %v", err)
		}
	})
}
