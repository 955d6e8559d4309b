package ledger

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// hop is one call of a delegated chain, as its decision event says.
type hop struct {
	id, request, subject string
	delegators           []string // subjects of the capabilities the caller's was delegated from
	chain                *schemas.CallChain
	verdict              schemas.Verdict
}

func (h hop) decision() []byte {
	c := call{id: h.id, verdict: h.verdict, params: json.RawMessage(`{}`)}
	if c.verdict == "" {
		c.verdict = schemas.VerdictAllow
	}
	d := decisionEvent(c, 100)
	d.RequestID = h.request
	d.GovernedIntent = &schemas.GovernedIntent{ID: "i-" + h.id, ServerID: d.ToolServer, ToolName: d.ToolName, Purpose: "p", CallChain: h.chain}
	for i, s := range append(append([]string(nil), h.delegators...), h.subject) {
		l := schemas.CapabilityLineage{CapabilityID: "cap-" + s, SubjectKey: s, IssuerKey: "issuer", DelegationDepth: i, ScopeHash: "h"}
		if i > 0 {
			l.ParentCapabilityID = d.CapabilityLineage[i-1].CapabilityID
		}
		d.CapabilityLineage = append(d.CapabilityLineage, l)
	}
	return mustJSON(d)
}

func (h hop) outcome() []byte {
	return mustJSON(outcomeEvent(call{id: h.id, outcome: schemas.OutcomeCompleted}, 101))
}

// The ledger calls a chain observed only when the log holds its parent as
// an open call by the delegator, with the named request id, and the
// caller's capability descends from the delegator's; a parent's chain must
// match and be observed itself. The class is the same however the events
// are cut into batches.
func TestCallChainEvidence(t *testing.T) {
	root := hop{id: "r-root", request: "q-root", subject: "A"}
	chainOf := func(parent hop, origin string) *schemas.CallChain {
		return &schemas.CallChain{ChainID: "r-root", ParentRequestID: parent.request, ParentReceiptID: parent.id, OriginSubject: origin, DelegatorSubject: parent.subject}
	}
	second := hop{id: "r-2", request: "q-2", subject: "B", delegators: []string{"A"}, chain: chainOf(root, "A")}
	type ev struct {
		subject string
		data    []byte
	}
	dec := func(h hop) ev { return ev{schemas.SubjectDecision, h.decision()} }
	out := func(h hop) ev { return ev{schemas.SubjectOutcome, h.outcome()} }
	withChain := func(h hop, f func(*schemas.CallChain)) hop {
		c := *h.chain
		f(&c)
		h.chain = &c
		return h
	}
	cases := []struct {
		name   string
		events []ev
		child  string
		want   string
	}{
		{"inside the open parent", []ev{dec(root), dec(second), out(second), out(root)}, "r-2", schemas.EvidenceObserved},
		{"parent already ended", []ev{dec(root), out(root), dec(second), out(second)}, "r-2", schemas.EvidenceAsserted},
		{"parent never seen", []ev{dec(second), out(second)}, "r-2", schemas.EvidenceAsserted},
		{"wrong parent request id", []ev{dec(root), dec(withChain(second, func(c *schemas.CallChain) { c.ParentRequestID = "q-other" })), out(second), out(root)}, "r-2", schemas.EvidenceAsserted},
		{"delegator did not make the parent call", []ev{dec(root), dec(withChain(second, func(c *schemas.CallChain) { c.DelegatorSubject = "Z" })), out(second), out(root)}, "r-2", schemas.EvidenceAsserted},
		{"origin of a root parent is not its caller", []ev{dec(root), dec(withChain(second, func(c *schemas.CallChain) { c.OriginSubject = "Z" })), out(second), out(root)}, "r-2", schemas.EvidenceAsserted},
		{"capability not delegated by the delegator", []ev{dec(root), dec(func() hop { h := second; h.delegators = []string{"X"}; return h }()), out(second), out(root)}, "r-2", schemas.EvidenceAsserted},
		{"denied parent", []ev{dec(func() hop { h := root; h.verdict = schemas.VerdictDeny; return h }()), dec(second), out(second)}, "r-2", schemas.EvidenceAsserted},
		{"third hop inside an observed second", func() []ev {
			third := hop{id: "r-3", request: "q-3", subject: "C", delegators: []string{"A", "B"}, chain: chainOf(second, "A")}
			return []ev{dec(root), dec(second), dec(third), out(third), out(second), out(root)}
		}(), "r-3", schemas.EvidenceObserved},
		{"third hop under an asserted second", func() []ev {
			asserted := withChain(second, func(c *schemas.CallChain) { c.ParentRequestID = "q-other" })
			third := hop{id: "r-3", request: "q-3", subject: "C", delegators: []string{"A", "B"}, chain: chainOf(second, "A")}
			return []ev{dec(root), dec(asserted), dec(third), out(third), out(second), out(root)}
		}(), "r-3", schemas.EvidenceAsserted},
		{"third hop switching chain id", func() []ev {
			third := hop{id: "r-3", request: "q-3", subject: "C", delegators: []string{"A", "B"}, chain: chainOf(second, "A")}
			third.chain.ChainID = "another"
			return []ev{dec(root), dec(second), dec(third), out(third), out(second), out(root)}
		}(), "r-3", schemas.EvidenceAsserted},
	}
	skey, vkey, _ := note.GenerateKey(rand.Reader, testOrigin)
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	keys := Keys{Kernel: kernel, Checkpoint: signer, CheckpointVerifier: verifier}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var events []event
			for i, e := range c.events {
				events = append(events, event{seq: uint64(i + 1), subject: e.subject, data: e.data})
			}
			for _, batch := range []int{len(events), 1} {
				got := chainEvidenceOf(t, keys, events, batch, c.child)
				if got != c.want {
					t.Fatalf("batches of %d: evidence %q, want %q", batch, got, c.want)
				}
			}
		})
	}
}

