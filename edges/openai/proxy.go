package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/chio-ledger/chio/internal/redact"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// The proxy's paths: the two model APIs, as an OpenAI base URL of
// http://HOST/openai/v1 makes the official clients call them.
const (
	ChatCompletionsPath = "/openai/v1/chat/completions"
	ResponsesPath       = "/openai/v1/responses"
)

// Proxy bounds and headers.
const (
	// MaxProxyBodyBytes bounds a client request and each upstream answer
	// (a whole round's stream included): conversations carry history and
	// images. An upstream answer past it fails the request with a 502,
	// code upstream_too_large.
	MaxProxyBodyBytes = 32 << 20
	// MaxUpstreamErrorBytes bounds an upstream's error answer, which is
	// relayed to the client: past it the client gets a 502 naming the
	// status instead (a cut body could end inside a credential, which
	// then would not be recognised and scrubbed).
	MaxUpstreamErrorBytes = 1 << 20
	// DefaultMaxRounds bounds the upstream requests of one client request.
	DefaultMaxRounds = 8
	// ReceiptsHeader lists, comma-separated, the receipt ids of the
	// governed calls the proxy ran for a request, in the order they ran.
	ReceiptsHeader = "X-Chio-Receipts"
	// RoundsHeader is the number of upstream requests a request took.
	RoundsHeader = "X-Chio-Tool-Rounds"
)

// Upstream is the OpenAI-compatible model API the proxy forwards to.
type Upstream struct {
	// BaseURL is the API base the official clients use, such as
	// https://api.openai.com/v1: requests go to BaseURL/chat/completions
	// and BaseURL/responses.
	BaseURL *url.URL
	// APIKey, when set, is sent upstream as Authorization: Bearer. It is
	// never logged and never sent to the client.
	APIKey string
	// MaxRounds bounds the upstream requests per client request; 0 means
	// DefaultMaxRounds.
	MaxRounds int
	// Client sends the upstream requests; nil means a client without an
	// overall timeout (a model may think for minutes; the caller's going
	// away cancels the request).
	Client *http.Client

	// redactor scrubs the operator's credentials from every upstream
	// answer (see scrub).
	redactor *redact.Redactor
}

// LogValue leaves the key out of logs.
func (u Upstream) LogValue() slog.Value {
	return slog.GroupValue(slog.String("base_url", u.BaseURL.Redacted()), slog.Bool("api_key", u.APIKey != ""),
		slog.Int("max_rounds", u.MaxRounds))
}

// WithUpstream turns on the governing proxy: POST ChatCompletionsPath and
// ResponsesPath forward to u, with the governed tools added, and run the
// model's calls to them until it answers without one.
func WithUpstream(u Upstream) Option {
	return func(a *Adapter) {
		if u.MaxRounds <= 0 {
			u.MaxRounds = DefaultMaxRounds
		}
		if u.Client == nil {
			u.Client = &http.Client{}
		}
		u.BaseURL = u.BaseURL.JoinPath() // a copy; a trailing slash is harmless
		u.redactor = upstreamRedactor(&u)
		a.upstream = &u
	}
}

// proxyAPI is what the proxy loop needs of one model API.
type proxyAPI interface {
	dialect() Dialect
	// path is the upstream path under the base URL.
	path() string
	// prepare checks a client request and adds the governed functions
	// (bs, in this API's format) to its tools. It answers the function
	// names the client declared itself.
	prepare(req map[string]json.RawMessage, bs []*Binding) (map[string]bool, *Error)
	// parse reads a round's answer: a JSON body, or the events of a stream.
	parse(body []byte) (*turn, error)
	parseStream(events []ssestream.Event) (*turn, error)
	// extend appends the round's output and the results of its calls to
	// the request, for the next round.
	extend(req map[string]json.RawMessage, t *turn, results []Result) error
	// final is the answer to the client: t without the calls in deferred
	// (their indexes in t.calls), with what rep reports. A stream is
	// answered as events.
	final(t *turn, deferred map[int]bool, rep *proxyReport) (body []byte, events []ssestream.Event, err error)
}

