package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	oa "github.com/openai/openai-go/v3"
	tlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/ledger/evidence"
	"github.com/chio-ledger/chio/schemas"
)

// evidenceCalls makes n tool calls through chio up's OpenAI edge (under
// the dev capability) in one request and returns their receipt ids.
func evidenceCalls(t *testing.T, up *upProcess, n int) []string {
	t.Helper()
	var calls []oa.ChatCompletionMessageToolCallUnionParam
	for i := range n {
		calls = append(calls, oa.ChatCompletionMessageToolCallUnionParam{OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{
			ID: fmt.Sprintf("call_ev_%d", i), Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "hello_task", Arguments: fmt.Sprintf(`{"text":"w<%d>&"}`, i)}}})
	}
	raw, err := json.Marshal(oa.ChatCompletionAssistantMessageParam{ToolCalls: calls})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(up.httpURL+openai.ToolCallsPath, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ans struct {
		Messages []struct {
			Chio openai.Chio `json:"chio"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil || resp.StatusCode != http.StatusOK || len(ans.Messages) != n {
		t.Fatalf("tool-calls: %d %v %+v", resp.StatusCode, err, ans)
	}
	ids := make([]string, n)
	for i, m := range ans.Messages {
		if ids[i] = m.Chio.ReceiptRef; ids[i] == "" {
			t.Fatalf("call %d has no receipt", i)
		}
	}
	return ids
}

// tenantCall makes one A2A call under ag's capability and returns its receipt id.
func tenantCall(t *testing.T, up *upProcess, ag *agent, text string) string {
	t.Helper()
	ctx := context.Background()
	client, err := a2aclient.NewFromEndpoints(ctx, []*a2apb.AgentInterface{a2apb.NewAgentInterface(up.httpURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: ag.proving(t), Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.SendMessage(ctx, &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart(text))})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2apb.Task)
	if !ok {
		t.Fatalf("A2A call: %+v", res)
	}
	rid, _ := task.Metadata["chio"].(map[string]any)["receiptId"].(string)
	if task.Status.State != a2apb.TaskStateCompleted || rid == "" {
		t.Fatalf("A2A call: task %+v", task)
	}
	return rid
}

// evidencePackageLines reads an .ndjson file of a package.
func evidencePackageLines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte("\n"))[:bytes.Count(b, []byte("\n"))]
}

// copyPackage copies a package directory to a new one.
func copyPackage(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "pkg")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// remanifest rewrites manifest.json for the files it lists, as a forger
// who edits a package would.
func remanifest(t *testing.T, dir string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, evidence.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m evidence.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for i, f := range m.Files {
		b, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		m.Files[i].Size, m.Files[i].SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
	}
	out, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, evidence.ManifestFile), append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// editLines rewrites an .ndjson file of a package through edit.
func editLines(t *testing.T, dir, name string, edit func([][]byte) [][]byte) {
	t.Helper()
	lines := edit(evidencePackageLines(t, filepath.Join(dir, name)))
	if err := os.WriteFile(filepath.Join(dir, name), bytes.Join(lines, nil), 0o644); err != nil {
		t.Fatal(err)
	}
}

// editEvidenceQuery rewrites query.json through edit, as a forger would.
func editEvidenceQuery(t *testing.T, dir string, edit func(*evidence.Query)) {
	t.Helper()
	var q evidence.Query
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, evidence.QueryFile))), &q); err != nil {
		t.Fatal(err)
	}
	edit(&q)
	out, _ := json.MarshalIndent(q, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, evidence.QueryFile), append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// lineOf returns the index of the first line holding sub.
func lineOf(t *testing.T, lines [][]byte, sub string) int {
	t.Helper()
	for i, l := range lines {
		if bytes.Contains(l, []byte(sub)) {
			return i
		}
	}
	t.Fatalf("no line holds %s", sub)
	return -1
}

// TestEvidenceExportAndVerify exports receipts made through the edges of
// chio up, verifies the package offline against the pinned keys, and
// checks that every kind of tampering fails naming the file and line.
func TestEvidenceExportAndVerify(t *testing.T) {
	up := startUp(t)
	ctx := context.Background()
	keysDir := filepath.Join(up.dir, "keys")
	vkeyFile := filepath.Join(keysDir, checkpointVKeyFile)
	kernelPub, err := os.ReadFile(filepath.Join(keysDir, kernelPubFile))
	if err != nil {
		t.Fatal(err)
	}
	kernel := strings.TrimSpace(string(kernelPub))
	tokFile := filepath.Join(up.dir, operatorTokenFile)

	first := evidenceCalls(t, up, 20)
	for _, id := range first {
		awaitLogReceipt(t, up.httpURL, up.token, id)
	}
	_, early := httpGet(t, up.httpURL+"/log/checkpoint")
	earlyFile := filepath.Join(t.TempDir(), "early.checkpoint")
	if err := os.WriteFile(earlyFile, early, 0o600); err != nil {
		t.Fatal(err)
	}
	earlySize := logSize(t, up.httpURL)

	// Two tenants with root grants from chio up's issuer key.
	issuerText, err := os.ReadFile(filepath.Join(keysDir, issuerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := schemas.ParsePrivateKey(string(issuerText))
	if err != nil {
		t.Fatal(err)
	}
	issuerPub := schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))
	now := uint64(time.Now().Unix())
	a, b := newAgent(t), newAgent(t)
	for _, x := range []struct {
		ag *agent
		id string
	}{{a, "cap-evidence-a"}, {b, "cap-evidence-b"}} {
		if x.ag.tok, err = schemas.IssueCapability(issuer, schemas.CapabilityBody{ID: x.id, Issuer: issuerPub, Subject: x.ag.pub,
			Scope: schemas.Scope{Grants: grantsFor("hello-a2a-srv/hello_task")}, IssuedAt: now - 5, ExpiresAt: now + 3600}); err != nil {
			t.Fatal(err)
		}
	}
	tenantA := []string{tenantCall(t, up, a, "a-one"), tenantCall(t, up, a, "a-two")}
	tenantB := tenantCall(t, up, b, "b-one")
	second := evidenceCalls(t, up, 10)
	all := append(append(append(append([]string{}, first...), tenantA...), tenantB), second...)
	capIDs := map[string]bool{}
	for _, id := range all {
		capIDs[awaitReceiptCapability(t, up, id)] = true
	}
	for id := range capIDs {
		waitStatus(t, up.token, up.httpURL+"/v1/lineage/"+id+"/chain", http.StatusOK)
	}

	base := filepath.Join(t.TempDir(), "pkg")
	out, err := chio(ctx, "evidence", "export", "--url", up.httpURL, "--token", "@"+tokFile, "--out", base, "--page-size", "7",
		"--consistency-from", earlyFile)
	if err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	if !strings.Contains(out, fmt.Sprintf("%d tool receipts (0 unreadable)", len(all))) || !strings.Contains(out, fmt.Sprintf("tree size %d extends", earlySize)) {
		t.Fatalf("export printed:\n%s", out)
	}
	verifyArgs := func(dir string) []string {
		return []string{"evidence", "verify", "--input", dir, "--vkey", vkeyFile, "--kernel-key", kernel}
	}
	out, err = chio(ctx, verifyArgs(base)...)
	want := fmt.Sprintf("evidence package verified: %d tool receipts (0 unreadable), %d lineage records, 8 verified files", len(all), len(capIDs))
	if err != nil || !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("consistency: tree size %d extends", earlySize)) {
		t.Fatalf("verify: %v\n%s\nwant %q", err, out, want)
	}
	// The edge that decided each call is certified by the issuer key the
	// auditor pins, and by no other.
	if out, err := chio(ctx, append(verifyArgs(base), "--edge-issuer", filepath.Join(keysDir, issuerPubFile))...); err != nil ||
		!strings.Contains(out, "edge credentials, each issued by a pinned --edge-issuer key") {
		t.Fatalf("verify with the edge issuer pinned: %v\n%s", err, out)
	}
	strangerPub, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := chio(ctx, append(verifyArgs(base), "--edge-issuer", schemas.EncodePublicKey(strangerPub))...); err == nil ||
		!strings.Contains(err.Error(), "FAILED edge-credentials.ndjson:1: edge:") {
		t.Fatalf("verify with another edge issuer pinned: %v", err)
	}
	// Each receipt line is the leaf the log holds, in log order.
	lines := evidencePackageLines(t, filepath.Join(base, evidence.ReceiptsFile))
	if len(lines) != len(all) {
		t.Fatalf("%d receipt lines, want %d", len(lines), len(all))
	}
	for i, l := range lines {
		var r struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(l, &r); err != nil || r.ID != all[i] {
			t.Fatalf("line %d is %s, want %s (%v)", i+1, r.ID, all[i], err)
		}
		if !bytes.Contains(l, []byte(`w<`)) && i < len(first) {
			t.Fatalf("line %d: the leaf's characters were escaped: %s", i+1, l)
		}
	}

	// A proof of receipt 1 at the earlier size, in the package's form.
	_, earlyProof := httpGetAs(t, up.token, fmt.Sprintf("%s/v1/receipts/%s/inclusion-proof?tree_size=%d", up.httpURL, all[0], earlySize))
	var ep evidence.ProofLine
	if err := json.Unmarshal(earlyProof, &ep); err != nil {
		t.Fatal(err)
	}
	var epLine bytes.Buffer
	enc := json.NewEncoder(&epLine)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(ep)

	// Tenant B's receipt and the record of its capability, the last of
	// both in the package.
	bLine := len(first) + len(tenantA) + 1
	bLineage := lineOf(t, evidencePackageLines(t, filepath.Join(base, evidence.LineageFile)), `"capability_id":"cap-evidence-b"`)

	_, otherVKey, _ := note.GenerateKey(rand.Reader, strings.Split(string(early), "\n")[0])
	swap := func(i, j int) func([][]byte) [][]byte {
		return func(l [][]byte) [][]byte { l[i], l[j] = l[j], l[i]; return l }
	}
	cases := []struct {
		name   string
		edit   func(t *testing.T, dir string)
		vkey   string
		kernel string
		want   string
	}{
		{name: "receipt byte edited, manifest recomputed", want: "receipts.ndjson:3: receipt-signature:", edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.ReceiptsFile, func(l [][]byte) [][]byte {
				l[2] = bytes.Replace(l[2], []byte(`"tool_name":"hello_task"`), []byte(`"tool_name":"hellO_task"`), 1)
				return l
			})
			remanifest(t, dir)
		}},
		{name: "receipt byte edited", want: "receipts.ndjson: manifest:", edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.ReceiptsFile, func(l [][]byte) [][]byte {
				l[2] = bytes.Replace(l[2], []byte(`"tool_name":"hello_task"`), []byte(`"tool_name":"hellO_task"`), 1)
				return l
			})
		}},
		{name: "space added to a receipt, manifest recomputed", want: "receipts.ndjson:4: format:", edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.ReceiptsFile, func(l [][]byte) [][]byte { l[3] = append([]byte(" "), l[3]...); return l })
			remanifest(t, dir)
		}},
		{name: "receipt line removed, manifest recomputed", want: "receipts.ndjson:5: proof:", edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.ReceiptsFile, func(l [][]byte) [][]byte { return append(l[:4], l[5:]...) })
			remanifest(t, dir)
		}},
		{name: "receipt and proof lines removed, manifest recomputed", want: "query.json: query:", edit: func(t *testing.T, dir string) {
			for _, f := range []string{evidence.ReceiptsFile, evidence.ProofsFile} {
				editLines(t, dir, f, func(l [][]byte) [][]byte { return append(l[:4], l[5:]...) })
			}
			remanifest(t, dir)
		}},
		{name: "two receipt lines swapped, manifest recomputed", want: "receipts.ndjson:2: proof:", edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.ReceiptsFile, swap(1, 2))
			remanifest(t, dir)
		}},
		{name: "two lines swapped in both files, manifest recomputed", want: "receipts.ndjson:3: order:", edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.ReceiptsFile, swap(1, 2))
			editLines(t, dir, evidence.ProofsFile, swap(1, 2))
			remanifest(t, dir)
		}},
		{name: "two receipt lines swapped", want: "receipts.ndjson: manifest:", edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.ReceiptsFile, swap(1, 2))
		}},
		{name: "a proof for another size, manifest recomputed", want: "inclusion-proofs.ndjson:1: proof:", edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.ProofsFile, func(l [][]byte) [][]byte { l[0] = epLine.Bytes(); return l })
			remanifest(t, dir)
		}},
		{name: "a receipt outside the filter, query.json and manifest rewritten", want: "receipts.ndjson:1: filter:", edit: func(t *testing.T, dir string) {
			editEvidenceQuery(t, dir, func(q *evidence.Query) { q.Filter.ToolName = "other_task" })
			remanifest(t, dir)
		}},
		{name: "a principal its receipts are not under, query.json and manifest rewritten", want: "receipts.ndjson:1: filter:", edit: func(t *testing.T, dir string) {
			editEvidenceQuery(t, dir, func(q *evidence.Query) { q.Filter.Principal = schemas.Principal(issuerPub, b.pub) })
			remanifest(t, dir)
		}},
		{name: "a lineage record removed, counts and manifest rewritten", want: fmt.Sprintf("receipts.ndjson:%d: lineage:", bLine), edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.LineageFile, func(l [][]byte) [][]byte { return slices.Delete(l, bLineage, bLineage+1) })
			editEvidenceQuery(t, dir, func(q *evidence.Query) { q.Lineage.Records-- })
			remanifest(t, dir)
		}},
		{name: "the only receipt of a capability removed, counts and manifest rewritten", want: fmt.Sprintf("capability-lineage.ndjson:%d: lineage:", bLineage+1), edit: func(t *testing.T, dir string) {
			for _, f := range []string{evidence.ReceiptsFile, evidence.ProofsFile} {
				editLines(t, dir, f, func(l [][]byte) [][]byte { return slices.Delete(l, bLine-1, bLine) })
			}
			editEvidenceQuery(t, dir, func(q *evidence.Query) { q.Receipts-- })
			remanifest(t, dir)
		}},
		{name: "the edge credentials removed, counts and manifest rewritten", want: "receipts.ndjson:1: edge:", edit: func(t *testing.T, dir string) {
			_ = os.WriteFile(filepath.Join(dir, evidence.EdgeCredentialsFile), nil, 0o644)
			editEvidenceQuery(t, dir, func(q *evidence.Query) { q.Edges.Credentials = 0 })
			remanifest(t, dir)
		}},
		{name: "an edge credential's edge id edited, manifest recomputed", want: "edge-credentials.ndjson:1: edge:", edit: func(t *testing.T, dir string) {
			editLines(t, dir, evidence.EdgeCredentialsFile, func(l [][]byte) [][]byte {
				l[0] = bytes.Replace(l[0], []byte(`"edge_id":"chio-up"`), []byte(`"edge_id":"chio-uq"`), 1)
				return l
			})
			remanifest(t, dir)
		}},
		{name: "a file added", want: "notes.txt: manifest:", edit: func(t *testing.T, dir string) {
			_ = os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644)
		}},
		{name: "a file removed", want: "capability-lineage.ndjson: manifest:", edit: func(t *testing.T, dir string) {
			_ = os.Remove(filepath.Join(dir, evidence.LineageFile))
		}},
		{name: "wrong --vkey", vkey: otherVKey, want: "checkpoints: checkpoint:"},
		{name: "wrong --kernel-key", kernel: strings.Repeat("ab", 32), want: "receipts.ndjson:1: kernel-key:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := copyPackage(t, base)
			if c.edit != nil {
				c.edit(t, dir)
			}
			args := verifyArgs(dir)
			if c.vkey != "" {
				args[5] = c.vkey
			}
			if c.kernel != "" {
				args[7] = c.kernel
			}
			out, err := chio(ctx, args...)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), "FAILED "+c.want) {
				t.Fatalf("want exit 1 naming %q, got %v\n%s", c.want, err, out)
			}
			t.Log(err)
		})
	}
	// With a witness policy the checkpoint needs its quorum of cosignatures.
	t.Run("witness quorum", func(t *testing.T) {
		w := newEvidenceCosigner(t, "w1.example")
		policy := filepath.Join(t.TempDir(), "policy")
		_ = os.WriteFile(policy, []byte("witness w1 "+w.vkey+" http://w1.example\nquorum w1\n"), 0o600)
		if _, err := chio(ctx, append(verifyArgs(base), "--witness-policy", policy)...); err == nil || err.(*exitError).code != 1 ||
			!strings.Contains(err.Error(), "FAILED checkpoints: witness-quorum:") {
			t.Fatalf("uncosigned checkpoint: %v", err)
		}
		dir := copyPackage(t, base)
		n, err := note.Open([]byte(readFile(t, filepath.Join(dir, evidence.CheckpointFile))), note.VerifierList(mustVerifier(t, strings.TrimSpace(readFile(t, vkeyFile)))))
		if err != nil {
			t.Fatal(err)
		}
		cosigned, err := note.Sign(n, w)
		if err != nil {
			t.Fatal(err)
		}
		_ = os.WriteFile(filepath.Join(dir, evidence.CheckpointFile), cosigned, 0o644)
		remanifest(t, dir)
		if out, err := chio(ctx, append(verifyArgs(dir), "--witness-policy", policy)...); err != nil || !strings.Contains(out, "cosigned by w1") {
			t.Fatalf("cosigned checkpoint: %v\n%s", err, out)
		}
	})
	// A tenant's package with tenant B's receipt swapped in for tenant A's
	// second, in log order, with B's lineage added and the counts and the
	// manifest rewritten: B's capability is not under A's principal.
	// Leaving A's second receipt out alone would verify: see the
	// documented limit, which the output states.
	t.Run("another tenant's receipt swapped into a principal's package", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "pkg")
		if out, err := chio(ctx, "evidence", "export", "--url", up.httpURL, "--token", "@"+tokFile, "--out", dir,
			"--principal", schemas.Principal(issuerPub, a.pub)); err != nil {
			t.Fatalf("export: %v\n%s", err, out)
		}
		out, err := chio(ctx, verifyArgs(dir)...)
		if err != nil || !strings.Contains(out, "not provable offline: that these are all the receipts it selects") {
			t.Fatalf("verify: %v\n%s", err, out)
		}
		baseReceipts, baseProofs := evidencePackageLines(t, filepath.Join(base, evidence.ReceiptsFile)), evidencePackageLines(t, filepath.Join(base, evidence.ProofsFile))
		editLines(t, dir, evidence.ReceiptsFile, func(l [][]byte) [][]byte { l[1] = baseReceipts[bLine-1]; return l })
		editLines(t, dir, evidence.ProofsFile, func(l [][]byte) [][]byte { l[1] = baseProofs[bLine-1]; return l })
		editLines(t, dir, evidence.LineageFile, func(l [][]byte) [][]byte {
			return append(l, evidencePackageLines(t, filepath.Join(base, evidence.LineageFile))[bLineage])
		})
		editEvidenceQuery(t, dir, func(q *evidence.Query) { q.Lineage.Records++ })
		remanifest(t, dir)
		_, err = chio(ctx, verifyArgs(dir)...)
		if !strings.Contains(fmt.Sprint(err), "FAILED receipts.ndjson:2: filter:") {
			t.Fatalf("got %v", err)
		}
		t.Log(err)
	})

	for _, args := range [][]string{
		{"evidence", "verify", "--input", base},
		{"evidence", "verify", "--input", filepath.Join(base, "nope"), "--vkey", vkeyFile, "--kernel-key", kernel},
		{"evidence", "export", "--url", up.httpURL},
		{"evidence", "export", "--url", up.httpURL, "--out", t.TempDir() + "/x", "--since", "yesterday"},
		{"evidence", "export", "--url", up.httpURL, "--out", t.TempDir() + "/x", "--principal", "tenant-a"},
		{"evidence", "export", "--url", up.httpURL, "--out", t.TempDir() + "/x", "--outcome", "maybe"},
	} {
		if _, err := chio(ctx, args...); err == nil || err.(*exitError).code != 2 {
			t.Errorf("%v: %v, want exit 2", args, err)
		}
	}

	// A checkpoint of another log (another key for the same origin): the
	// export refuses to prove consistency with it, and leaves no package.
	otherSKey, _, _ := note.GenerateKey(rand.Reader, strings.Split(string(early), "\n")[0])
	otherSigner, _ := note.NewSigner(otherSKey)
	cp, _, _, err := tlog.ParseCheckpoint(early, otherSigner.Name(), mustVerifier(t, strings.TrimSpace(readFile(t, vkeyFile))))
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := note.Sign(&note.Note{Text: string(cp.Marshal())}, otherSigner)
	foreignFile := filepath.Join(t.TempDir(), "foreign.checkpoint")
	_ = os.WriteFile(foreignFile, foreign, 0o600)
	refused := filepath.Join(t.TempDir(), "refused")
	if _, err := chio(ctx, "evidence", "export", "--url", up.httpURL, "--token", "@"+tokFile, "--out", refused, "--consistency-from", foreignFile); err == nil ||
		err.(*exitError).code != 1 || !strings.Contains(err.Error(), "consistency") {
		t.Fatalf("export with another log's checkpoint: %v", err)
	}
	if _, err := os.Stat(refused); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed export left %s: %v", refused, err)
	}

	// A tenant's read grant exports only the tenant's receipts, with their
	// lineage; --principal selects the same under the operator's token.
	aPrincipal := schemas.Principal(issuerPub, a.pub)
	readerPub, err := chio(ctx, "capability", "keygen", "--out", filepath.Join(t.TempDir(), "reader.key"))
	if err != nil {
		t.Fatal(err)
	}
	readTok, err := chio(ctx, "capability", "issue", "--issuer-key", filepath.Join(keysDir, issuerKeyFile), "--subject", strings.TrimSpace(readerPub),
		"--read", aPrincipal, "--ttl", "1h", "--output", "header")
	if err != nil {
		t.Fatal(err)
	}
	readTokFile := filepath.Join(t.TempDir(), "tenant.tok")
	_ = os.WriteFile(readTokFile, []byte(readTok), 0o600)
	auditTok, err := chio(ctx, "capability", "issue", "--issuer-key", filepath.Join(keysDir, issuerKeyFile), "--subject", strings.TrimSpace(readerPub),
		"--read", "receipts", "--ttl", "1h", "--output", "header")
	if err != nil {
		t.Fatal(err)
	}
	auditTokFile := filepath.Join(t.TempDir(), "auditor.tok")
	_ = os.WriteFile(auditTokFile, []byte(auditTok), 0o600)

	for _, c := range []struct {
		name        string
		args        []string
		ids         []string
		lineage     int
		printsEmpty bool
	}{
		{"tenant's grant", []string{"--token", "@" + readTokFile}, tenantA, 1, false},
		{"--principal", []string{"--token", "@" + tokFile, "--principal", aPrincipal}, tenantA, 1, false},
		{"--tool and --since", []string{"--token", "@" + tokFile, "--tool", "hello-a2a-srv/hello_task", "--since", fmt.Sprint(now - 60)}, all, len(capIDs), false},
		{"--outcome matching nothing", []string{"--token", "@" + tokFile, "--outcome", "deny"}, nil, 0, false},
		{"auditor reads no lineage", []string{"--token", "@" + auditTokFile, "--until", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, all, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "pkg")
			out, err := chio(ctx, append([]string{"evidence", "export", "--url", up.httpURL, "--out", dir}, c.args...)...)
			if err != nil {
				t.Fatalf("export: %v\n%s", err, out)
			}
			if c.printsEmpty != strings.Contains(out, "is empty") {
				t.Fatalf("export printed:\n%s", out)
			}
			lines := evidencePackageLines(t, filepath.Join(dir, evidence.ReceiptsFile))
			if len(lines) != len(c.ids) {
				t.Fatalf("%d receipts, want %d", len(lines), len(c.ids))
			}
			for i, l := range lines {
				if !bytes.Contains(l, []byte(`"id":"`+c.ids[i]+`"`)) {
					t.Fatalf("line %d is not receipt %s: %s", i+1, c.ids[i], l)
				}
			}
			out, err = chio(ctx, verifyArgs(dir)...)
			want := fmt.Sprintf("evidence package verified: %d tool receipts (0 unreadable), %d lineage records, 7 verified files", len(c.ids), c.lineage)
			if err != nil || !strings.Contains(out, want) {
				t.Fatalf("verify: %v\n%s\nwant %q", err, out, want)
			}
		})
	}
}

// awaitReceiptCapability waits until receipt id is in the log and returns
// the capability it names.
func awaitReceiptCapability(t *testing.T, up *upProcess, id string) string {
	t.Helper()
	awaitLogReceipt(t, up.httpURL, up.token, id)
	_, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+id)
	var w struct {
		Receipt struct {
			CapabilityID string `json:"capability_id"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(body, &w); err != nil || w.Receipt.CapabilityID == "" {
		t.Fatalf("receipt %s: %v %s", id, err, body)
	}
	return w.Receipt.CapabilityID
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// evidenceCosigner signs cosignature/v1 lines (c2sp.org/tlog-cosignature)
// as a witness does.
type evidenceCosigner struct {
	name, vkey string
	hash       uint32
	key        ed25519.PrivateKey
}

func newEvidenceCosigner(t *testing.T, name string) *evidenceCosigner {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	typed := append([]byte{0x04}, pub...)
	h := sha256.Sum256(append([]byte(name+"\n"), typed...))
	hash := binary.BigEndian.Uint32(h[:4])
	return &evidenceCosigner{name: name, hash: hash, key: key,
		vkey: fmt.Sprintf("%s+%08x+%s", name, hash, base64.StdEncoding.EncodeToString(typed))}
}

func (c *evidenceCosigner) Name() string    { return c.name }
func (c *evidenceCosigner) KeyHash() uint32 { return c.hash }
func (c *evidenceCosigner) Sign(msg []byte) ([]byte, error) {
	ts := uint64(time.Now().Unix())
	sig := binary.BigEndian.AppendUint64(nil, ts)
	return append(sig, ed25519.Sign(c.key, fmt.Appendf(nil, "cosignature/v1\ntime %d\n%s", ts, msg))...), nil
}
