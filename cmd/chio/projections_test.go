package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/projections"
	"github.com/chio-ledger/chio/schemas"
)

// publishGoverned publishes what an edge and the ledger would for one
// governed call of capability capID (delegated once from "root"): the
// decision event with its lineage and the signed receipt at leaf.
func publishGoverned(t *testing.T, js jetstream.JetStream, kernel ed25519.PrivateKey, id, capID string, leaf uint64) {
	t.Helper()
	ctx := context.Background()
	subject := schemas.EncodePublicKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32)).Public().(ed25519.PublicKey))
	issuer := schemas.EncodePublicKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32)).Public().(ed25519.PublicKey))
	grants := []schemas.ToolGrant{{ServerID: "shop", ToolName: "buy", Operations: []schemas.Operation{schemas.OpInvoke}}}
	lineage := []schemas.CapabilityLineage{
		{CapabilityID: "root", SubjectKey: subject, IssuerKey: issuer, IssuedAt: 1, ExpiresAt: 2, ScopeHash: schemas.SHA256Hex([]byte("r")), Grants: grants},
		{CapabilityID: capID, SubjectKey: subject, IssuerKey: issuer, IssuedAt: 1, ExpiresAt: 2, DelegationDepth: 1,
			ParentCapabilityID: "root", ScopeHash: schemas.SHA256Hex([]byte(capID)), Grants: grants},
	}
	d := schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(id), ReceiptID: id,
		Timestamp: 1760000000, CapabilityID: capID, ToolServer: "shop", ToolName: "buy", Parameters: json.RawMessage(`{}`),
		Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, PolicyHash: schemas.SHA256Hex([]byte("p")), CapabilityLineage: lineage}
	if err := publishEvent(ctx, js, nil, schemas.SubjectDecision, d.EventID, &d); err != nil {
		t.Fatal(err)
	}
	tx, err := (&schemas.GovernedIntent{ID: "i-" + id, ServerID: "shop", ToolName: "buy", Purpose: "restock"}).Transaction(schemas.EvidenceAsserted)
	if err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(map[string]any{"governed_transaction": tx,
		"attribution": schemas.Attribution{SubjectKey: subject, IssuerKey: issuer, DelegationDepth: 1}})
	raw, err := schemas.SignReceiptLeaf(kernel, schemas.ReceiptBody{ID: id, Timestamp: 1760000000 + leaf, CapabilityID: capID,
		ToolServer: "shop", ToolName: "buy", Action: schemas.ToolCallAction{Parameters: json.RawMessage(`{}`)},
		Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, ContentHash: schemas.EmptyContentHash,
		PolicyHash: schemas.SHA256Hex([]byte("p")), Metadata: meta, TrustLevel: schemas.TrustMediated})
	if err != nil {
		t.Fatal(err)
	}
	msg := &nats.Msg{Subject: schemas.ReceiptSubject("shop"), Data: raw, Header: nats.Header{}}
	msg.Header.Set(schemas.HeaderLeafIndex, strconv.FormatUint(leaf, 10))
	if _, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
}