// turn is one upstream answer.
type turn struct {
	// body is the response object (for a stream, the one the API's
	// last event carries, or nil where the API has none).
	body json.RawMessage
	// events is a stream's events, as received.
	events []ssestream.Event
	// calls are the calls the model made, in output order; pos is each
	// one's position in the API's own list (tool_calls index, output
	// index).
	calls []turnCall
	// content is the assistant text that came with the calls (Chat).
	content *string
	// output is the response's output items (Responses).
	output []json.RawMessage
	// cut reports a turn the model did not finish (Chat finish_reason
	// length or content_filter, a Responses status other than completed):
	// its calls may be truncated, so none is run.
	cut bool
}

type turnCall struct {
	Item
	pos int
}

// checkCalls refuses a turn whose governed calls cannot be answered: a
// result names its call by id, so an id must be present, bounded and
// unique.
func checkCalls(items []Item) error {
	if werr := checkUnique(items, ""); werr != nil {
		return errors.New(werr.Message)
	}
	for _, it := range items {
		if werr := checkID(it.CallID, "call id"); werr != nil {
			return fmt.Errorf("call to %q: %s", it.Name, werr.Message)
		}
	}
	return nil
}

// proxyReport is what the proxy tells the client about the calls it ran.
type proxyReport struct {
	Rounds int         `json:"rounds"`
	Calls  []proxyCall `json:"calls"`
	Held   []heldCall  `json:"deferred,omitempty"`
}

// proxyCall is one governed call the proxy ran.
type proxyCall struct {
	Round  int    `json:"round"`
	CallID string `json:"call_id"`
	Chio
}

// heldCall is a call to a governed tool the proxy did not run because the
// model called one of the client's own tools in the same turn.
type heldCall struct {
	CallID   string `json:"call_id"`
	Function string `json:"function"`
}

func (rep *proxyReport) receiptIDs() []string {
	ids := []string{}
	for _, c := range rep.Calls {
		if c.ReceiptRef != "" {
			ids = append(ids, c.ReceiptRef)
		}
	}
	return ids
}

// setHeaders writes the report's headers.
func (rep *proxyReport) setHeaders(h http.Header) {
	h.Set(ReceiptsHeader, strings.Join(rep.receiptIDs(), ","))
	h.Set(RoundsHeader, strconv.Itoa(rep.Rounds))
}

// registerProxy mounts the two proxy paths.
func (a *Adapter) registerProxy(e *echo.Echo) {
	e.POST(ChatCompletionsPath, a.handleProxy(chatAPI{}))
	e.POST(ResponsesPath, a.handleProxy(responsesAPI{}))
}

// handleProxy serves one model API. The client's credential is its Chio
// capability (the official clients send their API key as Authorization:
// Bearer, so a capability set as the API key works unchanged); the
// upstream gets the operator's key. Nothing reaches the upstream for a
// request Chio refuses.
func (a *Adapter) handleProxy(api proxyAPI) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if werr := requireJSON(r); werr != nil {
			return writeError(c, werr)
		}
		body, werr := readBodyMax(r, MaxProxyBodyBytes)
		if werr != nil {
			return writeError(c, werr)
		}
		req, werr := proxyRequest(body)
		if werr != nil {
			return writeError(c, werr)
		}
		token, proof, dev, werr := a.credential(r)
		if werr != nil {
			return writeError(c, werr)
		}
		if dev {
			if werr := refuseCrossSite(r); werr != nil {
				return writeError(c, werr)
			}
		}
		// The next effect is the upstream request, not a governed call:
		// the proof is spent here, and every round's calls share it.
		id, dec := a.kernel.Identify(r.Context(), token, proof)
		if dec != nil {
			return writeError(c, unauthorized(dec, nil))
		}
		stream, werr := streamFlag(req)
		if werr != nil {
			return writeError(c, werr)
		}
		clientNames, werr := api.prepare(req, a.invokable(id))
		if werr != nil {
			return writeError(c, werr)
		}
		p := &proxyRun{a: a, api: api, token: token, proof: proof, req: req, stream: stream, client: clientNames, rep: &proxyReport{Calls: []proxyCall{}}}
		return p.run(c)
	}
}

