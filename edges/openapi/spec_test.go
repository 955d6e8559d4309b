package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		data    string // used when file is empty
		version string
		paths   int
		wantErr error
	}{
		{name: "3.0 YAML with refs", file: "zoo-3.0.yaml", version: "3.0", paths: 6},
		{name: "3.1 JSON with refs", file: "catalog-3.1.json", version: "3.1", paths: 2},
		{name: "public petstore-expanded", file: "petstore-expanded.yaml", version: "3.0", paths: 2},
		{name: "httpbin subset", file: "httpbin.yaml", version: "3.0", paths: 10},
		{name: "Swagger 2.0 refused", file: "swagger-2.0.json", wantErr: ErrUnsupportedVersion},
		{name: "external ref refused", file: "external-ref.yaml", wantErr: ErrExternalRef},
		{name: "version 3.2 refused", data: "openapi: 3.2.0\ninfo: {title: x, version: '1'}\npaths: {}\n", wantErr: ErrUnsupportedVersion},
		{name: "no version", data: `{"info": {"title": "x", "version": "1"}, "paths": {}}`, wantErr: ErrUnsupportedVersion},
		{name: "not a document", data: "- just\n- a list\n", wantErr: ErrInvalidSpec},
		{name: "dangling internal ref", data: "openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n  /a:\n    get:\n      responses:\n        '200':\n          $ref: '#/components/responses/Missing'\n", wantErr: ErrInvalidSpec},
		{name: "undeclared path parameter", data: "openapi: 3.0.3\ninfo: {title: x, version: '1'}\npaths:\n  /a/{id}:\n    get:\n      responses:\n        '200': {description: ok}\n", wantErr: ErrInvalidSpec},
		{name: "too large", data: "openapi: 3.0.3\n" + string(bytes.Repeat([]byte("#"), MaxSpecBytes)), wantErr: ErrSpecTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := []byte(tt.data)
			source := "inline"
			if tt.file != "" {
				source = "testdata/" + tt.file
				var err error
				if data, err = os.ReadFile(source); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Parse(context.Background(), data, source)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Parse: err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := s.Doc.OpenAPIMajorMinor(); got != tt.version {
				t.Errorf("version = %q, want %q", got, tt.version)
			}
			if got := s.Doc.Paths.Len(); got != tt.paths {
				t.Errorf("paths = %d, want %d", got, tt.paths)
			}
			sum := sha256.Sum256(data)
			if s.Hash != hex.EncodeToString(sum[:]) {
				t.Errorf("Hash = %s, want the sha256 of the raw bytes", s.Hash)
			}
			if s.Source != source || s.URL != nil {
				t.Errorf("Source, URL = %q, %v", s.Source, s.URL)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	raw, err := os.ReadFile("testdata/catalog-3.1.json")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/specs/catalog.json", func(w http.ResponseWriter, r *http.Request) { w.Write(raw) })
	mux.HandleFunc("/specs/huge.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("#"), MaxSpecBytes+10))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx := context.Background()

	t.Run("file", func(t *testing.T) {
		s, err := Load(ctx, "testdata/zoo-3.0.yaml")
		if err != nil || s.Doc.Info.Title != "Zoo" {
			t.Fatalf("Load: %v", err)
		}
	})
	t.Run("missing file", func(t *testing.T) {
		if _, err := Load(ctx, "testdata/nope.yaml"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("err = %v, want not exist", err)
		}
	})
	t.Run("URL", func(t *testing.T) {
		s, err := Load(ctx, srv.URL+"/specs/catalog.json")
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if s.URL == nil || s.URL.Path != "/specs/catalog.json" {
			t.Fatalf("URL = %v", s.URL)
		}
		// The spec's relative server "/api" resolves against its URL.
		b, err := Build(s, Config{ServerID: "catalog"})
		if err != nil {
			t.Fatal(err)
		}
		base, err := specBaseURL(b.Spec())
		if err != nil || base.String() != srv.URL+"/api" {
			t.Fatalf("base = %v, %v; want %s/api", base, err, srv.URL)
		}
	})
	t.Run("URL not found", func(t *testing.T) {
		if _, err := Load(ctx, srv.URL+"/specs/missing.json"); err == nil {
			t.Fatal("Load of a 404 succeeded")
		}
	})
	t.Run("URL too large", func(t *testing.T) {
		if _, err := Load(ctx, srv.URL+"/specs/huge.yaml"); !errors.Is(err, ErrSpecTooLarge) {
			t.Fatalf("err = %v, want ErrSpecTooLarge", err)
		}
	})
}
