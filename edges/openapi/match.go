package openapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/routers"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// MaxBodyBytes bounds the request body Arguments reads.
const MaxBodyBytes = 1 << 20

// Match finds the published operation of an incoming request by method and
// path, with kin-openapi's router. The path is matched from its root
// against the spec's path templates: the servers' hosts and base paths take
// no part (a proxy mounted under a prefix strips it first, e.g. with
// http.StripPrefix). Matching uses the escaped path, so "%2F" never splits a
// segment; the returned path parameters are percent-decoded. No match wraps
// ErrNoRoute; a known path with another method wraps ErrMethodNotAllowed
// (and ErrNoRoute). Operations that are not published never match.
func (b *Bridge) Match(r *http.Request) (*Route, map[string]string, error) {
	found, vars, err := b.router.FindRoute(r)
	switch {
	case errors.Is(err, routers.ErrMethodNotAllowed):
		return nil, nil, fmt.Errorf("match %s %s: %w: %w", r.Method, abbreviate(r.URL.EscapedPath()), ErrMethodNotAllowed, ErrNoRoute)
	case err != nil:
		return nil, nil, fmt.Errorf("match %s %s: %w", r.Method, abbreviate(r.URL.EscapedPath()), ErrNoRoute)
	}
	rt := b.byOp[found.Method+" "+found.Path]
	if rt == nil {
		return nil, nil, fmt.Errorf("match %s %s: %w", r.Method, abbreviate(r.URL.EscapedPath()), ErrNoRoute)
	}
	params := make(map[string]string, len(vars))
	for k, v := range vars {
		d, err := url.PathUnescape(v)
		if err != nil {
			return nil, nil, fmt.Errorf("match %s %s: path parameter %s: %w: %w", r.Method, rt.Path, k, ErrBadArguments, err)
		}
		params[k] = d
	}
	return rt, params, nil
}

// Arguments builds a tool's arguments from an incoming request that Match
// matched to rt: the path parameters, the declared query, header and cookie
// parameters (undeclared ones are dropped, as the upstream request is
// rebuilt from the arguments alone), and the body (MaxBodyBytes at most;
// beyond wraps ErrBodyTooLarge). It is the inverse of the request Invoke
// builds, and its result is validated as Invoke validates it, so a request
// the proxy forwards is rebuilt from exactly what the guards saw.
//
// Refusals wrap ErrBadArguments: a path value that could change the path, a
// scalar parameter given twice, a malformed query, a body on an operation
// that takes none, a body that is not JSON strictjson accepts (a member
// repeated, exactly or but for case, nesting past its depth, invalid UTF-8
// or a lone surrogate: an upstream matching names without case, or keeping
// the first of two, would act on other values than the guards saw) or,
// for text, not UTF-8.
// A body whose Content-Type is not the operation's kind (JSON or text)
// wraps ErrUnsupportedMediaType. Arguments reads r.Body.
func (b *Bridge) Arguments(rt *Route, r *http.Request, pathParams map[string]string) (json.RawMessage, error) {
	bad := func(err error) error {
		return fmt.Errorf("arguments of %s from request: %w: %w", rt.Tool, ErrBadArguments, err)
	}
	query, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, bad(fmt.Errorf("query: %w", err))
	}
	args := make(map[string]any)
	for i := range rt.Params {
		p := &rt.Params[i]
		var vals []string
		switch p.In {
		case InPath:
			v, ok := pathParams[p.Name]
			if !ok {
				return nil, bad(fmt.Errorf("path parameter %q is missing", p.Name))
			}
			if err := checkPathValue(v); err != nil {
				return nil, bad(err)
			}
			vals = []string{v}
		case InQuery:
			vals = query[p.Name]
		case InHeader:
			vals = r.Header.Values(p.Name)
			if p.Array && len(vals) > 1 {
				vals = []string{strings.Join(vals, p.Delim)}
			}
		case InCookie:
			for _, c := range r.Cookies() {
				if c.Name == p.Name {
					vals = append(vals, c.Value)
				}
			}
		}
		if len(vals) == 0 {
			continue
		}
		v, err := p.decode(vals)
		if err != nil {
			return nil, bad(err)
		}
		args[p.Key] = v
	}
	body, err := requestBody(r)
	if err != nil {
		return nil, fmt.Errorf("arguments of %s from request: %w", rt.Tool, err)
	}
	switch {
	case len(body) == 0:
	case rt.Body == nil:
		return nil, bad(errors.New("the operation takes no request body"))
	default:
		v, err := bodyArgument(rt.Body, r.Header.Get("Content-Type"), body)
		if err != nil {
			return nil, fmt.Errorf("arguments of %s from request: %w", rt.Tool, err)
		}
		args[rt.Body.Key] = v
	}
	raw, err := marshal(args)
	if err != nil {
		return nil, fmt.Errorf("arguments of %s from request: %w", rt.Tool, err)
	}
	if _, err := rt.arguments(raw); err != nil {
		return nil, err
	}
	return raw, nil
}

func requestBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > MaxBodyBytes {
		return nil, fmt.Errorf("%w (%d bytes, at most %d)", ErrBodyTooLarge, r.ContentLength, MaxBodyBytes)
	}
	body, err := readBounded(r.Body, MaxBodyBytes, ErrBodyTooLarge)
	if err != nil && !errors.Is(err, ErrBodyTooLarge) {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return body, err
}

// bodyArgument reads a request body as the route's body argument. A
// missing Content-Type is read as the operation's.
func bodyArgument(b *Body, contentType string, body []byte) (any, error) {
	if contentType != "" {
		mt, _, err := mime.ParseMediaType(contentType)
		ok := err == nil && (b.JSON && jsonMediaType(mt) || !b.JSON && strings.HasPrefix(mt, "text/"))
		if !ok {
			return nil, fmt.Errorf("%w: %q (the operation takes %s)", ErrUnsupportedMediaType, abbreviate(contentType), b.MediaType)
		}
	}
	if b.JSON {
		if err := strictjson.Valid(body); err != nil {
			return nil, fmt.Errorf("%w: the JSON body: %w", ErrBadArguments, err)
		}
		return json.RawMessage(body), nil
	}
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: the text body is not valid UTF-8", ErrBadArguments)
	}
	return string(body), nil
}
