package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// toolNameRule is the published tool name rule, written out here apart
// from names.go: what MCP clients and the OpenAI function API accept.
var toolNameRule = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// FuzzParseBuild parses bytes as an OpenAPI document and builds the bridge
// from it, as `chio edge openapi` does with an operator's spec. Neither may
// panic. Properties:
//   - Parse either errors with one of its sentinel errors, which callers
//     branch on, or returns a spec whose hash is the document's SHA-256;
//   - a bridge that builds publishes only tools whose names pass the name
//     rule, each once, each with its route, and a manifest that survives
//     encoding and schemas.ParseManifest;
//   - building is deterministic: the same document builds the same
//     manifest again.
func FuzzParseBuild(f *testing.F) {
	files, err := filepath.Glob("testdata/*")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/a/{id}":{"get":{"operationId":"get a thing with a very long name that does not fit the rule at all","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}},"/a.b":{"post":{"responses":{"200":{"description":"ok"}}}},"/a_b":{"post":{"responses":{"200":{"description":"ok"}}}}}}`))

	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(ctx, data, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrInvalidSpec) && !errors.Is(err, ErrUnsupportedVersion) &&
				!errors.Is(err, ErrExternalRef) && !errors.Is(err, ErrSpecTooLarge) {
				t.Fatalf("Parse error wraps none of its sentinels: %v", err)
			}
			return
		}
		if sum := sha256.Sum256(data); s.Hash != hex.EncodeToString(sum[:]) {
			t.Fatalf("spec hash %s is not the document's", s.Hash)
		}
		b, err := Build(s, Config{ServerID: "fuzz", OutputSchemas: true})
		if err != nil {
			return
		}
		m := b.Manifest()
		routes := b.Routes()
		if len(m.Tools) == 0 || len(routes) != len(m.Tools) {
			t.Fatalf("%d tools, %d routes", len(m.Tools), len(routes))
		}
		seen := map[string]bool{}
		for i, tool := range m.Tools {
			if !toolNameRule.MatchString(tool.Name) {
				t.Fatalf("tool name %q breaks the name rule", tool.Name)
			}
			if seen[tool.Name] {
				t.Fatalf("tool %q published twice", tool.Name)
			}
			seen[tool.Name] = true
			r, ok := b.Route(tool.Name)
			if !ok || r != routes[i] || r.Tool != tool.Name {
				t.Fatalf("tool %q has no route of its own", tool.Name)
			}
		}
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("manifest does not encode: %v", err)
		}
		if _, err := schemas.ParseManifest(raw); err != nil {
			t.Fatalf("built manifest does not parse back: %v\n%s", err, raw)
		}
		s2, err := Parse(ctx, data, "fuzz")
		if err != nil {
			t.Fatalf("second parse: %v", err)
		}
		b2, err := Build(s2, Config{ServerID: "fuzz", OutputSchemas: true})
		if err != nil {
			t.Fatalf("second build: %v", err)
		}
		raw2, err := json.Marshal(b2.Manifest())
		if err != nil || !bytes.Equal(raw, raw2) {
			t.Fatalf("the same document builds another manifest: %v\n%s\n%s", err, raw, raw2)
		}
	})
}
