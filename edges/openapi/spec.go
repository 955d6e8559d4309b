package openapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
)

// MaxSpecBytes bounds an OpenAPI document, so a wrong path or a hostile URL
// cannot exhaust memory.
const MaxSpecBytes = 16 << 20

// specFetchTimeout bounds fetching a document over HTTP when the context
// has no deadline of its own.
const specFetchTimeout = 30 * time.Second

// Spec is a parsed OpenAPI document.
type Spec struct {
	Doc    *openapi3.T
	Source string // the file path or URL it came from, for messages
	// Hash is the sha256 (hex) of the raw document: the policy hash that
	// receipts of `chio api protect` name.
	Hash string
	// URL is where the document was fetched from (http(s) only, after
	// redirects); relative server URLs resolve against it. Nil otherwise.
	URL *url.URL
}

// Load reads an OpenAPI 3.0.x or 3.1.x document, YAML or JSON, from a file
// path or an http(s) URL, and parses it as Parse does.
func Load(ctx context.Context, src string) (*Spec, error) {
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		return loadURL(ctx, src)
	}
	f, err := os.Open(src)
	if err != nil {
		return nil, fmt.Errorf("load spec %s: %w", src, err)
	}
	defer f.Close()
	data, err := readBounded(f, MaxSpecBytes, ErrSpecTooLarge)
	if err != nil {
		return nil, fmt.Errorf("load spec %s: %w", src, err)
	}
	return Parse(ctx, data, src)
}

func loadURL(ctx context.Context, src string) (*Spec, error) {
	ctx, cancel := context.WithTimeout(ctx, specFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return nil, fmt.Errorf("load spec %s: %w", src, err)
	}
	req.Header.Set("Accept", "application/json, application/yaml;q=0.9, */*;q=0.5")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("load spec %s: %w", src, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, fmt.Errorf("load spec %s: HTTP status %d", src, resp.StatusCode)
	}
	data, err := readBounded(resp.Body, MaxSpecBytes, ErrSpecTooLarge)
	if err != nil {
		return nil, fmt.Errorf("load spec %s: %w", src, err)
	}
	s, err := Parse(ctx, data, src)
	if err != nil {
		return nil, err
	}
	s.URL = resp.Request.URL
	return s, nil
}

// Parse reads an OpenAPI 3.0.x or 3.1.x document, YAML or JSON, from bytes;
// source names it in errors. Swagger 2.0 and other versions are refused
// (ErrUnsupportedVersion), so is any $ref to another document
// (ErrExternalRef): the loader is given no path, so it can read no file.
func Parse(ctx context.Context, data []byte, source string) (*Spec, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("parse spec %s: %w", source, err)
	}
	if len(data) > MaxSpecBytes {
		return nil, fmt.Errorf("parse spec %s: %w (%d bytes, at most %d)", source, ErrSpecTooLarge, len(data), MaxSpecBytes)
	}
	loader := openapi3.NewLoader()
	loader.Context = ctx
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromData(data)
	if err != nil {
		var ext *openapi3.DisallowedExternalRefError
		if errors.As(err, &ext) {
			return nil, fmt.Errorf("parse spec %s: %w: %q", source, ErrExternalRef, ext.Ref)
		}
		return nil, fmt.Errorf("parse spec %s: %w: %w", source, ErrInvalidSpec, err)
	}
	// kin-openapi reads a Swagger document as a 3.x one with an unknown
	// "swagger" key; it is recognised here to say what it is.
	if v, ok := doc.Extensions["swagger"]; ok {
		return nil, fmt.Errorf("parse spec %s: Swagger %v: %w", source, v, ErrUnsupportedVersion)
	}
	switch doc.OpenAPIMajorMinor() {
	case "3.0", "3.1":
	default:
		return nil, fmt.Errorf("parse spec %s: openapi %q: %w", source, abbreviate(doc.OpenAPI), ErrUnsupportedVersion)
	}
	// Examples, defaults and patterns are documentation here: real specs
	// often get them slightly wrong, and the upstream enforces its own.
	if err := doc.Validate(ctx,
		openapi3.DisableExamplesValidation(),
		openapi3.DisableSchemaDefaultsValidation(),
		openapi3.DisableSchemaPatternValidation(),
	); err != nil {
		return nil, fmt.Errorf("parse spec %s: %w: %w", source, ErrInvalidSpec, err)
	}
	sum := sha256.Sum256(data)
	return &Spec{Doc: doc, Source: source, Hash: hex.EncodeToString(sum[:])}, nil
}

// readBounded reads r up to limit bytes; more is tooLarge.
func readBounded(r io.Reader, limit int64, tooLarge error) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w (more than %d bytes)", tooLarge, limit)
	}
	return data, nil
}

// abbreviate renders untrusted text for an error message: cut so a huge
// value cannot flood logs.
func abbreviate(s string) string {
	const limit = 64
	if len(s) > limit {
		return s[:limit] + "…"
	}
	return s
}
