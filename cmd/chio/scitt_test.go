package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/veraison/go-cose"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/scitt"
	"github.com/chio-ledger/chio/schemas"
)

// A receipt of chio up's log, exported as a SCITT transparent statement:
// go-cose verifies the statement under the kernel key and its payload is
// the receipt; chio verify --scitt checks it all against the pinned keys
// and refuses it under another kernel key, with a byte changed, or
// against another log's key.
func TestUpExportsSCITTStatements(t *testing.T) {
	api := newCountingAPI(t)
	up, decide, _ := startGatewayUp(t, api.URL)
	p := discoverPDP(t, "http://"+decide)
	dev := devToken(t, up)
	capability := parsedCapability(t, dev)
	d := p.evaluate(`{"subject":{"type":"agent","id":"` + capability.Subject + `","properties":{"token":"` + dev + `"}},` +
		`"action":{"name":"tools/call"},"resource":{"type":"tool","id":"httpGet"},"context":{"arguments":{"q":"scitt"}}}`)
	if !d.Decision {
		t.Fatalf("evaluation: %+v", d)
	}
	rid := d.Context.ReceiptID
	awaitLogReceipt(t, up.httpURL, up.token, rid)

	req, _ := http.NewRequest(http.MethodGet, up.httpURL+"/v1/receipts/"+rid+"/scitt", nil)
	req.Header.Set("Authorization", "Bearer "+up.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var ts bytes.Buffer
	_, _ = ts.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != scitt.StatementMediaType {
		t.Fatalf("scitt: %d %v %s", resp.StatusCode, resp.Header, ts.Bytes())
	}
	if code, _ := httpGet(t, up.httpURL+"/v1/receipts/"+rid+"/scitt"); code != http.StatusUnauthorized {
		t.Fatalf("an anonymous reader got the statement: %d", code)
	}

	kernelHex, err := os.ReadFile(filepath.Join(up.dir, "keys", kernelPubFile))
	if err != nil {
		t.Fatal(err)
	}
	kernelPub, err := schemas.ParsePublicKey(strings.TrimSpace(string(kernelHex)))
	if err != nil {
		t.Fatal(err)
	}
	var st cose.Sign1Message
	if err := st.UnmarshalCBOR(ts.Bytes()); err != nil {
		t.Fatal(err)
	}
	kv, _ := cose.NewVerifier(cose.AlgorithmEdDSA, kernelPub)
	if err := st.Verify(nil, kv); err != nil {
		t.Fatalf("go-cose: %v", err)
	}
	_, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+rid)
	if !bytes.Contains(body, st.Payload) {
		t.Fatal("the statement's payload is not the served receipt")
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "receipt.scitt")
	if err := os.WriteFile(file, ts.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	vkey := filepath.Join(up.dir, "keys", checkpointVKeyFile)
	out, err := chio(context.Background(), "verify", "--scitt", file, "--vkey", vkey, "--kernel-key", strings.TrimSpace(string(kernelHex)))
	if err != nil || !strings.Contains(out, "verify: OK SCITT statement of receipt "+rid+" (allow)") {
		t.Fatalf("chio verify --scitt: %v %s", err, out)
	}

	otherPub, _, _ := ed25519.GenerateKey(nil)
	changed := bytes.Replace(ts.Bytes(), []byte(`"scitt"`), []byte(`"SCITT"`), 1)
	changedFile := filepath.Join(dir, "changed.scitt")
	if err := os.WriteFile(changedFile, changed, 0o600); err != nil || bytes.Equal(changed, ts.Bytes()) {
		t.Fatal("could not change the statement", err)
	}
	otherLog := filepath.Join(dir, "other.vkey")
	_, otherVKey, err := note.GenerateKey(nil, "other.example/log")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(otherLog, []byte(otherVKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"another kernel key": {"--scitt", file, "--vkey", vkey, "--kernel-key", schemas.EncodePublicKey(otherPub)},
		"a byte changed":     {"--scitt", changedFile, "--vkey", vkey, "--kernel-key", strings.TrimSpace(string(kernelHex))},
		"another log key":    {"--scitt", file, "--vkey", otherLog, "--kernel-key", strings.TrimSpace(string(kernelHex))},
	} {
		out, err := chio(context.Background(), append([]string{"verify"}, args...)...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "verify: FAILED") {
			t.Fatalf("%s: %v %s", name, err, out)
		}
	}
}
