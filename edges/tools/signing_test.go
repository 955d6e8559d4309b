package tools

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// originServer is a fakeServer that reports an origin, as a bridge does.
type originServer struct {
	*fakeServer
	origin Origin
}

func (s *originServer) Origin() Origin { return s.origin }

// Every manifest the registry takes is signed; the document verifies with
// the key, not with another, nor once tampered with; Replace signs the new
// manifest under a new hash, which entries resolved from then on carry.
func TestManifestsAreSigned(t *testing.T) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	pub := schemas.EncodePublicKey(key.Public().(ed25519.PublicKey))
	other := schemas.EncodePublicKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32)).Public().(ed25519.PublicKey))
	reg := NewRegistry(WithManifestKey(key))
	srv := fake("srv", manifest("srv", tool("a", "")), "a")
	if err := reg.Register(srv); err != nil {
		t.Fatal(err)
	}
	if reg.ManifestSigner() != pub {
		t.Fatalf("signer %q", reg.ManifestSigner())
	}
	en, ok := reg.Tool("srv", "a")
	if !ok || en.Signed == nil || en.Signed.SignerKey != pub || en.Origin != OriginInProcess {
		t.Fatalf("entry %+v", en)
	}
	first := en.Signed.ManifestHash
	raw, err := json.Marshal(en.Signed)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := schemas.ParseSignedManifest(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := parsed.Verify(pub); err != nil {
		t.Fatalf("verify: %v", err)
	}
	canon, _ := schemas.Canonical(en.Manifest)
	if schemas.SHA256Hex(canon) != first {
		t.Fatal("manifest_hash is not the SHA-256 of the manifest's JCS")
	}

	tampered := []struct {
		name string
		edit func(s string) string
		key  string
		want error
	}{
		{"another key", func(s string) string { return s }, other, schemas.ErrManifestSigner},
		{"tool renamed", func(s string) string { return strings.Replace(s, `"name":"a"`, `"name":"b"`, 1) }, pub, schemas.ErrManifestHash},
		{"hash swapped with the signer's", func(s string) string {
			return strings.Replace(s, first, strings.Repeat("0", 64), 1)
		}, pub, schemas.ErrManifestHash},
		{"signature flipped", func(s string) string {
			i := strings.Index(s, `"signature":"`) + len(`"signature":"`)
			c := "0"
			if s[i] == '0' {
				c = "1"
			}
			return s[:i] + c + s[i+1:]
		}, pub, schemas.ErrManifestSignature},
		{"unsigned", func(s string) string {
			i := strings.Index(s, `,"signer_key"`)
			return s[:i] + "}"
		}, pub, schemas.ErrManifestUnsigned},
		{"wrong schema", func(s string) string {
			return strings.Replace(s, `"chio.signed_manifest.v1"`, `"chio.signed_manifest.v2"`, 1)
		}, pub, schemas.ErrManifestSchema},
	}
	for _, tc := range tampered {
		s, err := schemas.ParseSignedManifest([]byte(tc.edit(string(raw))))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := s.Verify(tc.key); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}

	srv.manifest, srv.tools = manifest("srv", tool("a", ""), tool("c", "")), []string{"a", "c"}
	if err := reg.Replace(srv); err != nil {
		t.Fatal(err)
	}
	after, _ := reg.Tool("srv", "a")
	if after.Signed.ManifestHash == first || after.Signed.Verify(pub) != nil {
		t.Fatalf("after Replace: hash %s (was %s)", after.Signed.ManifestHash, first)
	}
	if en.Signed.ManifestHash != first {
		t.Fatal("Replace changed an entry already resolved")
	}
	if got := reg.Servers(); len(got) != 1 || got[0].Signed != after.Signed {
		t.Fatalf("servers %+v", got)
	}
}

// Without a key manifests are hashed, not signed.
func TestManifestsHashedWithoutKey(t *testing.T) {
	reg := NewRegistry()
	if err := reg.AddManifest(manifest("m", tool("a", ""))); err != nil {
		t.Fatal(err)
	}
	en, _ := reg.Tool("m", "a")
	if en.Signed == nil || len(en.Signed.ManifestHash) != 64 || en.Signed.Signature != "" || en.Origin != OriginManifest {
		t.Fatalf("%+v", en.Signed)
	}
	if err := en.Signed.Verify(schemas.EncodePublicKey(make(ed25519.PublicKey, 32))); !errors.Is(err, schemas.ErrManifestUnsigned) {
		t.Fatalf("verify unsigned: %v", err)
	}
}

// A listing shows every server, exposed or not, with its origin, its
// manifest's hash, and each tool's exposure per audience and fidelity.
func TestListing(t *testing.T) {
	reg := NewRegistry()
	for _, s := range []Server{
		fake("local", manifest("local", tool("greet", `{"a2a.expose":true}`)), "greet"),
		&originServer{fake("files", manifest("files", tool("read", `{"mcp.expose":true}`)), "read"), OriginMCP},
		&originServer{fake("chio.admin", manifest("chio.admin", tool("x", `{"a2a.expose":true}`)), "x"), OriginWorker},
	} {
		if err := reg.Register(s); err != nil {
			t.Fatal(err)
		}
	}
	l := reg.Listing([]Exposure{{Protocol: "a2a"}, {Protocol: "mcp"}}, A2AProfile{}, ACPTool)
	type row struct{ server, origin, tool, a2a, mcp string }
	want := []row{
		{"chio.admin", "worker", "x", Internal, Internal},
		{"files", "mcp", "read", Hidden, Exposed},
		{"local", "in-process", "greet", Exposed, Hidden},
	}
	if len(l.Servers) != len(want) || l.ManifestSigner != "" {
		t.Fatalf("listing %+v", l)
	}
	for i, w := range want {
		s := l.Servers[i]
		if len(s.Tools) != 1 {
			t.Fatalf("%s: %+v", w.server, s)
		}
		tl := s.Tools[0]
		got := row{s.ServerID, string(s.Origin), tl.Name, tl.Exposure["a2a"], tl.Exposure["mcp"]}
		if got != w || s.ManifestHash != s.SignedManifest.ManifestHash || !tl.Fidelity["a2a"].Publishable() || tl.Fidelity["acp"].Kind == "" {
			t.Errorf("row %d: %+v %+v, want %+v", i, got, tl.Fidelity, w)
		}
	}
}
