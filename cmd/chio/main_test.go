package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	tlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// syncBuffer is an io.Writer safe to read while a command writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// chio runs one command in-process and returns its output and error.
func chio(ctx context.Context, args ...string) (string, error) {
	var out syncBuffer
	root := newRoot()
	root.SetArgs(append([]string{"--log-level", "warn"}, args...))
	root.SetOut(&out)
	root.SetErr(io.Discard)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

type upProcess struct {
	dir, httpURL, natsURL string
	// token is the operator token chio up wrote to dir: the credential of
	// the tests' reads of receipts, tasks, lineage and reports.
	token string
	stop  func() error
	// out is what chio up printed until it was ready.
	out string
}

// nkey is the nkey seed file chio up generated for role.
func (u *upProcess) nkey(role natsauth.Role) string {
	return filepath.Join(natsCredsDir(u.dir), natsauth.SeedFile(role))
}

// certify issues a standalone edge id a key and credential under up's
// issuer key, as chio keygen --edge does, and returns the key's file.
func (u *upProcess) certify(t *testing.T, id string) string {
	t.Helper()
	issuer, err := readIssuerKey(filepath.Join(u.dir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(u.dir, "test-edges", id+".key")
	if _, err := issueEdgeCredential(issuer, id, key, u.credFile(id), time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
	return key
}

// credFile is the credential certify wrote for id.
func (u *upProcess) credFile(id string) string { return filepath.Join(u.dir, "test-edges", id+".cred") }

// upSigner signs as the edge of a chio up whose key directory is keysDir.
func upSigner(t *testing.T, keysDir string) *schemas.EdgeSigner {
	t.Helper()
	s, err := loadEdgeSigner(filepath.Join(keysDir, edgeKeyFile), filepath.Join(keysDir, edgeCredFile))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// dialUp connects to the NATS of the chio up whose data directory is
// dataDir, as role, with the credential it generated; closed at cleanup.
func dialUp(t *testing.T, natsURL, dataDir string, role natsauth.Role) *nats.Conn {
	t.Helper()
	creds, err := natsauth.LoadOrCreate(natsCredsDir(dataDir))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(natsURL, creds.Options(role)...)
	if err != nil {
		t.Fatalf("connect to chio up's NATS as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func startUp(t *testing.T, extra ...string) *upProcess {
	t.Helper()
	dir := t.TempDir()
	httpRE := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
	natsRE := regexp.MustCompile(`NATS JetStream on (nats://[0-9.:]+)`)
	out, stop := startCommand(t, httpRE, append([]string{"up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0"}, extra...)...)
	return &upProcess{dir: dir, httpURL: httpRE.FindStringSubmatch(out)[1], natsURL: natsRE.FindStringSubmatch(out)[1], token: upOperatorToken(t, dir), stop: stop, out: out}
}

// startCommand runs a long-lived chio command in-process until its output
// matches ready, and returns that output and an idempotent stop, also run
// at cleanup.
func startCommand(t *testing.T, ready *regexp.Regexp, args ...string) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		root := newRoot()
		root.SetArgs(append([]string{"--log-level", "warn"}, args...))
		root.SetOut(&out)
		root.SetErr(io.Discard)
		done <- root.ExecuteContext(ctx)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !ready.MatchString(out.String()) {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("chio %s exited: %v\n%s", args[0], err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("chio %s did not start:\n%s", args[0], out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(20 * time.Second):
				stopErr = fmt.Errorf("chio %s did not stop", args[0])
			}
		})
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	return out.String(), stop
}

// httpGet reads url anonymously: the public paths (checkpoint, hash
// tiles, consistency proofs, keys, probes, metrics).
func httpGet(t *testing.T, url string) (int, []byte) {
	t.Helper()
	return httpGetAs(t, "", url)
}

// httpGetAs reads url with token as its credential (Authorization:
// Bearer), or anonymously when token is empty: the private paths
// (receipts, proofs, queries, entry bundles, tasks, lineage, reports).
func httpGetAs(t *testing.T, token, url string) (int, []byte) {
	t.Helper()
	return httpDoAs(t, http.MethodGet, token, url, nil)
}

// httpDoAs is httpGetAs for any method; a body is sent as JSON.
func httpDoAs(t *testing.T, method, token, url string, body io.Reader) (int, []byte) {
	t.Helper()
	resp, b := httpSend(t, method, token, url, body)
	return resp.StatusCode, b
}

// httpSend is httpDoAs answering the whole response (its body read and
// closed).
func httpSend(t *testing.T, method, token, url string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// upOperatorToken is the operator token chio up wrote to dataDir at its
// last start: a capability that reads everything.
func upOperatorToken(t *testing.T, dataDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, operatorTokenFile))
	if err != nil {
		t.Fatalf("chio up wrote no operator token: %v", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		t.Fatalf("empty operator token in %s", dataDir)
	}
	return tok
}

// logSize is the tree size of the checkpoint a log API serves (0 if none).
func logSize(t *testing.T, url string) uint64 {
	t.Helper()
	_, body := httpGet(t, url+"/log/checkpoint")
	var n uint64
	if lines := strings.Split(string(body), "\n"); len(lines) > 1 {
		fmt.Sscan(lines[1], &n)
	}
	return n
}

// publishCall publishes one call's events, signed by s if it is not nil
// (upSigner: as chio up's edge).
func publishCall(t *testing.T, js jetstream.JetStream, s *schemas.EdgeSigner, verdict schemas.Verdict) string {
	t.Helper()
	id, err := emitCall(context.Background(), js, s, "hello", "hello_task", verdict)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestUpVerifyAndRebuild(t *testing.T) {
	up := startUp(t)
	nc := dialUp(t, up.natsURL, up.dir, natsauth.Edge)
	js, _ := jetstream.New(nc)
	var ids []string
	for i := 0; i < 5; i++ {
		s := upSigner(t, filepath.Join(up.dir, "keys"))
		ids = append(ids, publishCall(t, js, s, schemas.VerdictAllow), publishCall(t, js, s, schemas.VerdictDeny))
	}
	last := ids[len(ids)-1]
	deadline := time.Now().Add(20 * time.Second)
	for {
		if status, _ := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+last); status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("receipt never reached the log")
		}
		time.Sleep(20 * time.Millisecond)
	}

	files := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(files, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Receipts and proofs are read under chio up's operator token; no
	// credential, no receipt.
	if status, _ := httpGet(t, up.httpURL+"/v1/receipts/"+ids[0]); status != http.StatusUnauthorized {
		t.Fatalf("anonymous GET /v1/receipts/{id}: %d, want 401", status)
	}
	_, receipt := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+ids[0])
	_, proofJSON := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+ids[0]+"/inclusion-proof")
	_, checkpoint := httpGet(t, up.httpURL+"/log/checkpoint")
	_, keysJSON := httpGet(t, up.httpURL+"/v1/log/keys")
	var keys struct{ Origin, CheckpointVKey, KernelKey string }
	if err := json.Unmarshal(keysJSON, &struct {
		Origin         *string `json:"origin"`
		CheckpointVKey *string `json:"checkpoint_vkey"`
		KernelKey      *string `json:"kernel_key"`
	}{&keys.Origin, &keys.CheckpointVKey, &keys.KernelKey}); err != nil {
		t.Fatal(err)
	}
	rf, pf, cf := write("receipt.json", receipt), write("proof.json", proofJSON), write("checkpoint.txt", checkpoint)
	vkeyFile := write("log.vkey", []byte(keys.CheckpointVKey+"\n"))

	ctx := context.Background()
	out, err := chio(ctx, "verify", "--receipt", rf, "--proof", pf, "--checkpoint", cf, "--vkey", vkeyFile, "--kernel-key", keys.KernelKey)
	if err != nil || !strings.Contains(out, "verify: OK") {
		t.Fatalf("verify of a good receipt: %v\n%s", err, out)
	}

	// Each bad input fails, naming the first failed check, with status 1.
	otherSKey, otherVKey, _ := note.GenerateKey(rand.Reader, keys.Origin)
	foreignSKey, foreignVKey, _ := note.GenerateKey(rand.Reader, "elsewhere.example/log")
	otherSigner, _ := note.NewSigner(otherSKey)
	cp, _, _, err := tlog.ParseCheckpoint(checkpoint, keys.Origin, mustVerifier(t, keys.CheckpointVKey))
	if err != nil {
		t.Fatal(err)
	}
	forged, _ := note.Sign(&note.Note{Text: string(cp.Marshal())}, otherSigner)
	foreignCP := tlog.Checkpoint{Origin: "elsewhere.example/log", Size: cp.Size, Hash: cp.Hash}
	fSigner, _ := note.NewSigner(foreignSKey)
	foreign, _ := note.Sign(&note.Note{Text: string(foreignCP.Marshal())}, fSigner)

	tampered := bytes.Replace(receipt, []byte(`"tool_name":"hello_task"`), []byte(`"tool_name":"rm_rf"`), 1)
	var p map[string]any
	_ = json.Unmarshal(proofJSON, &p)
	path := p["audit_path"].([]any)
	path[0] = "0x" + strings.Repeat("00", 32)
	badProof, _ := json.Marshal(p)
	_, otherProof := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+ids[1]+"/inclusion-proof")

	cases := []struct {
		name                       string
		receipt, proof, checkpoint string
		vkey, kernel               string
		check                      string
	}{
		{"tampered receipt", write("t.json", tampered), pf, cf, vkeyFile, keys.KernelKey, "receipt-signature"},
		{"wrong kernel key", rf, pf, cf, vkeyFile, strings.Repeat("ab", 32), "kernel-key"},
		{"wrong log key", rf, pf, cf, otherVKey, keys.KernelKey, "checkpoint"},
		{"checkpoint signed by another key", rf, pf, write("forged.txt", forged), vkeyFile, keys.KernelKey, "checkpoint"},
		{"checkpoint of another log", rf, pf, write("foreign.txt", foreign), vkeyFile, keys.KernelKey, "checkpoint"},
		{"pinned key of another log", rf, pf, cf, foreignVKey, keys.KernelKey, "checkpoint"},
		{"wrong audit path", rf, write("bad-proof.json", badProof), cf, vkeyFile, keys.KernelKey, "inclusion"},
		{"proof of another receipt", rf, write("other-proof.json", otherProof), cf, vkeyFile, keys.KernelKey, "proof"},
		{"not a receipt", write("junk.json", []byte(`{"hello":1}`)), pf, cf, vkeyFile, keys.KernelKey, "receipt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := chio(ctx, "verify", "--receipt", c.receipt, "--proof", c.proof, "--checkpoint", c.checkpoint, "--vkey", c.vkey, "--kernel-key", c.kernel)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "FAILED "+c.check+":") {
				t.Fatalf("want exit 1 naming %q, got %v", c.check, err)
			}
		})
	}
	if _, err := chio(ctx, "verify", "--receipt", rf); err == nil || err.(*exitError).code != 2 {
		t.Fatalf("missing flags: %v", err)
	}

	// Rebuild from the same stream with the same keys: same size, same root.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/query?limit=1"); st == 200 && strings.Contains(string(body), fmt.Sprintf(`"totalCount":%d`, len(ids))) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the receipt index never counted %d receipts", len(ids))
		}
	}
	_, checkpoint = httpGet(t, up.httpURL+"/log/checkpoint")
	cp, _, _, _ = tlog.ParseCheckpoint(checkpoint, keys.Origin, mustVerifier(t, keys.CheckpointVKey))
	out, err = chio(ctx, "ledger", "rebuild", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Reader), "--edge-issuer", filepath.Join(up.dir, "keys", issuerPubFile), "--data-dir", filepath.Join(t.TempDir(), "rebuilt"), "--keys", filepath.Join(up.dir, "keys"))
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	// The root as the checkpoint's third line has it, and in hex.
	want := fmt.Sprintf("size %d\nroot %s\nroot-hex %s\n", cp.Size, strings.Split(string(checkpoint), "\n")[2], schemas.EncodeHash(cp.Hash))
	if out != want {
		t.Fatalf("rebuild printed %q, want %q", out, want)
	}
	// Operators see the ledger in Prometheus form.
	if status, body := httpGet(t, up.httpURL+"/metrics"); status != 200 ||
		!strings.Contains(string(body), `chio_ledger_receipts_total{verdict="deny"} 5`) ||
		!strings.Contains(string(body), "chio_ledger_integration_seconds_bucket") {
		t.Fatalf("/metrics: %d\n%s", status, body)
	}
	// Offline, the store is refused while chio up holds it, and checked
	// once it stopped: the same size and root as the rebuild's.
	if _, err := chio(ctx, "ledger", "check", "--data-dir", up.dir); err == nil || !strings.Contains(err.Error(), "lock held") || errors.Is(err, logstore.ErrCorrupt) {
		t.Fatalf("ledger check of a running ledger's store: %v", err)
	}
	if err := up.stop(); err != nil {
		t.Fatalf("chio up stopped with %v", err)
	}
	out, err = chio(ctx, "ledger", "check", "--data-dir", up.dir)
	if first, rest, _ := strings.Cut(out, "\n"); err != nil || !strings.HasPrefix(first, fmt.Sprintf("ledger check: OK: size %d, 1 entry bundles and 0 full tiles checked in ", cp.Size)) || rest != strings.TrimPrefix(want, fmt.Sprintf("size %d\n", cp.Size)) {
		t.Fatalf("ledger check: %v\n%s", err, out)
	}
	if _, err := chio(ctx, "ledger", "check", "--data-dir", t.TempDir()); err == nil || err.(*exitError).code != 2 || !strings.Contains(err.Error(), "no log store") {
		t.Fatalf("ledger check of an empty directory: %v", err)
	}
}

