package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// TestVerifyHostileReceipt: a receipt of arguments nested 9,999 deep,
// signed and logged next to ordinary ones, is served by the ledger as
// unreadable with its bytes, and chio verify checks that body against the
// served proof: genuine and in the log, and said to be unreadable. With
// its signature tampered it names the failed check (exit 1).
func TestVerifyHostileReceipt(t *testing.T) {
	const origin = "verify-hostile.test/log"
	skey, vkey, _ := note.GenerateKey(rand.Reader, origin)
	signer, _ := note.NewSigner(skey)
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	kernelPub := schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey))
	store, err := logstore.Open(t.TempDir(), logstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sign := func(_, to uint64, root []byte, _ uint64) ([]byte, []byte, error) {
		signed, err := note.Sign(&note.Note{Text: string((&tlog.Checkpoint{Origin: origin, Size: to, Hash: root}).Marshal())}, signer)
		return signed, nil, err
	}
	if err := store.Begin().Commit(sign); err != nil {
		t.Fatal(err)
	}
	leaves := map[string][]byte{}
	tx := store.Begin()
	for _, id := range []string{"r-before", "r-deep", "r-deep-tampered", "r-after"} {
		params := json.RawMessage(`{"q":1}`)
		if strings.HasPrefix(id, "r-deep") {
			params = json.RawMessage(`{"x":` + hostilejson.Nested(9998) + `}`)
		}
		leaf, err := schemas.SignReceiptLeaf(kernel, schemas.ReceiptBody{ID: id, Timestamp: 1, CapabilityID: "garbage",
			ToolServer: "openai", ToolName: "tool", Action: schemas.ToolCallAction{Parameters: params},
			Decision:    schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "invalid capability token", Guard: "capability"},
			ContentHash: schemas.EmptyContentHash, PolicyHash: "p", TrustLevel: schemas.TrustMediated})
		if err != nil {
			t.Fatal(err)
		}
		if id == "r-deep-tampered" {
			i := bytes.Index(leaf, []byte(`"signature":"`)) + len(`"signature":"`)
			if leaf[i] == '0' { // one hex digit for another
				leaf[i] = '1'
			} else {
				leaf[i] = '0'
			}
		}
		leaves[id] = leaf
		if _, err := tx.Append(leaf, logstore.Summary{ReceiptID: id, Timestamp: 1, CapabilityID: "garbage", ToolServer: "openai",
			ToolName: "tool", Verdict: "deny"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(sign); err != nil {
		t.Fatal(err)
	}
	h := api.New(store, api.Keys{Origin: origin, CheckpointVKey: vkey, KernelKey: kernelPub}, slog.New(slog.DiscardHandler),
		api.WithAuthenticator(readauth.New(readauth.WithServiceToken("op"))))
	srv := httptest.NewServer(api.NewServer(h))
	t.Cleanup(srv.Close)
	fetch := func(path string) []byte {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer op")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cp := write("checkpoint", fetch("/log/checkpoint"))
	for _, c := range []struct {
		id, want string
		exit     int
	}{
		{"r-deep", "unreadable: " + schemas.ErrReceiptTooDeep.Error(), 0},
		{"r-deep-tampered", "verify: FAILED receipt-signature", 1},
		{"r-after", "binding: none recorded", 0},
	} {
		t.Run(c.id, func(t *testing.T) {
			body := fetch("/v1/receipts/" + c.id)
			var served api.UnreadableReceipt
			if err := json.Unmarshal(body, &served); err != nil {
				t.Fatalf("the served body is not JSON a client reads: %v", err)
			}
			if (served.Unreadable != "") != strings.HasPrefix(c.id, "r-deep") || (served.Raw != nil && !bytes.Equal(served.Raw, leaves[c.id])) {
				t.Fatalf("served %.200s", body)
			}
			out, err := chio(context.Background(), "verify", "--receipt", write(c.id+".json", body),
				"--proof", write(c.id+".proof", fetch("/v1/receipts/"+c.id+"/inclusion-proof")),
				"--checkpoint", cp, "--vkey", vkey, "--kernel-key", kernelPub)
			var ee *exitError
			switch {
			case c.exit == 0 && (err != nil || !strings.Contains(out, "verify: OK receipt "+c.id) || !strings.Contains(out, c.want)):
				t.Fatalf("verify: %v\n%s", err, out)
			case c.exit != 0 && (!errors.As(err, &ee) || ee.code != c.exit || !strings.Contains(ee.Error(), c.want)):
				t.Fatalf("verify: %v, want exit %d with %q\n%s", err, c.exit, c.want, out)
			}
		})
	}
}
