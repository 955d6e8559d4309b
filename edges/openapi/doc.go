// Package openapi is the core of the OpenAPI bridge: it turns an OpenAPI 3.0
// or 3.1 document into a chio.manifest.v1 (one tool per operation) and a
// route table, and performs the governed calls against the upstream HTTP API
// as a tools.Server. It holds no MCP and no HTTP-server code: the MCP edge
// serves the manifest's tools, and the `chio api protect` proxy uses Match
// and Arguments to turn an incoming request into the same tool call, so the
// upstream request is rebuilt from exactly the arguments the guards saw.
//
// Parsing, $ref resolution and request routing are kin-openapi's
// (github.com/getkin/kin-openapi): it reads 3.0 and 3.1, YAML and JSON, and
// refuses external $refs unless told otherwise. Argument validation compiles
// each tool's input schema with santhosh-tekuri/jsonschema (draft 2020-12).
//
// Security boundaries: only internal "#/..." $refs are followed; a path
// parameter can never add, remove or climb a path segment; operator headers
// (upstream credentials) are added last, are never echoed in simulations or
// errors, and are redacted from upstream responses; redirects are not
// followed, so credentials never reach another host; every read (spec,
// request body, upstream response) is bounded. JSON from callers and
// upstreams (request bodies, JSON parameters, arguments, JSON answers) is
// read with strictjson: a member repeated, exactly or but for case, at any
// depth, nesting past strictjson.MaxDepth, invalid UTF-8 or a lone
// surrogate is refused (ErrBadArguments; ErrUnreadableResponse for an
// answer), so the guards, the upstream and the receipt read one value.
package openapi