// proxyRequest reads a client request body, a JSON object, with
// strictjson: what the proxy checks (tools, stream, tool_choice…) is then
// what it sends upstream, where a repeated or case-variant member could
// otherwise be read as another. Its members are matched exactly.
func proxyRequest(body []byte) (map[string]json.RawMessage, *Error) {
	if err := strictjson.Valid(body); err != nil {
		return nil, invalid("invalid_json", "", "the body is not JSON this proxy accepts: %v", err)
	}
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil || req == nil {
		return nil, invalid("invalid_json", "", "the body must be a JSON object")
	}
	return req, nil
}

func errOrNull(err error) any {
	if err == nil {
		return "null"
	}
	return err
}

// streamFlag reads "stream": absent, false or true.
func streamFlag(req map[string]json.RawMessage) (bool, *Error) {
	raw, ok := req["stream"]
	if !ok || string(raw) == "null" {
		return false, nil
	}
	var s bool
	if err := json.Unmarshal(raw, &s); err != nil {
		return false, invalid("invalid_type", "stream", "stream must be a boolean")
	}
	return s, nil
}

// proxyRun is one client request's rounds.
type proxyRun struct {
	a     *Adapter
	api   proxyAPI
	token string
	// proof is the client request's proof of possession, shared by the
	// calls of every round.
	proof  *kernel.Proof
	req    map[string]json.RawMessage
	stream bool
	client map[string]bool
	rep    *proxyReport
}

// run loops: send the request upstream; when the model called governed
// tools (and only those), run them, append the results and send again;
// otherwise answer the client. A turn that also calls the client's own
// tools ends the loop: its governed calls are held back (not run, not
// shown to the client, listed in the report), since the client cannot
// carry their results; the model sees only the client's calls answered
// and calls again what it still needs.
func (p *proxyRun) run(c echo.Context) error {
	ctx := c.Request().Context()
	max := p.a.upstream.MaxRounds
	for {
		p.rep.Rounds++
		t, err := p.roundTrip(ctx)
		if err != nil {
			return p.fail(c, err)
		}
		var governed []Item
		deferred := map[int]bool{}
		clientCalls := false
		for i, tc := range t.calls {
			if p.governs(tc.Item) {
				governed = append(governed, tc.Item)
				deferred[i] = true
				continue
			}
			clientCalls = true
		}
		if len(governed) == 0 || clientCalls || t.cut {
			for i := range deferred {
				p.rep.Held = append(p.rep.Held, heldCall{CallID: t.calls[i].CallID, Function: t.calls[i].Name})
			}
			return p.answer(c, t, deferred)
		}
		if p.rep.Rounds >= max {
			return p.fail(c, &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "max_tool_rounds",
				Message: fmt.Sprintf("the model still called governed tools after %d rounds (the proxy's bound): no final answer", max)})
		}
		if len(governed) > MaxItems {
			return p.fail(c, &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "too_many_tool_calls",
				Message: fmt.Sprintf("the model made %d governed calls in one turn: at most %d are run", len(governed), MaxItems)})
		}
		if err := checkCalls(governed); err != nil {
			return p.fail(c, &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_invalid",
				Message: fmt.Sprintf("round %d: the model's calls cannot be answered: %v", p.rep.Rounds, err)})
		}
		results := p.a.Run(ctx, p.token, p.proof, &Batch{Dialect: p.api.dialect(), Items: governed})
		for _, r := range results {
			p.rep.Calls = append(p.rep.Calls, proxyCall{Round: p.rep.Rounds, CallID: r.Item.CallID, Chio: r.Chio})
		}
		if len(results) < len(governed) {
			return ctx.Err() // the client went away; the calls run are recorded
		}
		if err := p.api.extend(p.req, t, results); err != nil {
			return p.fail(c, fmt.Errorf("build round %d: %w", p.rep.Rounds+1, err))
		}
		// A forced choice ("required", one named function) has been
		// honoured: forcing it again would make the model call forever.
		relaxToolChoice(p.req)
	}
}

