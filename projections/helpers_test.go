package projections

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// Keys of the tests: deterministic, so failures reproduce.
func testKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func pubHex(k ed25519.PrivateKey) string {
	return schemas.EncodePublicKey(k.Public().(ed25519.PublicKey))
}

var (
	kernelPriv = testKey(1)
	otherPriv  = testKey(9) // a kernel the projection does not trust
	subjectHex = pubHex(testKey(2))
	issuerHex  = pubHex(testKey(3))
)

func quiet() *slog.Logger {
	if os.Getenv("PROJECTIONS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// lockedBuffer is a log sink safe for the service's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// captured is a debug logger whose output the test prints only if it
// fails, so a failure that happens once in CI explains itself.
func captured(t testing.TB) *slog.Logger {
	if os.Getenv("PROJECTIONS_TEST_LOG") != "" {
		return quiet()
	}
	var buf lockedBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("service log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// harness is a real embedded JetStream with the three streams.
type harness struct {
	t   testing.TB
	ns  *natsembed.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	dir string
	ctx context.Context
	log *slog.Logger // captured, printed if the test fails
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	ns, nc, js := natstest.Start(t)
	h := &harness{t: t, ns: ns, nc: nc, js: js, dir: t.TempDir(), ctx: context.Background(), log: captured(t)}
	for _, cfg := range []jetstream.StreamConfig{schemas.EventsStreamConfig(1), schemas.ReceiptsStreamConfig(1),
		tasksStreamConfig(1, nc.MaxPayload())} {
		if _, err := js.CreateOrUpdateStream(h.ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// running is a Service with Run in the background.
type running struct {
	*Service
	done chan error   // Run's result
	stop func() error // cancels Run, waits for it, closes the store
}

// opToken is the service token of the services start starts, unless
// their options say otherwise: an operator, who reads everything.
const opToken = "op"

func (h *harness) start(dir string, opts ...Option) *running {
	h.t.Helper()
	svc, err := Open(filepath.Join(h.dir, dir), append([]Option{WithLogger(h.log), WithKernelKey(kernelPriv.Public().(ed25519.PublicKey)),
		WithServiceToken(opToken)}, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	r := &running{Service: svc, done: make(chan error, 1)}
	go func() { r.done <- svc.Run(ctx, h.js) }()
	var once sync.Once
	var result error
	r.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case result = <-r.done:
			case <-time.After(20 * time.Second):
				result = errors.New("Run did not return")
			}
			if cerr := svc.Close(); result == nil {
				result = cerr
			}
		})
		return result
	}
	h.t.Cleanup(func() { _ = r.stop() })
	return r
}

// crashed waits for Run to return on its own and closes the store.
func (r *running) crashed(t testing.TB) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for stop
		return errors.Join(err, r.stop())
	case <-time.After(time.Minute):
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		t.Fatalf("Run did not stop within a minute; positions %+v; goroutines:\n%s", r.Positions(), stacks.String())
		return nil
	}
}

func (h *harness) caughtUp(r *running) { h.t.Helper(); h.caughtUpWithin(r, time.Minute) }

func (h *harness) caughtUpWithin(r *running, d time.Duration) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, d)
	defer cancel()
	if err := r.WaitCaughtUp(ctx); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) rebuild(dir string, opts ...Option) *RebuildResult {
	h.t.Helper()
	res, err := Rebuild(h.ctx, h.js, filepath.Join(h.dir, dir), append([]Option{WithLogger(h.log), WithKernelKey(kernelPriv.Public().(ed25519.PublicKey))}, opts...)...)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

func (h *harness) publish(subject string, data []byte, hdr nats.Header) uint64 {
	h.t.Helper()
	msg := &nats.Msg{Subject: subject, Data: data, Header: hdr}
	ack, err := h.js.PublishMsg(h.ctx, msg)
	if err != nil {
		h.t.Fatal(err)
	}
	return ack.Sequence
}

// commit publishes one task commit.
func (h *harness) commit(taskID string, events ...schemas.TaskEvent) uint64 {
	h.t.Helper()
	raw, err := json.Marshal(schemas.TaskCommit{V: schemas.TaskCommitVersion, Events: events})
	if err != nil {
		h.t.Fatal(err)
	}
	return h.publish(schemas.TaskSubject(taskID), raw, nil)
}

// decision publishes a valid decision event carrying lineage.
func (h *harness) decision(receiptID string, lineage ...schemas.CapabilityLineage) uint64 {
	h.t.Helper()
	d := decisionEvent(receiptID, lineage...)
	if err := d.Validate(); err != nil {
		h.t.Fatal(err)
	}
	raw, _ := json.Marshal(d)
	return h.publish(schemas.SubjectDecision, raw, nats.Header{jetstream.MsgIDHeader: {d.EventID}})
}

// envelope publishes events as one envelope, as an edge's writer does
// under load.
func (h *harness) envelope(events ...any) uint64 {
	h.t.Helper()
	var evs []schemas.StreamEvent
	for _, e := range events {
		raw, _ := json.Marshal(e)
		subject := schemas.SubjectDecision
		if _, ok := e.(*schemas.OutcomeEvent); ok {
			subject = schemas.SubjectOutcome
		}
		evs = append(evs, schemas.StreamEvent{Subject: subject, Data: raw})
	}
	body, err := schemas.PackEvents(evs)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.publish(schemas.SubjectEnvelope, body, nats.Header{schemas.HeaderEventKinds: {schemas.EnvelopeKinds(evs)}})
}

func decisionEvent(receiptID string, lineage ...schemas.CapabilityLineage) *schemas.DecisionEvent {
	capID := "cap-none"
	if len(lineage) > 0 {
		capID = lineage[len(lineage)-1].CapabilityID
	}
	return &schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(receiptID),
		ReceiptID: receiptID, Timestamp: 1760000000, CapabilityID: capID, ToolServer: "shop", ToolName: "buy",
		Parameters: json.RawMessage(`{"sku":"a4"}`), Decision: schemas.Decision{Verdict: schemas.VerdictAllow},
		PolicyHash: schemas.SHA256Hex([]byte("policy")), CapabilityLineage: lineage}
}

// chain is a delegation chain of the given capability ids, root first,
// each granting shop/* to the subject.
func chain(ids ...string) []schemas.CapabilityLineage {
	out := make([]schemas.CapabilityLineage, len(ids))
	for i, id := range ids {
		out[i] = schemas.CapabilityLineage{CapabilityID: id, SubjectKey: subjectHex, IssuerKey: issuerHex,
			IssuedAt: 1750000000, ExpiresAt: 1790000000, DelegationDepth: i, ScopeHash: schemas.SHA256Hex([]byte(id)),
			Grants: []schemas.ToolGrant{{ServerID: "shop", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}}}
		if i > 0 {
			out[i].ParentCapabilityID = ids[i-1]
		}
	}
	return out
}

// receiptLeaf signs a receipt as the ledger does and returns the leaf.
// governed adds metadata.governed_transaction and attribution, so the
// authorization-context report projects it.
func receiptLeaf(t testing.TB, key ed25519.PrivateKey, id, capID string, ts uint64, depth int, governed bool) []byte {
	t.Helper()
	body := schemas.ReceiptBody{ID: id, Timestamp: ts, CapabilityID: capID, ToolServer: "shop", ToolName: "buy",
		Action: schemas.ToolCallAction{Parameters: json.RawMessage(`{"sku":"a4"}`)}, Decision: schemas.Decision{Verdict: schemas.VerdictAllow},
		ContentHash: schemas.EmptyContentHash, PolicyHash: schemas.SHA256Hex([]byte("policy")), TrustLevel: schemas.TrustMediated}
	if governed {
		g := &schemas.GovernedIntent{ID: "intent-" + id, ServerID: "shop", ToolName: "buy", Purpose: "restock paper"}
		tx, err := g.Transaction(schemas.EvidenceAsserted)
		if err != nil {
			t.Fatal(err)
		}
		body.Metadata, _ = json.Marshal(map[string]any{
			"governed_transaction": tx,
			"attribution":          schemas.Attribution{SubjectKey: subjectHex, IssuerKey: issuerHex, DelegationDepth: depth, GrantIndex: 0},
		})
	}
	leaf, err := schemas.SignReceiptLeaf(key, body)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// receipt publishes a leaf as the ledger does: Nats-Msg-Id is the receipt
// id, the leaf index in a header.
func (h *harness) receipt(id string, leaf uint64, raw []byte) uint64 {
	h.t.Helper()
	hdr := nats.Header{}
	hdr.Set(jetstream.MsgIDHeader, id)
	hdr.Set(schemas.HeaderLeafIndex, strconv.FormatUint(leaf, 10))
	return h.publish(schemas.ReceiptSubject("shop"), raw, hdr)
}

// republish publishes the same receipt again past the stream's dedup
// window, as a ledger does after a crash (a new message id suffix makes
// the server store it).
func (h *harness) republish(id string, leaf uint64, raw []byte) uint64 {
	h.t.Helper()
	hdr := nats.Header{}
	hdr.Set(jetstream.MsgIDHeader, id+"#again")
	hdr.Set(schemas.HeaderLeafIndex, strconv.FormatUint(leaf, 10))
	return h.publish(schemas.ReceiptSubject("shop"), raw, hdr)
}

// server serves a service's routes.
func server(t testing.TB, svc *Service) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(NewServer(svc))
	t.Cleanup(srv.Close)
	return srv
}

// get fetches a path with an optional bearer token and decodes the JSON.
func get(t testing.TB, base, path, token string) (int, map[string]any, []byte) {
	t.Helper()
	code, _, body, raw := getWith(t, base, path, func(h http.Header, _ string) {
		if token != "" {
			h.Set(echo.HeaderAuthorization, "Bearer "+token)
		}
	})
	return code, body, raw
}

// getWith fetches a path with the headers auth sets, given the request's
// htu (its URL without the query), and decodes the JSON.
func getWith(t testing.TB, base, path string, auth func(h http.Header, htu string)) (int, http.Header, map[string]any, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth(req.Header, dpop.RequestURLOf(req.URL.Scheme, req.URL.Host, req.URL.EscapedPath()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("GET %s: %d %q is not a JSON object: %v", path, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, resp.Header, body, raw
}

func text(parts ...string) json.RawMessage {
	var ps []map[string]string
	for _, p := range parts {
		ps = append(ps, map[string]string{"text": p})
	}
	b, _ := json.Marshal(ps)
	return b
}

func message(id, role string, parts ...string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"messageId":%q,"role":%q,"parts":%s}`, id, role, text(parts...)))
}

func artifact(id string, parts ...string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"artifactId":%q,"name":"result","parts":%s}`, id, text(parts...)))
}

var eventTime = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// at returns the event time n seconds after eventTime.
func at(n int) time.Time { return eventTime.Add(time.Duration(n) * time.Second) }

func created(ctxID string, n int) schemas.TaskEvent {
	return schemas.TaskEvent{Type: schemas.TaskEventCreated, Time: at(n), Owner: &schemas.TaskOwner{Subject: subjectHex},
		ContextID: ctxID, Message: message("m0", "ROLE_USER", "hello"), Request: json.RawMessage(`{"capability":"secret"}`),
		Metadata: json.RawMessage(`{"chio":{"receiptId":null}}`)}
}