// chainEvidenceOf folds events in batches of n (dropping the pending cache
// between batches, as a restart would) and returns the evidence class
// signed into receipt id's governed_transaction.
func chainEvidenceOf(t *testing.T, keys Keys, events []event, n int, id string) string {
	t.Helper()
	dir := t.TempDir()
	store, l := offlineLedger(t, dir, keys)
	defer store.Close()
	for i := 0; i < len(events); i += n {
		if _, _, _, err := l.apply(events[i:min(len(events), i+n)], nil); err != nil {
			t.Fatal(err)
		}
		l.pending = newPendingCache()
	}
	class := ""
	err := store.Entries(0, store.State().Size, func(_ uint64, leaf []byte) error {
		r, err := schemas.ParseReceipt(leaf)
		if err != nil || r.ID != id {
			return err
		}
		var m struct {
			GovernedTransaction schemas.GovernedTransaction `json:"governed_transaction"`
		}
		if err := json.Unmarshal(r.Metadata, &m); err != nil {
			return err
		}
		if c := m.GovernedTransaction.CallChain; c != nil {
			class = c.EvidenceClass
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return class
}

// Only an intent the kernel saw makes a governed_transaction: one an edge
// wrote into the decision's or the outcome's metadata is dropped.
func TestGovernedTransactionComesOnlyFromTheIntent(t *testing.T) {
	skey, vkey, _ := note.GenerateKey(rand.Reader, testOrigin)
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	keys := Keys{Kernel: kernel, Checkpoint: signer, CheckpointVerifier: verifier}
	forged := `{"intent_id":"x","intent_hash":"h","purpose":"p","server_id":"fs","tool_name":"read_file","call_chain":{"evidenceClass":"verified","evidenceSources":[],"chainId":"c","parentRequestId":"q","originSubject":"a","delegatorSubject":"a"}}`
	c := call{id: "r-forged", verdict: schemas.VerdictAllow, outcome: schemas.OutcomeCompleted, params: json.RawMessage(`{}`)}
	d := decisionEvent(c, 100)
	d.Metadata = json.RawMessage(`{"k":1,"governed_transaction":` + forged + `}`)
	o := outcomeEvent(c, 101)
	o.Metadata = json.RawMessage(`{"governed\u005ftransaction":` + forged + `}`)
	c2 := call{id: "r-forged-2", verdict: schemas.VerdictAllow, outcome: schemas.OutcomeCompleted, params: json.RawMessage(`{}`)}
	d2 := decisionEvent(c2, 100)
	d2.Metadata = nil
	o2 := outcomeEvent(c2, 101)
	o2.Metadata = json.RawMessage(`{"governed_transaction":` + forged + `}`)
	events := []event{{seq: 1, subject: schemas.SubjectDecision, data: mustJSON(d)}, {seq: 2, subject: schemas.SubjectOutcome, data: mustJSON(o)},
		{seq: 3, subject: schemas.SubjectDecision, data: mustJSON(d2)}, {seq: 4, subject: schemas.SubjectOutcome, data: mustJSON(o2)}}
	store, err := logstore.Open(t.TempDir(), logstore.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	l, err := New(nil, store, keys, WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.apply(events, nil); err != nil {
		t.Fatal(err)
	}
	n := 0
	err = store.Entries(0, store.State().Size, func(_ uint64, leaf []byte) error {
		r, err := schemas.ParseReceipt(leaf)
		if err != nil {
			return err
		}
		n++
		var m map[string]json.RawMessage
		_ = json.Unmarshal(r.Metadata, &m)
		if _, ok := m["governed_transaction"]; ok {
			t.Errorf("receipt %s signed an edge-supplied governed_transaction: %s", r.ID, r.Metadata)
		}
		if r.ID == "r-forged" && string(m["k"]) != "1" {
			t.Errorf("receipt %s lost its other metadata: %s", r.ID, r.Metadata)
		}
		return nil
	})
	if err != nil || n != 2 {
		t.Fatalf("%d receipts, %v", n, err)
	}
}