// relaxToolChoice sets a forcing tool_choice to "auto": "required", a
// named function or custom tool, or allowed_tools in required mode (which
// keeps its list).
func relaxToolChoice(req map[string]json.RawMessage) {
	raw, ok := req["tool_choice"]
	if !ok {
		return
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "required" {
			req["tool_choice"] = json.RawMessage(`"auto"`)
		}
		return
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return
	}
	if stringField(obj, "type") == "allowed_tools" {
		if stringField(obj, "mode") == "required" {
			obj["mode"] = json.RawMessage(`"auto"`)
		} else if inner := obj["allowed_tools"]; inner != nil { // Chat nests {mode, tools}
			var at map[string]json.RawMessage
			if json.Unmarshal(inner, &at) == nil && stringField(at, "mode") == "required" {
				at["mode"] = json.RawMessage(`"auto"`)
				obj["allowed_tools"], _ = json.Marshal(at)
			}
		}
		req["tool_choice"], _ = json.Marshal(obj)
		return
	}
	req["tool_choice"] = json.RawMessage(`"auto"`) // a named function or custom tool
}

// governs reports whether the proxy runs a call: a function call, with
// no namespace, to a function the client did not declare (Chio's own, or
// one nobody declared, answered as unknown).
func (p *proxyRun) governs(it Item) bool {
	return it.IsFunction() && it.Namespace == "" && !p.client[it.Name]
}

// upstreamError is an upstream's non-2xx answer, relayed as is.
type upstreamError struct {
	status int
	ctype  string
	body   []byte
}

func (e *upstreamError) Error() string { return fmt.Sprintf("upstream answered %d", e.status) }

// roundTrip sends the request upstream and reads the whole answer.
func (p *proxyRun) roundTrip(ctx context.Context) (*turn, error) {
	body, err := json.Marshal(p.req)
	if err != nil {
		return nil, fmt.Errorf("encode the upstream request: %w", err)
	}
	u := p.a.upstream
	target := u.BaseURL.JoinPath(p.api.path())
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build the upstream request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/json")
	if p.stream {
		hreq.Header.Set("Accept", "text/event-stream")
	}
	if u.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+u.APIKey)
	}
	resp, err := u.Client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_unavailable",
			Message: fmt.Sprintf("round %d: the upstream model API did not answer: %v", p.rep.Rounds, redactURLError(err))}
	}
	defer resp.Body.Close()
	resp.Body = http.MaxBytesReader(nil, resp.Body, MaxProxyBodyBytes)
	tooLarge := func(what string, max int) error {
		return &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_too_large",
			Message: fmt.Sprintf("round %d: the upstream %s is over %d bytes, the proxy's bound: nothing of it is relayed", p.rep.Rounds, what, max)}
	}
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
		// The upstream refused the operator's key: not the client's
		// fault, and its message may quote part of the key.
		return nil, &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_auth",
			Message: fmt.Sprintf("round %d: the upstream model API refused the proxy's own credentials (%d): the operator's key (--openai-key-file or $%s) is wrong or lacks access", p.rep.Rounds, resp.StatusCode, "OPENAI_API_KEY")}
	}
	if resp.StatusCode/100 != 2 {
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxUpstreamErrorBytes+1))
		switch {
		case len(b) > MaxUpstreamErrorBytes:
			return nil, tooLarge(fmt.Sprintf("error answer (status %d)", resp.StatusCode), MaxUpstreamErrorBytes)
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_unavailable",
				Message: fmt.Sprintf("round %d: the upstream answered %d and its body could not be read: %v", p.rep.Rounds, resp.StatusCode, err)}
		}
		return nil, &upstreamError{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: b}
	}
	var t *turn
	if p.stream && isEventStream(resp.Header.Get("Content-Type")) {
		t, err = p.readStream(resp)
	} else {
		var b []byte
		if b, err = io.ReadAll(resp.Body); err == nil {
			t, err = p.api.parse(b)
		}
		if err == nil && p.stream {
			err = errors.New("asked for a stream, the upstream answered " + resp.Header.Get("Content-Type"))
		}
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge("answer", MaxProxyBodyBytes)
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_invalid",
			Message: fmt.Sprintf("round %d: the upstream answer is unusable: %v", p.rep.Rounds, err)}
	}
	return t, nil
}

// redactURLError drops the URL from a transport error: it may hold
// credentials in its user info.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func isEventStream(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

