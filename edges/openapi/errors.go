package openapi

import "errors"

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrUnsupportedVersion: the document is not OpenAPI 3.0.x or 3.1.x
	// (Swagger 2.0 included).
	ErrUnsupportedVersion = errors.New("not an OpenAPI 3.0 or 3.1 document")
	// ErrExternalRef: the document has a $ref to another document; only
	// internal "#/..." references are followed.
	ErrExternalRef = errors.New("external $ref refused: only internal \"#/...\" references are followed")
	// ErrInvalidSpec: the document does not parse or does not validate.
	ErrInvalidSpec = errors.New("invalid OpenAPI document")
	// ErrSpecTooLarge: the document is larger than MaxSpecBytes.
	ErrSpecTooLarge = errors.New("OpenAPI document is too large")
	// ErrNoOperations: the spec has no publishable operation, so no
	// manifest can be built (a manifest error).
	ErrNoOperations = errors.New("manifest: the spec has no publishable operations")
	// ErrNoRoute: no published operation matches the request. Unknown
	// paths and unknown methods both wrap it.
	ErrNoRoute = errors.New("no operation matches the request")
	// ErrMethodNotAllowed: the path is known but not with this method. Its
	// errors also wrap ErrNoRoute; test this one first to answer 405.
	ErrMethodNotAllowed = errors.New("method not allowed for this path")
	// ErrBadArguments: the arguments (or the HTTP request they come from)
	// do not fit the operation; nothing was sent upstream.
	ErrBadArguments = errors.New("bad arguments")
	// ErrBodyTooLarge: a request body is larger than MaxBodyBytes.
	ErrBodyTooLarge = errors.New("request body is too large")
	// ErrUnsupportedMediaType: a request body's Content-Type is not the
	// operation's.
	ErrUnsupportedMediaType = errors.New("unsupported request media type")
	// ErrResponseTooLarge: the upstream response body exceeds the bound.
	ErrResponseTooLarge = errors.New("upstream response is too large")
	// ErrUnreadableResponse: the upstream answered JSON that strictjson
	// refuses (a member repeated, exactly or but for case; nesting too
	// deep; invalid UTF-8 or a lone surrogate), so the call fails.
	ErrUnreadableResponse = errors.New("upstream response is JSON the strict reader refuses")
	// ErrNoUpstream: no BaseURL was given and the spec has no usable server.
	ErrNoUpstream = errors.New("no usable upstream base URL")
	// ErrNoStreaming: the bridge does not stream (InvokeStream).
	ErrNoStreaming = errors.New("the OpenAPI bridge does not stream")
)
