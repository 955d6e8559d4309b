package witness

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// These tests check the HTTP shape of add-checkpoint against httptest
// servers; litewitness_test.go runs the same client against a real witness.

type clientFixture struct {
	checkpoint  []byte // signed by the log
	text        string
	logVerifier note.Verifier
	witness     *testCosigner
	vkey        string
}

func newClientFixture(t *testing.T) clientFixture {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, "example.com/log")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	text := testCheckpointText("example.com/log", 7)
	signed, err := note.Sign(&note.Note{Text: text}, signer)
	if err != nil {
		t.Fatal(err)
	}
	w, wkey := newTestCosigner(t, "witness.example/w1", 1, uint64(time.Now().Unix()))
	return clientFixture{checkpoint: signed, text: text, logVerifier: verifier, witness: w, vkey: wkey}
}

// cosignLines is what a witness answers: signature lines on the text.
func (f clientFixture) cosignLines(t *testing.T, signers ...note.Signer) string {
	t.Helper()
	signed, err := note.Sign(&note.Note{Text: f.text}, signers...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(string(signed), f.text+"\n")
}

func (f clientFixture) client(t *testing.T, url string) *Client {
	t.Helper()
	w, err := NewWitness("w1", f.vkey, url)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(w)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAddCheckpointRequest(t *testing.T) {
	f := newClientFixture(t)
	proof := [][]byte{bytesOf(1, 32), bytesOf(2, 32)}
	want := "old 3\n" + base64.StdEncoding.EncodeToString(proof[0]) + "\n" +
		base64.StdEncoding.EncodeToString(proof[1]) + "\n\n" + string(f.checkpoint)
	stranger, _ := newTestCosigner(t, "witness.example/other", 7, 1)
	answer := f.cosignLines(t, stranger, f.witness)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.Path != "/prefix/add-checkpoint" || string(body) != want {
			t.Errorf("got %s %s with body\n%s\nwant POST /prefix/add-checkpoint with\n%s", r.Method, r.URL.Path, body, want)
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		io.WriteString(w, answer)
	}))
	defer srv.Close()

	// A trailing slash on the prefix must not double the separator.
	c := f.client(t, srv.URL+"/prefix/")
	cosigs, err := c.AddCheckpoint(t.Context(), 3, proof, f.checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	// Only the witness's own line comes back, ready to append.
	if own := f.cosignLines(t, f.witness); string(cosigs) != own {
		t.Fatalf("cosignatures\n%s\nwant\n%s", cosigs, own)
	}
	p, err := ParsePolicy(strings.NewReader("witness w1 " + f.vkey + " " + srv.URL + "\nquorum w1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, names, err := VerifyCheckpoint(append(f.checkpoint, cosigs...), f.logVerifier, p); err != nil || len(names) != 1 {
		t.Fatalf("verify cosigned checkpoint: %v %v", names, err)
	}
}

func TestAddCheckpointAnswers(t *testing.T) {
	f := newClientFixture(t)
	other, _ := newTestCosigner(t, "witness.example/other", 7, 1)
	impostor, _ := newTestCosigner(t, "witness.example/w1", 8, 1) // w1's name, not its key
	badOwn := flipLastSignature([]byte(f.cosignLines(t, f.witness)))

	for _, tc := range []struct {
		name        string
		status      int
		contentType string
		body        string
		conflict    string // want *SizeConflict with this size when set
		httpStatus  int    // want *HTTPError with this status when nonzero
		err         string // want an error containing this
	}{
		{name: "409 size", status: 409, contentType: "text/x.tlog.size", body: "5\n", conflict: "5"},
		{name: "409 size with parameters", status: 409, contentType: "text/x.tlog.size; charset=utf-8", body: "12345678901\n", conflict: "12345678901"},
		{name: "409 size zero", status: 409, contentType: "text/x.tlog.size", body: "0\n", conflict: "0", err: "size conflict: the witness's latest cosigned size is 0"},
		{name: "409 without the size type", status: 409, contentType: "text/plain", body: "5\n", httpStatus: 409},
		{name: "409 size without newline", status: 409, contentType: "text/x.tlog.size", body: "5", err: "409 with malformed text/x.tlog.size body"},
		{name: "409 size leading zero", status: 409, contentType: "text/x.tlog.size", body: "05\n", err: "malformed"},
		{name: "409 size negative", status: 409, contentType: "text/x.tlog.size", body: "-1\n", err: "malformed"},
		{name: "404 unknown log", status: 404, body: "unknown log\n", httpStatus: 404, err: "404 Not Found: unknown log"},
		{name: "403 untrusted", status: 403, body: "invalid signature\n", httpStatus: 403, err: "403 Forbidden: invalid signature"},
		{name: "422 bad proof", status: 422, body: "bad consistency proof\n", httpStatus: 422, err: "422 Unprocessable Entity: bad consistency proof"},
		{name: "500 long body", status: 500, body: strings.Repeat("x", 100<<10), httpStatus: 500},
		{name: "503 control characters", status: 503, body: "down\x00\x1b[31m\nfor now\r\n", httpStatus: 503, err: "503 Service Unavailable: down  [31m for now"},
		{name: "200 empty", status: 200, err: "empty 200 response"},
		{name: "200 not signature lines", status: 200, body: "hello\n", err: "malformed response"},
		{name: "200 no final newline", status: 200, body: strings.TrimSuffix(f.cosignLines(t, f.witness), "\n"), err: "malformed response"},
		{name: "200 only other keys", status: 200, body: f.cosignLines(t, other, impostor), err: "no cosignature from key witness.example/w1"},
		{name: "200 invalid own cosignature", status: 200, body: string(badOwn), err: "cosignature from key witness.example/w1 does not verify"},
		{name: "200 over 64 KiB", status: 200, body: f.cosignLines(t, f.witness) + strings.Repeat("— x AAAAAAAA\n", 6000), err: "response over 65536 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			cosigs, err := f.client(t, srv.URL).AddCheckpoint(t.Context(), 0, nil, f.checkpoint)
			if err == nil {
				t.Fatalf("got cosignatures %q, want an error", cosigs)
			}
			if !strings.Contains(err.Error(), "add-checkpoint to witness w1: ") {
				t.Errorf("error %q does not name the operation and witness", err)
			}
			var conflict *SizeConflict
			if got := errors.As(err, &conflict); got != (tc.conflict != "") || got && fmt.Sprint(conflict.WitnessSize) != tc.conflict {
				t.Errorf("error %v: SizeConflict %v %+v, want size %q", err, got, conflict, tc.conflict)
			}
			var he *HTTPError
			if got := errors.As(err, &he); got != (tc.httpStatus != 0) || got && he.StatusCode != tc.httpStatus {
				t.Errorf("error %v: HTTPError %v %+v, want status %d", err, got, he, tc.httpStatus)
			}
			if he != nil && len(he.Snippet) > maxSnippet {
				t.Errorf("snippet of %d bytes", len(he.Snippet))
			}
			if !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %q, want it to contain %q", err, tc.err)
			}
		})
	}
}