func mustVerifier(t *testing.T, vkey string) note.Verifier {
	t.Helper()
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// chio up prints where everything is; a second one on the same data dir is
// refused by the lock, and a restart reuses the keys and continues the log.
func TestUpLockAndRestart(t *testing.T) {
	dir := t.TempDir()
	httpRE := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
	natsRE := regexp.MustCompile(`NATS JetStream on (nats://[0-9.:]+)`)
	start := func() (string, string, string, func() error) {
		out, stop := startCommand(t, regexp.MustCompile(`try: curl`), "up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0")
		return out, httpRE.FindStringSubmatch(out)[1], natsRE.FindStringSubmatch(out)[1], stop
	}
	out, httpURL, natsURL, stop := start()
	for _, want := range []string{"/.well-known/agent-card.json", "/a2a", "/log/checkpoint", "dev capability in " + filepath.Join(dir, "dev-capability.token"),
		"operator token in " + filepath.Join(dir, operatorTokenFile), "try: curl -s "} {
		if !strings.Contains(out, want) {
			t.Errorf("chio up did not print %q:\n%s", want, out)
		}
	}
	_, err := chio(context.Background(), "up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "none")
	if err == nil || !strings.Contains(err.Error(), "another chio process") {
		t.Fatalf("second chio up: %v", err)
	}
	kernelKey, _ := os.ReadFile(filepath.Join(dir, "keys", kernelPubFile))
	call := func(natsURL, httpURL string, wantSize uint64) {
		nc := dialUp(t, natsURL, dir, natsauth.Edge)
		js, _ := jetstream.New(nc)
		publishCall(t, js, upSigner(t, filepath.Join(dir, "keys")), schemas.VerdictDeny)
		deadline := time.Now().Add(20 * time.Second)
		for logSize(t, httpURL) != wantSize {
			if time.Now().After(deadline) {
				t.Fatalf("log size %d, want %d", logSize(t, httpURL), wantSize)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	call(natsURL, httpURL, 1)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	_, httpURL, natsURL, _ = start()
	if again, _ := os.ReadFile(filepath.Join(dir, "keys", kernelPubFile)); len(kernelKey) == 0 || string(again) != string(kernelKey) {
		t.Fatal("a restart generated new keys")
	}
	if got := logSize(t, httpURL); got != 1 {
		t.Fatalf("after a restart the log has size %d, want 1", got)
	}
	call(natsURL, httpURL, 2)
}

func TestKeygen(t *testing.T) {
	dir := t.TempDir()
	if _, err := chio(context.Background(), "keygen", "--out", dir, "--origin", "example.com/log"); err != nil {
		t.Fatal(err)
	}
	k, err := loadLedgerKeys(dir, "example.com/log")
	if err != nil || k.Origin() != "example.com/log" {
		t.Fatalf("%v %v", k, err)
	}
	if _, err := loadLedgerKeys(dir, "other.example/log"); err == nil || !strings.Contains(err.Error(), "origin") {
		t.Fatalf("keys for another origin were accepted: %v", err)
	}
	if _, err := chio(context.Background(), "keygen", "--out", dir); err == nil {
		t.Fatal("keygen overwrote existing keys")
	}
	before, _ := os.ReadFile(filepath.Join(dir, kernelKeyFile))
	if out, err := chio(context.Background(), "keygen", "--out", dir, "--keep"); err != nil || !strings.Contains(out, "kept") {
		t.Fatalf("keygen --keep on existing keys: %q %v", out, err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, kernelKeyFile)); len(before) == 0 || string(before) != string(after) {
		t.Fatal("keygen --keep replaced the keys")
	}
	if _, err := chio(context.Background(), "keygen", "--out", t.TempDir(), "--origin", "bad origin"); err == nil {
		t.Fatal("keygen accepted an origin with a space")
	}
}

// TestKeygenHTTPSCert: keygen --https-host issues, from the internal CA
// it made for NATS, a certificate an HTTPS server serves and a client
// trusting only that CA accepts (the compose proxy's), kept on a rerun.
func TestKeygenHTTPSCert(t *testing.T) {
	dir := t.TempDir()
	if _, err := chio(context.Background(), "keygen", "--out", t.TempDir(), "--https-host", "127.0.0.1"); err == nil ||
		!strings.Contains(err.Error(), "--https-host needs --nats-tls-host") {
		t.Fatalf("--https-host without the CA: %v", err)
	}
	args := []string{"keygen", "--out", dir, "--keep", "--nats-roles", "--nats-tls-host", "nats-1", "--https-host", "127.0.0.1", "--https-host", "localhost"}
	if _, err := chio(context.Background(), args...); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "tls", natsauth.HTTPSCertFile), filepath.Join(dir, "tls", natsauth.HTTPSKeyFile)
	before, _ := os.ReadFile(certFile)
	if _, err := chio(context.Background(), args...); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(certFile); string(after) != string(before) {
		t.Fatal("a rerun replaced the HTTPS certificate")
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file: %v %v, want mode 0600", fi.Mode(), err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()
	caPEM, err := os.ReadFile(filepath.Join(dir, "nats", natsauth.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := trusting.Get(srv.URL)
	if err != nil {
		t.Fatalf("a client trusting the internal CA: %v", err)
	}
	resp.Body.Close()
	if _, err := (&http.Client{Transport: &http.Transport{}}).Get(srv.URL); err == nil {
		t.Fatal("a client trusting only the system roots accepted the internal CA's certificate")
	}
}

func TestOriginOfANewDataDir(t *testing.T) {
	dir := t.TempDir()
	keys, store, err := openDataDir(dir, &ledgerFlags{origin: "custom.example/receipts"})
	if err != nil {
		t.Fatal(err)
	}
	_ = store.Close()
	if keys.Origin() != "custom.example/receipts" {
		t.Fatalf("origin %q", keys.Origin())
	}
	if _, _, err := openDataDir(dir, &ledgerFlags{origin: DefaultOrigin}); err == nil {
		t.Fatal("a data dir whose keys sign for another origin was opened")
	}
}