func TestProjectionsServeRebuildAndTrustList(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, js, err := connectNATS(ns.ClientURL(), "test", natsauth.Operator, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	for _, cfg := range []jetstream.StreamConfig{schemas.EventsStreamConfig(1), schemas.ReceiptsStreamConfig(1)} {
		if _, err := js.CreateOrUpdateStream(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	kernel := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	keyFile := filepath.Join(t.TempDir(), "kernel.pub")
	if err := os.WriteFile(keyFile, []byte(schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey))+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		capID := "cap-a"
		if i%2 == 1 {
			capID = "cap-b"
		}
		publishGoverned(t, js, kernel, "rcpt-"+strconv.Itoa(i), capID, uint64(i))
	}

	dataDir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		root := newRoot()
		root.SetArgs([]string{"--log-level", "warn", "projections", "--nats", ns.ClientURL(), "--data-dir", dataDir,
			"--listen", "127.0.0.1:0", "--service-token", "tok", "--kernel-key", keyFile})
		root.SetOut(&out)
		root.SetErr(io.Discard)
		done <- root.ExecuteContext(ctx)
	}()
	apiRE := regexp.MustCompile(`API on (http://[0-9.:]+)`)
	deadline := time.Now().Add(20 * time.Second)
	for !apiRE.MatchString(out.String()) {
		select {
		case err := <-done:
			t.Fatalf("chio projections exited: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("chio projections did not start:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	base := apiRE.FindStringSubmatch(out.String())[1]

	// The report for cap-a: its two receipts, once the service caught up.
	var report struct {
		Schema   string `json:"schema"`
		Receipts []struct {
			ReceiptID string `json:"receiptId"`
		} `json:"receipts"`
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		got, err := chio(ctx, "trust", "authorization-context", "list", "--url", base, "--service-token", "tok", "--capability", "cap-a", "--limit", "5")
		if err != nil && strings.Contains(err.Error(), "no capability lineage record") && time.Now().Before(deadline) {
			// The receipts consumer folded the receipt before the events
			// consumer folded the decision that carries its lineage: the
			// two run independently, so the report waits for both.
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(got), &report); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, got)
		}
		if !strings.Contains(got, "\n  \"profile\"") {
			t.Fatalf("not indented:\n%s", got)
		}
		if len(report.Receipts) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if report.Schema != schemas.AuthorizationContextReportSchema || len(report.Receipts) != 2 ||
		report.Receipts[0].ReceiptID != "rcpt-0" || report.Receipts[1].ReceiptID != "rcpt-2" {
		t.Fatalf("report %+v", report)
	}
	// --token takes the service token too, inline or from a file.
	tokenFile := filepath.Join(t.TempDir(), "service.token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cred := range [][]string{{"--token", "tok"}, {"--token", "@" + tokenFile}} {
		got, err := chio(ctx, append([]string{"trust", "authorization-context", "list", "--url", base, "--capability", "cap-a", "--limit", "5"}, cred...)...)
		if err != nil || !strings.Contains(got, `"receiptId": "rcpt-2"`) {
			t.Fatalf("trust list %v: %v\n%s", cred, err, got)
		}
	}
	// Errors from the service exit non-zero with its message: no
	// credential, a wrong one (this service trusts no capability issuer,
	// so only its service token reads), a bad limit.
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--url", base}, "the projection API needs a credential"},
		{[]string{"--url", base, "--service-token", "wrong"}, "accepts only its service token"},
		{[]string{"--url", base, "--token", "wrong"}, "accepts only its service token"},
		{[]string{"--url", base, "--service-token", "tok", "--limit", "500"}, "authorizationLimit"},
	} {
		_, err := chio(ctx, append([]string{"trust", "authorization-context", "list"}, c.args...)...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%v: %v, want exit 1 with %q", c.args, err, c.msg)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("chio projections: %v", err)
	}
	live, err := projections.Open(projectionsDir(dataDir), projections.WithKernelKey(kernel.Public().(ed25519.PublicKey)))
	if err != nil {
		t.Fatal(err)
	}
	liveDigest, err := live.Digest()
	_ = live.Close()
	if err != nil {
		t.Fatal(err)
	}

	rebuilt := t.TempDir()
	got, err := chio(context.Background(), "projections", "rebuild", "--nats", ns.ClientURL(), "--data-dir", rebuilt, "--kernel-key", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "digest "+liveDigest+"\n") || !strings.Contains(got, "receipts 4\n") {
		t.Fatalf("rebuild printed\n%s\nwant digest %s", got, liveDigest)
	}
	if _, err := chio(context.Background(), "projections", "rebuild", "--nats", ns.ClientURL(), "--data-dir", rebuilt, "--kernel-key", keyFile); err == nil || !strings.Contains(err.Error(), "holds a finished rebuild") {
		t.Fatalf("a second rebuild into the same directory: %v", err)
	}
}

func TestProjectionsUsageErrors(t *testing.T) {
	t.Setenv(serviceTokenEnv, "")
	key := schemas.EncodePublicKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32)).Public().(ed25519.PublicKey))
	for _, args := range [][]string{
		{"projections", "--kernel-key", key},                                               // no reader: no --service-token or --reader-issuer
		{"projections", "--service-token", "t"},                                            // no kernel key
		{"projections", "--service-token", "t", "--kernel-key", "/nonexistent/kernel.pub"}, // unreadable key
		{"projections", "rebuild", "--kernel-key", key},                                    // no data dir
		{"trust", "authorization-context", "list", "--url", "ftp://x"},
		{"trust", "authorization-context", "list", "--limit", "-1"},
	} {
		_, err := chio(context.Background(), args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("%v: %v, want a usage error (exit 2)", args, err)
		}
	}
	// There is no open mode: without a reader the service does not start,
	// and says what to pass.
	if _, err := chio(context.Background(), "projections", "--kernel-key", key); !errors.Is(err, errNoReaders) ||
		!strings.Contains(err.Error(), "--reader-issuer") || !strings.Contains(err.Error(), "--service-token") {
		t.Errorf("projections without a reader: %v, want %q", err, errNoReaders)
	}
}
