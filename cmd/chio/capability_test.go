package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/schemas"
)

func writeKey(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(schemas.EncodePrivateKey(priv)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, schemas.EncodePublicKey(priv.Public().(ed25519.PublicKey))
}

func TestCapabilityIssueInspectDelegate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	issuerKey, _ := writeKey(t, dir, "issuer.key")
	agentKey, agentPub := writeKey(t, dir, "agent.key")
	_, subPub := writeKey(t, dir, "sub.key")

	out, err := chio(ctx, "capability", "issue", "--issuer-key", issuerKey, "--subject", agentPub,
		"--grant", "hello-a2a-srv/*:invoke,delegate", "--grant", "pricing/pricing::quote", "--ttl", "2h", "--max-invocations", "10", "--id", "cap-root")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want JSON and header lines, got %q", out)
	}
	root, err := schemas.ParseCapability([]byte(lines[0]))
	if err != nil {
		t.Fatal(err)
	}
	if fromHeader, err := schemas.DecodeCapabilityText(lines[1]); err != nil || string(fromHeader) != lines[0] {
		t.Fatalf("header line is not the token: %v", err)
	}
	g := root.Scope.Grants
	if root.ID != "cap-root" || len(g) != 2 || g[0].ToolName != "*" || len(g[0].Operations) != 2 || g[1].ToolName != "pricing::quote" ||
		g[1].Operations[0] != schemas.OpInvoke || *g[1].MaxInvocations != 10 || root.ExpiresAt-root.IssuedAt != 7200 {
		t.Fatalf("issued %+v", root)
	}
	rootFile := filepath.Join(dir, "root.tok")
	if err := os.WriteFile(rootFile, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := chio(ctx, "capability", "inspect", lines[1]); err != nil || !strings.Contains(out, "ok   signature") {
		t.Fatalf("inspect: %v\n%s", err, out)
	}

	child, err := chio(ctx, "capability", "issue", "--issuer-key", agentKey, "--subject", subPub,
		"--grant", "hello-a2a-srv/hello_task", "--max-invocations", "3", "--delegate-from", "@"+rootFile, "--output", "header")
	if err != nil {
		t.Fatal(err)
	}
	out, err = chio(ctx, "capability", "inspect", strings.TrimSpace(child))
	if err != nil || !strings.Contains(out, "ok   ancestor 0 (cap-root) signature") || !strings.Contains(out, "ok   token narrows its parent cap-root") {
		t.Fatalf("inspect child: %v\n%s", err, out)
	}

	// Refusals: widening, a key that is not the parent's subject, bad grants.
	for name, args := range map[string][]string{
		"widening child":  {"--issuer-key", agentKey, "--subject", subPub, "--grant", "other/tool", "--delegate-from", "@" + rootFile},
		"wrong delegator": {"--issuer-key", issuerKey, "--subject", subPub, "--grant", "hello-a2a-srv/hello_task", "--max-invocations", "1", "--delegate-from", "@" + rootFile},
	} {
		if _, err := chio(ctx, append([]string{"capability", "issue"}, args...)...); err == nil {
			t.Errorf("%s: issued", name)
		}
	}
	// A public key file parses as a seed would: refused by its name.
	pubFile := filepath.Join(dir, "issuer.pub")
	if err := os.WriteFile(pubFile, []byte(agentPub+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = chio(ctx, "capability", "issue", "--issuer-key", pubFile, "--subject", agentPub, "--grant", "hello-a2a-srv/hello_task")
	if ee := (*exitError)(nil); !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "is a public key") {
		t.Errorf("--issuer-key issuer.pub: %v", err)
	}
	for _, grant := range []string{"noslash", "srv/", "/tool", "srv/tool:sudo", "*/tool"} {
		_, err := chio(ctx, "capability", "issue", "--issuer-key", issuerKey, "--subject", agentPub, "--grant", grant)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 {
			t.Errorf("--grant %q: want usage error, got %v", grant, err)
		}
	}

	// A tampered token fails inspection with exit code 1.
	tampered := strings.Replace(lines[0], `"hello-a2a-srv"`, `"other-srv"`, 1)
	_, err = chio(ctx, "capability", "inspect", tampered)
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("tampered token: %v", err)
	}
}

func TestCapabilityKeygen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.key")
	out, err := chio(context.Background(), "capability", "keygen", "--out", path)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	priv, err := schemas.ParsePrivateKey(string(raw))
	if err != nil || schemas.EncodePublicKey(priv.Public().(ed25519.PublicKey)) != strings.TrimSpace(out) {
		t.Fatalf("printed key %q does not match the file: %v", out, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode())
	}
	if _, err := chio(context.Background(), "capability", "keygen", "--out", path); err == nil {
		t.Fatal("overwrote an existing key")
	}
}

func TestCapabilityRevoke(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Stop()
	if out, err := chio(context.Background(), "capability", "revoke", "cap:1", "--nats", ns.ClientURL(), "--reason", "leaked"); err != nil || !strings.Contains(out, "revoked cap:1") {
		t.Fatalf("%v %s", err, out)
	}
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), schemas.RevocationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), schemas.KVKey("cap:1"))
	if err != nil || !strings.Contains(string(e.Value()), `"reason":"leaked"`) {
		t.Fatalf("revocation not stored: %v", err)
	}
	if _, err := chio(context.Background(), "capability", "revoke", "bad id", "--nats", ns.ClientURL()); err == nil {
		t.Fatal("revoked an invalid id")
	}
}
