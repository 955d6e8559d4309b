package main

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// chio version and chio --version name the binary's version, Go version
// and platform; chio up --help names each flag's value type, not words
// of its description.
func TestVersion(t *testing.T) {
	want := regexp.MustCompile(`^chio \S+( commit [0-9a-f]{1,12}(\+modified)?)? ` + regexp.QuoteMeta(runtime.Version()) + " " + runtime.GOOS + "/" + runtime.GOARCH + "\n$")
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, err := chio(context.Background(), args...)
		if err != nil || !want.MatchString(out) {
			t.Fatalf("chio %s: %v %q", strings.Join(args, " "), err, out)
		}
	}
	if _, err := chio(context.Background(), "version", "extra"); err == nil {
		t.Fatal("chio version took an argument")
	}
	help, err := chio(context.Background(), "up", "--help")
	if err != nil || !strings.Contains(help, "--openapi-protect-listen string") {
		t.Fatalf("chio up --help: %v\n%s", err, help)
	}
}

// chio up with its NATS address taken says so at once, naming the
// address and the flag, instead of waiting for a server that never
// becomes ready.
func TestUpNamesATakenNATSAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = chio(context.Background(), "up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", ln.Addr().String())
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), ln.Addr().String()) || !strings.Contains(err.Error(), "--nats-listen") {
		t.Fatalf("chio up on a taken NATS address: %v", err)
	}
}

// A --vkey that is neither a verifier key nor a file holding one is a
// usage error that says what it wants, on every command that takes one.
func TestVKeyFlagSaysWhatItWants(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "x")
	if err := os.WriteFile(f, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"verify", "--receipt", f, "--proof", f, "--vkey", "not-a-key", "--kernel-key", "00"},
		{"verify", "--scitt", f, "--vkey", "not-a-key", "--kernel-key", "00"},
		{"evidence", "verify", "--input", dir, "--vkey", "not-a-key", "--kernel-key", "00"},
	} {
		_, err := chio(context.Background(), args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), "ORIGIN+HASH+KEY") {
			t.Errorf("chio %s: %v", strings.Join(args, " "), err)
		}
	}
}
