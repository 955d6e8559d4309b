package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// outbound is an upstream request built from a tool's arguments, before the
// operator headers are added.
type outbound struct {
	req *http.Request
	// argHeaders are the headers that came from arguments (cookies as
	// "Cookie"): what a simulation may show.
	argHeaders http.Header
	// body is the JSON body, or the text body as a JSON string; nil for none.
	body json.RawMessage
}

// build validates the arguments and builds the upstream request against
// base. Every refusal wraps ErrBadArguments, and nothing is sent.
func build(ctx context.Context, rt *Route, base *url.URL, raw json.RawMessage) (*outbound, error) {
	args, err := rt.arguments(raw)
	if err != nil {
		return nil, err
	}
	bad := func(err error) error {
		return fmt.Errorf("arguments of %s: %w: %w", rt.Tool, ErrBadArguments, err)
	}

	u := *base
	path, err := expandPath(rt, args)
	if err != nil {
		return nil, bad(err)
	}
	u.RawPath = strings.TrimSuffix(base.EscapedPath(), "/") + path
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		return nil, bad(err)
	}
	query := base.Query()
	out := &outbound{argHeaders: make(http.Header)}
	var cookies []*http.Cookie
	for i := range rt.Params {
		p := &rt.Params[i]
		raw, ok := args[p.Key]
		if !ok || p.In == InPath {
			continue
		}
		vals, present, err := p.encode(raw)
		if err != nil {
			return nil, bad(err)
		}
		if !present {
			continue
		}
		switch p.In {
		case InQuery:
			query[p.Name] = append(query[p.Name], vals...)
		case InHeader:
			if err := checkHeaderValue(vals[0]); err != nil {
				return nil, bad(fmt.Errorf("%s: %w", p.Key, err))
			}
			out.argHeaders.Set(p.Name, vals[0])
		case InCookie:
			c := &http.Cookie{Name: p.Name, Value: vals[0]}
			if err := c.Valid(); err != nil {
				return nil, bad(fmt.Errorf("%s: %w", p.Key, err))
			}
			cookies = append(cookies, c)
		}
	}
	u.RawQuery = query.Encode()

	var body []byte
	if b := rt.Body; b != nil {
		if raw, ok := args[b.Key]; ok {
			if body, out.body, err = encodeBody(b, raw); err != nil {
				return nil, bad(err)
			}
		}
	}
	req, err := http.NewRequestWithContext(ctx, rt.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request for %s: %w", rt.Tool, err)
	}
	if body == nil {
		req.Body, req.ContentLength, req.GetBody = http.NoBody, 0, nil
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	if c := req.Header.Get("Cookie"); c != "" {
		out.argHeaders.Set("Cookie", c)
	}
	for k, v := range out.argHeaders {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", rt.Body.MediaType)
	}
	req.Header.Set("Accept", "application/json, */*;q=0.8")
	out.req = req
	return out, nil
}

// expandPath fills the path template with the path arguments, each checked
// (checkPathValue) and escaped as one segment; the template's literal text
// is escaped as a path.
func expandPath(rt *Route, args map[string]json.RawMessage) (string, error) {
	var b strings.Builder
	rest := rt.Path
	for {
		lit, after, ok := strings.Cut(rest, "{")
		b.WriteString((&url.URL{Path: lit}).EscapedPath())
		if !ok {
			return b.String(), nil
		}
		name, tail, ok := strings.Cut(after, "}")
		if !ok {
			return "", fmt.Errorf("path template %q is malformed", rt.Path)
		}
		p := rt.pathParam(name)
		if p == nil {
			return "", fmt.Errorf("path parameter %q is not declared", name)
		}
		raw, ok := args[p.Key]
		if !ok {
			return "", fmt.Errorf("path parameter %q is missing", p.Key)
		}
		vals, present, err := p.encode(raw)
		if err != nil {
			return "", err
		}
		if !present {
			return "", fmt.Errorf("path parameter %q is empty", p.Key)
		}
		if err := checkPathValue(vals[0]); err != nil {
			return "", fmt.Errorf("%s: %w", p.Key, err)
		}
		b.WriteString(url.PathEscape(vals[0]))
		rest = tail
	}
}

func (rt *Route) pathParam(name string) *Param {
	for i := range rt.Params {
		if p := &rt.Params[i]; p.In == InPath && p.Name == name {
			return p
		}
	}
	return nil
}

// encodeBody renders the body argument: a JSON body compacted, a text body
// from its JSON string. It also returns the body as shown in a simulation.
func encodeBody(b *Body, raw json.RawMessage) (body []byte, shown json.RawMessage, err error) {
	if b.JSON {
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", b.Key, err)
		}
		return buf.Bytes(), buf.Bytes(), nil
	}
	var s string
	if err := strictjson.Unmarshal(raw, &s); err != nil {
		return nil, nil, fmt.Errorf("%s: a %s body must be a string", b.Key, b.MediaType)
	}
	return []byte(s), raw, nil
}