func TestAddCheckpointRefusesBadInput(t *testing.T) {
	f := newClientFixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("a request was sent")
	}))
	defer srv.Close()
	c := f.client(t, srv.URL)
	hash := bytesOf(1, 32)
	many := make([][]byte, 64)
	for i := range many {
		many[i] = hash
	}
	for _, tc := range []struct {
		name       string
		old        uint64
		proof      [][]byte
		checkpoint []byte
		want       string
	}{
		{"old past size", 8, [][]byte{hash}, f.checkpoint, "old size 8 is past the checkpoint's size 7"},
		{"proof from zero", 0, [][]byte{hash}, f.checkpoint, "old size 0 takes no proof"},
		{"64 proof hashes", 1, many, f.checkpoint, "64 proof hashes, the protocol allows 63"},
		{"short hash", 3, [][]byte{hash, hash[:31]}, f.checkpoint, "proof hash 1 is 31 bytes"},
		{"unsigned checkpoint", 0, nil, []byte(f.text), "checkpoint: malformed note"},
		{"not a checkpoint", 0, nil, []byte("hello\n\n— x AAAA\n"), "malformed checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.AddCheckpoint(t.Context(), tc.old, tc.proof, tc.checkpoint); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestAddCheckpointHonorsContext(t *testing.T) {
	f := newClientFixture(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.client(t, srv.URL).AddCheckpoint(ctx, 0, nil, f.checkpoint)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("returned after %v", d)
	}
}

func TestNewClientNeedsAKey(t *testing.T) {
	if _, err := NewClient(Witness{Name: "w1", URL: "https://w.example"}); err == nil {
		t.Fatal("a witness without a key made a client")
	}
}

// A witness that answers with a redirect does not send the checkpoint
// anywhere else, with the default client or the caller's own.
func TestAddCheckpointFollowsNoRedirect(t *testing.T) {
	f := newClientFixture(t)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the redirect was followed: %s %s", r.Method, r.URL)
	}))
	defer elsewhere.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/latest/meta-data?x=1", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	w, err := NewWitness("w1", f.vkey, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range [][]Option{nil, {WithHTTPClient(&http.Client{})}} {
		c, err := NewClient(w, opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.AddCheckpoint(t.Context(), 0, nil, f.checkpoint)
		var herr *HTTPError
		if !errors.As(err, &herr) || herr.StatusCode != http.StatusTemporaryRedirect {
			t.Fatalf("err = %v, want the 307 as an HTTPError", err)
		}
	}
}