// readStream reads a round's events to the end. An error event from the
// upstream fails the round: the client's stream has not started, so it
// gets an error answer instead.
func (p *proxyRun) readStream(resp *http.Response) (*turn, error) {
	dec := ssestream.NewDecoder(resp)
	var events []ssestream.Event
	for dec.Next() {
		ev := dec.Event()
		data := bytes.TrimSpace(ev.Data)
		if ev.Type == "error" || bytes.HasPrefix(data, []byte(`{"error"`)) {
			return nil, fmt.Errorf("the upstream stream failed: %s", data)
		}
		events = append(events, ssestream.Event{Type: ev.Type, Data: data})
	}
	if err := dec.Err(); err != nil {
		return nil, fmt.Errorf("read the upstream stream: %w", err)
	}
	return p.api.parseStream(events)
}

// fail answers an error: an upstream's own error relayed as is but for
// the operator's credentials, which are scrubbed from it, or an
// OpenAI-style error carrying the calls run so far (its message, which
// may quote the upstream, scrubbed too).
func (p *proxyRun) fail(c echo.Context, err error) error {
	p.rep.setHeaders(c.Response().Header())
	if len(p.rep.Calls) > 0 {
		// Tools have run: a client retrying the request would run them
		// again (the official clients retry 429 and 5xx unless told not to).
		c.Response().Header().Set("X-Should-Retry", "false")
	}
	var ue *upstreamError
	if errors.As(err, &ue) {
		ct := ue.ctype
		if ct == "" {
			ct = echo.MIMEApplicationJSON
		}
		return c.Blob(ue.status, ct, p.a.upstream.scrub(ue.body))
	}
	var werr *Error
	if !errors.As(err, &werr) {
		if errors.Is(err, context.Canceled) {
			return nil // nobody to answer
		}
		werr = &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "proxy_error", Message: err.Error()}
	}
	if len(p.rep.Calls) > 0 {
		werr.Extra = p.rep
	}
	werr.Message = p.a.upstream.scrubString(werr.Message)
	p.a.log.Warn("openai proxy: request failed", "code", werr.Code, "rounds", p.rep.Rounds, "calls", len(p.rep.Calls), "err", werr.Message)
	return writeError(c, werr)
}

// answer sends the final turn to the client, the operator's credentials
// scrubbed from it.
func (p *proxyRun) answer(c echo.Context, t *turn, deferred map[int]bool) error {
	body, events, err := p.api.final(t, deferred, p.rep)
	if err != nil {
		return p.fail(c, &Error{Status: http.StatusBadGateway, Type: "server_error", Code: "upstream_invalid",
			Message: fmt.Sprintf("round %d: %v", p.rep.Rounds, err)})
	}
	h := c.Response().Header()
	p.rep.setHeaders(h)
	if !p.stream {
		return c.JSONBlob(http.StatusOK, p.a.upstream.scrub(body))
	}
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Response().WriteHeader(http.StatusOK)
	w := c.Response()
	for _, ev := range events {
		var buf bytes.Buffer
		if ev.Type != "" {
			fmt.Fprintf(&buf, "event: %s\n", ev.Type)
		}
		// An event's data may span lines (SSE joins data: lines with
		// \n); each line goes back as its own data: line.
		for _, line := range bytes.Split(p.a.upstream.scrub(ev.Data), []byte("\n")) {
			fmt.Fprintf(&buf, "data: %s\n", line)
		}
		buf.WriteByte('\n')
		if _, err := w.Write(buf.Bytes()); err != nil {
			return nil // the client went away
		}
		w.Flush()
	}
	return nil
}

// readBodyMax reads at most max bytes of a request body.
func readBodyMax(r *http.Request, max int64) ([]byte, *Error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge) || int64(len(body)) > max:
		return nil, &Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "body_too_large",
			Message: fmt.Sprintf("the body is over %d bytes", max)}
	case err != nil:
		return nil, invalid("invalid_body", "", "read the body: %v", err)
	}
	return body, nil
}

