package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
)

// checkedCounts reads chio_projection_receipts_checked_total from
// chio up's /metrics, by check.
func checkedCounts(t *testing.T, up *upProcess) map[string]int {
	t.Helper()
	_, body := httpGet(t, up.httpURL+"/metrics")
	out := map[string]int{}
	for _, m := range regexp.MustCompile(`chio_projection_receipts_checked_total\{check="(\w+)"\} (\d+)`).FindAllSubmatch(body, -1) {
		out[string(m[1])], _ = strconv.Atoi(string(m[2]))
	}
	return out
}

func waitChecked(t *testing.T, up *upProcess, want map[string]int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := checkedCounts(t, up)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipts checked by the projections: %v, want %v", got, want)
		}
	}
}

// TestUpProjectionsTrustOnlyTheirLedgersLeaves: chio up's projections do
// not verify again the receipts its own ledger signed, but an outsider's
// receipt published to CHIO_RECEIPTS (signed by another key, or a
// genuine receipt altered) is verified and kept flagged unverified, and
// replaying a genuine receipt's exact bytes only repeats what the ledger
// signed.
func TestUpProjectionsTrustOnlyTheirLedgersLeaves(t *testing.T) {
	up := startUp(t, "--nats-listen", "127.0.0.1:0")
	nc := dialUp(t, up.natsURL, up.dir, natsauth.Edge)
	js, _ := jetstream.New(nc)
	var ids []string
	for range 3 {
		s := upSigner(t, filepath.Join(up.dir, "keys"))
		ids = append(ids, publishCall(t, js, s, schemas.VerdictAllow), publishCall(t, js, s, schemas.VerdictDeny))
	}
	waitChecked(t, up, map[string]int{"signed_here": len(ids)})

	status, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+ids[0])
	var served struct {
		Receipt json.RawMessage `json:"receipt"`
	}
	if status != 200 || json.Unmarshal(body, &served) != nil {
		t.Fatalf("GET receipt: %d %s", status, body)
	}
	genuine := []byte(served.Receipt) // the leaf's bytes, as the ledger serves them
	ctx := context.Background()
	// Receipts are published by whoever holds a ledger's credential: the
	// projections check what they are handed even then.
	ljs, _ := jetstream.New(dialUp(t, up.natsURL, up.dir, natsauth.Ledger))
	publish := func(id string, leaf uint64, raw []byte) {
		t.Helper()
		msg := &nats.Msg{Subject: schemas.ReceiptSubject("hello"), Data: raw, Header: nats.Header{}}
		msg.Header.Set(jetstream.MsgIDHeader, id)
		msg.Header.Set(schemas.HeaderLeafIndex, strconv.FormatUint(leaf, 10))
		if _, err := ljs.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	// A genuine receipt, its id and tool name changed.
	alteredID := uuid.Must(uuid.NewV7()).String()
	altered := bytes.Replace(genuine, []byte(`"id":"`+ids[0]+`"`), []byte(`"id":"`+alteredID+`"`), 1)
	altered = bytes.Replace(altered, []byte(`"tool_name":"hello_task"`), []byte(`"tool_name":"rm_rf"`), 1)
	if bytes.Equal(altered, genuine) || !json.Valid(altered) {
		t.Fatalf("alteration failed: %s", altered)
	}
	publish(alteredID, 100, altered)
	// An outsider's own receipt, well formed and signed by its own key.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	forgedID := uuid.Must(uuid.NewV7()).String()
	forged, err := schemas.SignReceiptLeaf(priv, schemas.ReceiptBody{ID: forgedID, Timestamp: uint64(time.Now().Unix()), CapabilityID: "demo-capability",
		ToolServer: "hello", ToolName: "hello_task", Action: schemas.ToolCallAction{Parameters: json.RawMessage(`{"message":"hello"}`)},
		Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, ContentHash: schemas.EmptyContentHash, PolicyHash: "p", TrustLevel: schemas.TrustMediated})
	if err != nil {
		t.Fatal(err)
	}
	publish(forgedID, 101, forged)
	// The genuine bytes again, under a message id the stream has not seen.
	publish(ids[0]+"#replayed", 0, genuine)
	waitChecked(t, up, map[string]int{"signed_here": len(ids) + 1, "unverified": 2})
	if err := up.stop(); err != nil {
		t.Fatalf("chio up stopped with %v", err)
	}
}