// addGoverned checks the request's tools ("tools": an array of objects,
// each named by nameOf) and appends the governed functions bs to them in
// format f. A client tool named like a governed function is refused: a
// call to that name could not be told apart. It answers the client's
// tool names.
func addGoverned(req map[string]json.RawMessage, bs []*Binding, f Format, nameOf func(map[string]json.RawMessage) string) (map[string]bool, *Error) {
	var tools []json.RawMessage
	if raw, ok := req["tools"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &tools); err != nil {
			return nil, invalid("invalid_type", "tools", "tools must be an array of tool objects")
		}
	}
	governed := make(map[string]bool, len(bs))
	for _, b := range bs {
		governed[b.Function] = true
	}
	names := map[string]bool{}
	defer func() {
		// A turn that mixes the client's calls with governed ones cannot be
		// finished here (see run): unless the client asked otherwise, one
		// call per turn keeps the two apart.
		if len(names) > 0 && len(bs) > 0 {
			if _, set := req["parallel_tool_calls"]; !set {
				req["parallel_tool_calls"] = json.RawMessage("false")
			}
		}
	}()
	for i, raw := range tools {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
			return nil, invalid("invalid_type", fmt.Sprintf("tools[%d]", i), "tools[%d] must be an object", i)
		}
		n := nameOf(obj)
		if n == "" {
			continue
		}
		if governed[n] {
			return nil, invalid("tool_name_conflict", fmt.Sprintf("tools[%d]", i),
				"tools[%d] is named %q, like a governed function this proxy adds: rename the client's tool", i, n)
		}
		names[n] = true
	}
	if len(bs) == 0 {
		return names, nil
	}
	for _, b := range bs {
		raw, err := json.Marshal(definition(b, f))
		if err != nil {
			return nil, &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "proxy_error", Message: "encode a function definition: " + err.Error()}
		}
		tools = append(tools, raw)
	}
	raw, err := json.Marshal(tools)
	if err != nil {
		return nil, &Error{Status: http.StatusInternalServerError, Type: "server_error", Code: "proxy_error", Message: "encode tools: " + err.Error()}
	}
	req["tools"] = raw
	return names, nil
}

// stringField reads a string member of obj ("" when absent or not a string).
func stringField(obj map[string]json.RawMessage, key string) string {
	var s string
	if raw, ok := obj[key]; ok {
		_ = json.Unmarshal(raw, &s)
	}
	return s
}

// heldPositions are the API positions (see turnCall.pos) of the calls in
// deferred.
func heldPositions(t *turn, deferred map[int]bool) map[int]bool {
	held := make(map[int]bool, len(deferred))
	for i := range deferred {
		held[t.calls[i].pos] = true
	}
	return held
}

// editJSON decodes an object (an upstream's, read with strictjson),
// lets edit change it and encodes it again (numbers kept exact, no HTML
// escaping).
func editJSON(raw []byte, edit func(map[string]any)) ([]byte, error) {
	v, err := strictjson.Parse(raw)
	obj, ok := v.(map[string]any)
	if err != nil || !ok {
		return nil, fmt.Errorf("not a JSON object: %v", errOrNull(err))
	}
	edit(obj)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func anySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func asObject(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// intField reads an integer member of an object decoded with UseNumber.
func intField(obj map[string]any, key string) (int, bool) {
	n, ok := obj[key].(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return int(i), err == nil
}

// shifted is pos renumbered after the positions in held are removed.
func shifted(pos int, held map[int]bool) int {
	n := pos
	for h := range held {
		if h < pos {
			n--
		}
	}
	return n
}

// dropPositions removes from the array obj[key] the entries whose
// position is held: the one posOf reads from the entry, or its index in
// the array when posOf is nil. With renumber, kept entries get their
// shifted position under "index". An array left empty is removed.
func dropPositions(obj map[string]any, key string, held map[int]bool, posOf func(map[string]any) (int, bool), renumber bool) {
	list, ok := obj[key].([]any)
	if !ok {
		return
	}
	kept := []any{}
	for i, v := range list {
		e := asObject(v)
		pos := i
		if posOf != nil {
			p, ok := posOf(e)
			if !ok {
				kept = append(kept, v)
				continue
			}
			pos = p
		}
		if held[pos] {
			continue
		}
		if renumber && e != nil {
			e["index"] = shifted(pos, held)
		}
		kept = append(kept, v)
	}
	if len(kept) == 0 {
		delete(obj, key)
		return
	}
	obj[key] = kept
}
