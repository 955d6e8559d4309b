package projections

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/projections/authz"
	"github.com/chio-ledger/chio/schemas"
)

// Task list limits.
const (
	DefaultTaskLimit = 50
	MaxTaskLimit     = 200
)

// Error is the JSON body of every error the projection routes answer:
// {"error", "code"}, plus the parameter or the receipt or capability it is
// about when there is one, or the failed proof-of-possession check
// (dpop.Check) of a refused DPoP credential.
type Error struct {
	Error        string `json:"error"`
	Code         string `json:"code"`
	Param        string `json:"param,omitempty"`
	ReceiptID    string `json:"receiptId,omitempty"`
	CapabilityID string `json:"capabilityId,omitempty"`
	Check        string `json:"check,omitempty"`
}

// Error codes.
const (
	CodeInvalidParameter = "invalid_parameter"
	CodeUnauthorized     = "unauthorized"
	CodeTaskNotFound     = "task_not_found"
	CodeLineageNotFound  = "lineage_not_found"
	CodeLineageBroken    = "lineage_chain_broken"
	CodeUnprojectable    = "authorization_context_unprojectable"
	CodeCatchingUp       = "projection_catching_up"
	CodeInternal         = "internal"
)

// Register mounts the projection routes on e. Every route needs a
// credential the authenticator accepts (WithAuthenticator,
// WithServiceToken): none is 401, a refused one 401 (or 503 when the
// revocation or proof replay state is unavailable), before any input is
// read. A capability that can delegate (or whose grant asks for it) is
// accepted only as Authorization: DPoP with a proof of possession for the
// request (readauth); a refused proof's 401 names the check. Each
// caller then reads only what its credential covers (see scope): an
// operator everything, anyone else the tasks, lineage and report rows of
// its own authority path and of the principals its read grants name.
// What a caller may not see answers exactly as what does not exist. Two
// routes are not scoped per tenant: GET /v1/stats/calls counts every
// tenant's calls, so only a reader of every receipt gets it (anyone else
// 403 forbidden), and GET /v1/status names no one's data, so every reader
// does. The handlers write their own JSON errors, so they answer the same whichever
// HTTPErrorHandler e has (in chio up, the ledger's).
func (s *Service) Register(e *echo.Echo) {
	mw := []echo.MiddlewareFunc{readauth.Middleware(s.cfg.auth, deny), readauth.Require("the projection API", deny)}
	e.GET("/v1/tasks", s.listTasks, mw...)
	e.GET("/v1/tasks/:id", s.getTask, mw...)
	e.GET("/v1/tasks/:id/timeline", s.getTimeline, mw...)
	e.GET("/v1/lineage/:capability_id", s.getLineage, mw...)
	e.GET("/v1/lineage/:capability_id/chain", s.getChain, mw...)
	e.GET("/v1/reports/authorization-context", s.authorizationContext, mw...)
	e.GET("/v1/stats/calls", s.callStats, mw...)
	e.GET("/v1/status", s.getStatus, mw...)
}

// deny answers a refused credential in the projections' JSON form.
func deny(c echo.Context, e *readauth.Error) error {
	if e.Status == http.StatusServiceUnavailable {
		c.Response().Header().Set("Retry-After", "1")
	}
	return reply(c, e.Status, Error{Error: e.Message, Code: e.Code, Check: string(e.Check)})
}

// readerScope is the scope of the request's reader over v.
func readerScope(c echo.Context, v view) *scope { return newScope(readauth.From(c), v) }

// NewServer returns an Echo server with a JSON error handler, panic
// recovery and the projection routes: what `chio projections` serves.
func NewServer(s *Service) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = errorHandler(s.log)
	e.Use(middleware.Recover())
	s.Register(e)
	return e
}

// errorHandler renders Echo's own errors (unknown route, wrong method, a
// recovered panic) as {"error", "code"}.
func errorHandler(log *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, body := http.StatusInternalServerError, Error{Error: "internal error", Code: CodeInternal}
		var he *echo.HTTPError
		if errors.As(err, &he) {
			status = he.Code
			body = Error{Error: fmt.Sprint(he.Message), Code: strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")}
		} else {
			log.Error("request failed", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
		}
		if err := c.JSON(status, body); err != nil {
			log.Debug("write error response", "err", err)
		}
	}
}

func reply(c echo.Context, status int, body Error) error { return c.JSON(status, body) }

func badParam(c echo.Context, param, format string, args ...any) error {
	return reply(c, http.StatusBadRequest, Error{Error: fmt.Sprintf(format, args...), Code: CodeInvalidParameter, Param: param})
}

func (s *Service) internal(c echo.Context, err error) error {
	s.log.Error("projection request failed", "path", c.Request().URL.Path, "err", err)
	return reply(c, http.StatusInternalServerError, Error{Error: "internal error", Code: CodeInternal})
}

// query checks the query string: only the allowed parameters, each at
// most once. It answers the 400 itself and returns ok=false when the
// query is refused.
func query(c echo.Context, allowed ...string) (url.Values, bool, error) {
	raw := c.Request().URL.RawQuery
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, false, badParam(c, malformedParam(raw), "malformed query string: %v", err)
	}
	for k, v := range q {
		known := false
		for _, a := range allowed {
			known = known || k == a
		}
		if !known {
			return nil, false, badParam(c, k, "unknown query parameter %q", abbreviate(k))
		}
		if len(v) > 1 {
			return nil, false, badParam(c, k, "%s is given more than once", k)
		}
	}
	return q, true, nil
}

// malformedParam names the parameter of the first pair of a query string
// that does not unescape.
func malformedParam(raw string) string {
	for pair := range strings.SplitSeq(raw, "&") {
		k, v, _ := strings.Cut(pair, "=")
		key, kerr := url.QueryUnescape(k)
		if kerr != nil {
			return abbreviate(k)
		}
		if _, verr := url.QueryUnescape(v); verr != nil || strings.Contains(k, ";") {
			return abbreviate(key)
		}
	}
	return ""
}

// pathID returns a path parameter, unescaped (Echo matches on the escaped
// path, so an id holding '/' arrives as %2F), if it is a valid name.
func pathID(c echo.Context, name string) (string, bool, error) {
	v, err := url.PathUnescape(c.Param(name))
	if err != nil || !schemas.ValidName(v) {
		return "", false, badParam(c, name, "%s must be 1–256 bytes of UTF-8 without control characters", name)
	}
	return v, true, nil
}

// nameParam reads an optional name parameter (an id, a tool server, a
// tool name): present means valid.
func nameParam(c echo.Context, q url.Values, name string) (string, bool, error) {
	if _, ok := q[name]; !ok {
		return "", true, nil
	}
	v := q.Get(name)
	if !schemas.ValidName(v) {
		return "", false, badParam(c, name, "%s must be 1–256 bytes of UTF-8 without control characters", name)
	}
	return v, true, nil
}

// intParam reads an optional decimal parameter within [lo, hi].
func intParam(c echo.Context, q url.Values, name string, def, lo, hi uint64) (uint64, bool, error) {
	if _, ok := q[name]; !ok {
		return def, true, nil
	}
	v := q.Get(name)
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, false, badParam(c, name, "%s must be a non-negative integer, got %q", name, abbreviate(v))
	}
	if n < lo || n > hi {
		return 0, false, badParam(c, name, "%s must be between %d and %d, got %d", name, lo, hi, n)
	}
	return n, true, nil
}

func abbreviate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// getTask serves GET /v1/tasks/{id}.
func (s *Service) getTask(c echo.Context) error {
	snap := s.store.db.NewSnapshot()
	defer snap.Close()
	id, h, answered, err := s.visibleTask(c, snap)
	if answered {
		return err
	}
	t, err := buildTask(snap, id, h)
	if err != nil {
		return s.internal(c, err)
	}
	return c.JSON(http.StatusOK, t)
}

// visibleTask reads the head of the task the request's path names, from
// v, as the request's reader may see it. answered is true when the answer
// is already written (a bad query or id, a task not known or not the
// reader's to see, a failure); err is then what the handler returns.
func (s *Service) visibleTask(c echo.Context, v view) (id string, h *taskHead, answered bool, err error) {
	if _, ok, err := query(c); !ok {
		return "", nil, true, err
	}
	id, ok, err := pathID(c, "id")
	if !ok {
		return "", nil, true, err
	}
	h, err = loadHead(v, id)
	visible := err == nil
	if visible {
		visible, err = readerScope(c, v).task(h.Owner.Subject)
	}
	switch {
	case errors.Is(err, errNotFound) || (err == nil && !visible):
		// A task the reader may not see is answered as one that does not
		// exist: its existence is not the reader's to learn.
		return "", nil, true, reply(c, http.StatusNotFound, Error{Error: fmt.Sprintf("task %s is not known", id), Code: CodeTaskNotFound})
	case err != nil:
		return "", nil, true, s.internal(c, err)
	}
	return id, h, false, nil
}

// TaskList is the body of GET /v1/tasks. Tasks are in creation order
// (the stream order of their created commits), only those the reader may
// see; NextCursor, present when more such tasks match, continues after
// the page's last task.
type TaskList struct {
	Tasks      []*Task `json:"tasks"`
	NextCursor *string `json:"nextCursor"`
}

// listTasks serves GET /v1/tasks?contextId=&state=&cursor=&limit=.
func (s *Service) listTasks(c echo.Context) error {
	q, ok, err := query(c, "contextId", "state", "cursor", "limit")
	if !ok {
		return err
	}
	contextID, ok, err := nameParam(c, q, "contextId")
	if !ok {
		return err
	}
	var state schemas.TaskState
	if _, given := q["state"]; given {
		if state, ok = parseTaskState(q.Get("state")); !ok {
			return badParam(c, "state", "state %q is not a task state (e.g. working or TASK_STATE_WORKING)", abbreviate(q.Get("state")))
		}
	}
	var after uint64
	if _, given := q["cursor"]; given {
		b, err := base64.RawURLEncoding.DecodeString(q.Get("cursor"))
		if err != nil || len(b) != 8 {
			return badParam(c, "cursor", "cursor was not issued by this API")
		}
		after = binary.BigEndian.Uint64(b)
	}
	limit, ok, err := intParam(c, q, "limit", DefaultTaskLimit, 1, MaxTaskLimit)
	if !ok {
		return err
	}
	snap := s.store.db.NewSnapshot()
	defer snap.Close()
	var keep func(id string) (bool, error)
	if sc := readerScope(c, snap); !sc.all() {
		keep = func(id string) (bool, error) {
			h, err := loadHead(snap, id)
			if err != nil {
				return false, err
			}
			return sc.task(h.Owner.Subject)
		}
	}
	page, more, err := listTaskIDs(snap, contextID, state, after, int(limit), keep)
	if err != nil {
		return s.internal(c, err)
	}
	resp := TaskList{Tasks: make([]*Task, 0, len(page))}
	for _, ref := range page {
		t, err := loadTask(snap, ref.id)
		if err != nil {
			return s.internal(c, err)
		}
		resp.Tasks = append(resp.Tasks, t)
	}
	if more {
		cur := base64.RawURLEncoding.EncodeToString(encodeU64(page[len(page)-1].seq))
		resp.NextCursor = &cur
	}
	return c.JSON(http.StatusOK, resp)
}

type taskRef struct {
	seq uint64
	id  string
}

// listTaskIDs returns up to limit tasks created after sequence after, in
// creation order, from the context index when a context is given; the
// indexes hold each task's state, so a state filter reads no task. keep,
// when set, decides which of the matching tasks count (the others are
// skipped as if absent, so the page, its cursor and "more" are those of
// the kept tasks).
func listTaskIDs(v view, contextID string, state schemas.TaskState, after uint64, limit int, keep func(id string) (bool, error)) ([]taskRef, bool, error) {
	prefix := []byte{prefixTaskOrder}
	if contextID != "" {
		prefix = appendStr([]byte{prefixTaskByCtx}, contextID)
	}
	if after == ^uint64(0) {
		return nil, false, nil
	}
	it, err := v.NewIter(&pebble.IterOptions{LowerBound: appendU64(prefix, after+1), UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, false, fmt.Errorf("list tasks: %w", err)
	}
	defer it.Close()
	var out []taskRef
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[len(prefix):]
		if len(k) < 8 {
			return nil, false, errors.New("list tasks: corrupt index key")
		}
		if state != "" {
			val, err := it.ValueAndErr()
			if err != nil {
				return nil, false, err
			}
			if string(val) != string(state) {
				continue
			}
		}
		id := string(k[8:])
		if keep != nil {
			ok, err := keep(id)
			if err != nil {
				return nil, false, fmt.Errorf("list tasks: %w", err)
			}
			if !ok {
				continue
			}
		}
		if len(out) == limit {
			return out, true, nil
		}
		out = append(out, taskRef{seq: binary.BigEndian.Uint64(k), id: id})
	}
	return out, false, it.Error()
}

// getLineage serves GET /v1/lineage/{capability_id}.
func (s *Service) getLineage(c echo.Context) error {
	if _, ok, err := query(c); !ok {
		return err
	}
	id, ok, err := pathID(c, "capability_id")
	if !ok {
		return err
	}
	snap := s.store.db.NewSnapshot()
	defer snap.Close()
	raw, err := getFrom(snap, append([]byte{prefixLineage}, id...))
	visible := err == nil
	if visible {
		visible, err = readerScope(c, snap).lineage(id)
	}
	switch {
	case errors.Is(err, errNotFound) || (err == nil && !visible):
		return lineageNotFound(c, id)
	case err != nil:
		return s.internal(c, err)
	}
	return c.JSONBlob(http.StatusOK, raw)
}

// lineageNotFound answers a capability the projection holds no lineage
// of, or whose lineage the reader may not see: the same answer.
func lineageNotFound(c echo.Context, id string) error {
	return reply(c, http.StatusNotFound, Error{Error: fmt.Sprintf("no lineage record for capability %s", id),
		Code: CodeLineageNotFound, CapabilityID: id})
}

// LineageChain is the body of GET /v1/lineage/{capability_id}/chain.
type LineageChain struct {
	CapabilityID string `json:"capabilityId"`
	// Chain is the delegation chain, root first, ending with the
	// capability asked for.
	Chain []json.RawMessage `json:"chain"`
}

// getChain serves GET /v1/lineage/{capability_id}/chain by following
// parent_capability_id to the root. A parent the projection does not hold
// is a broken chain, answered as a server error naming it: every record
// arrives with its whole chain, so a missing one means lost state.
func (s *Service) getChain(c echo.Context) error {
	if _, ok, err := query(c); !ok {
		return err
	}
	id, ok, err := pathID(c, "capability_id")
	if !ok {
		return err
	}
	snap := s.store.db.NewSnapshot()
	defer snap.Close()
	// Visibility first: a broken chain is named only to a reader who may
	// see it (one whose own chain it is, or an operator); to anyone else a
	// chain whose path cannot be told is not there.
	visible, err := readerScope(c, snap).lineage(id)
	if err != nil {
		return s.internal(c, err)
	}
	if !visible {
		return lineageNotFound(c, id)
	}
	var chain []json.RawMessage
	seen := map[string]bool{}
	for cur := id; cur != ""; {
		raw, err := getFrom(snap, append([]byte{prefixLineage}, cur...))
		switch {
		case errors.Is(err, errNotFound) && cur == id:
			return lineageNotFound(c, id)
		case errors.Is(err, errNotFound):
			return reply(c, http.StatusInternalServerError, Error{
				Error: fmt.Sprintf("the lineage of %s names parent capability %s, which the projection does not hold", id, cur),
				Code:  CodeLineageBroken, CapabilityID: cur})
		case err != nil:
			return s.internal(c, err)
		}
		var rec schemas.CapabilityLineage
		if err := json.Unmarshal(raw, &rec); err != nil {
			return s.internal(c, fmt.Errorf("lineage %s: %w", cur, err))
		}
		seen[cur] = true
		chain = append(chain, raw)
		if rec.ParentCapabilityID != "" && (seen[rec.ParentCapabilityID] || len(chain) > schemas.MaxDelegationDepth) {
			return reply(c, http.StatusInternalServerError, Error{
				Error: fmt.Sprintf("the lineage of %s loops or exceeds the delegation depth at capability %s", id, rec.ParentCapabilityID),
				Code:  CodeLineageBroken, CapabilityID: rec.ParentCapabilityID})
		}
		cur = rec.ParentCapabilityID
	}
	for i, j := 0, len(chain)-1; i < j; i, j = i+1, j-1 {
		chain[i], chain[j] = chain[j], chain[i]
	}
	return c.JSON(http.StatusOK, LineageChain{CapabilityID: id, Chain: chain})
}

// authorizationContext serves GET /v1/reports/authorization-context.
func (s *Service) authorizationContext(c echo.Context) error {
	q, ok, err := query(c, "capabilityId", "toolServer", "toolName", "since", "until", "authorizationLimit", "groupBy")
	if !ok {
		return err
	}
	var f authz.Filter
	if g, given := q["groupBy"]; given {
		if g[0] != "identity" {
			return badParam(c, "groupBy", "groupBy %q: the report groups by identity only", abbreviate(g[0]))
		}
		f.GroupByIdentity = true
	}
	for _, p := range []struct {
		name string
		dst  *string
	}{{"capabilityId", &f.CapabilityID}, {"toolServer", &f.ToolServer}, {"toolName", &f.ToolName}} {
		if *p.dst, ok, err = nameParam(c, q, p.name); !ok {
			return err
		}
	}
	if f.Since, ok, err = intParam(c, q, "since", 0, 0, ^uint64(0)); !ok {
		return err
	}
	if f.Until, ok, err = intParam(c, q, "until", 0, 0, ^uint64(0)); !ok {
		return err
	}
	if _, given := q["until"]; given && f.Since > f.Until {
		return badParam(c, "since", "since (%d) is after until (%d)", f.Since, f.Until)
	}
	limit, ok, err := intParam(c, q, "authorizationLimit", authz.DefaultLimit, 1, authz.MaxLimit)
	if !ok {
		return err
	}
	f.Limit = int(limit)

	// One snapshot for the receipts and the lineage: the report describes
	// one moment of the projection.
	snap := s.store.db.NewSnapshot()
	defer snap.Close()
	receipts := governedOf(c.Request().Context(), snap, f.CapabilityID)
	if sc := readerScope(c, snap); !sc.all() {
		// Only the reader's subtree's receipts, chosen before the report
		// sees them: another's receipt can neither fail the report nor be
		// counted in it. A capability outside the subtree has no receipts
		// for this reader.
		ok, err := sc.subtree(f.CapabilityID)
		if err != nil {
			return s.internal(c, err)
		}
		if f.CapabilityID != "" && !ok {
			receipts = func(func(*authz.Governed, error) bool) {}
		} else {
			receipts = visibleGoverned(receipts, sc)
		}
	}
	rep, err := authz.BuildGoverned(f, receipts, lineageOf(snap))
	var ue *authz.UnprojectableError
	switch {
	case errors.As(err, &ue) && s.eventsBehind(c.Request().Context()):
		// The receipts and the decisions that carry lineage are folded by
		// separate consumers: a lineage missing while the events consumer
		// is behind is "not yet", not "never". Ask the caller to retry.
		c.Response().Header().Set("Retry-After", "1")
		return reply(c, http.StatusServiceUnavailable, Error{Error: "the projection is catching up with the event stream: " + err.Error(),
			Code: CodeCatchingUp, ReceiptID: ue.ReceiptID})
	case errors.As(err, &ue):
		return reply(c, http.StatusUnprocessableEntity, Error{Error: err.Error(), Code: CodeUnprojectable, ReceiptID: ue.ReceiptID})
	case err != nil:
		return s.internal(c, err)
	}
	return c.JSON(http.StatusOK, rep)
}

// visibleGoverned is the receipts of in that are in sc's subtree: whose
// capability has a stored chain under one of the reader's principals.
// A receipt that names no usable capability, or one without lineage yet,
// is nobody's but an operator's.
func visibleGoverned(in iter.Seq2[*authz.Governed, error], sc *scope) iter.Seq2[*authz.Governed, error] {
	return func(yield func(*authz.Governed, error) bool) {
		for g, err := range in {
			if err == nil && g != nil {
				var ok bool
				if ok, err = sc.subtree(g.CapabilityID); err == nil && !ok {
					continue
				}
			}
			if !yield(g, err) || err != nil {
				return
			}
		}
	}
}

// lineageOf reads lineage records from v.
func lineageOf(v view) authz.LineageFunc {
	return func(id string) (*schemas.CapabilityLineage, bool, error) {
		raw, err := getFrom(v, append([]byte{prefixLineage}, id...))
		if errors.Is(err, errNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		var rec schemas.CapabilityLineage
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, false, fmt.Errorf("lineage %s: %w", id, err)
		}
		return &rec, true, nil
	}
}

// governedOf yields what the receipt fold recorded of each governed
// receipt (authz.Examine), in log (leaf index) order: all of them, or, for
// a capability, those indexed under it merged with those that name no
// usable capability (which might be its own: they fail the report closed
// rather than go missing from it). Receipts that are not governed have no
// record and cost nothing here.
//
// A producer goroutine reads and decodes batches ahead while the report
// consumes the previous one. The iterator returns only after the producer
// has stopped: the caller may close the snapshot then.
func governedOf(ctx context.Context, v view, capabilityID string) iter.Seq2[*authz.Governed, error] {
	return func(yield func(*authz.Governed, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		batches := make(chan decodedBatch, 2)
		var wg sync.WaitGroup
		wg.Go(func() {
			defer close(batches)
			produceGoverned(ctx, v, capabilityID, batches)
		})
		defer func() {
			cancel()
			for range batches { // let the producer see the cancel and finish
			}
			wg.Wait()
		}()
		for b := range batches {
			for _, g := range b.governed {
				if !yield(g, nil) {
					return
				}
			}
			if b.err != nil {
				yield(nil, b.err)
				return
			}
		}
	}
}

// decodedBatch is a run of decoded records, in order, and the error that
// ended the run, if any.
type decodedBatch struct {
	governed []*authz.Governed
	err      error
}

// decodeBatchSize is how many records the producer decodes at a time.
const decodeBatchSize = 256

// produceGoverned scans the governed records and sends them decoded, in
// batches, until the scan ends, a record fails or ctx ends.
func produceGoverned(ctx context.Context, v view, capabilityID string, out chan<- decodedBatch) {
	type raw struct {
		id  string
		rec []byte
	}
	pending := make([]raw, 0, decodeBatchSize)
	send := func(scanErr error) bool {
		b := decodedBatch{governed: make([]*authz.Governed, len(pending))}
		errs := make([]error, len(pending))
		parallel(len(pending), func(i int) { b.governed[i], errs[i] = decodeGoverned(pending[i].id, pending[i].rec) })
		for i, err := range errs {
			if err != nil {
				b.governed, b.err = b.governed[:i], err
				break
			}
		}
		if b.err == nil {
			b.err = scanErr
		}
		pending = pending[:0]
		select {
		case out <- b:
			return b.err == nil
		case <-ctx.Done():
			return false
		}
	}
	add := func(id string, rec []byte) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		pending = append(pending, raw{id, bytes.Clone(rec)})
		if len(pending) < decodeBatchSize {
			return true, nil
		}
		return send(nil), nil
	}
	err := scanGoverned(v, capabilityID, add)
	if len(pending) > 0 || err != nil {
		send(err)
	}
}

// scanGoverned calls add with each governed record in leaf order (see
// governedOf).
func scanGoverned(v view, capabilityID string, add func(id string, rec []byte) (bool, error)) error {
	if capabilityID == "" {
		return scanUntil(v, []byte{prefixGoverned}, func(k, val []byte) (bool, error) {
			return add(string(k[9:]), val)
		})
	}
	// Merge two key-ordered scans on (leaf, id).
	a, err1 := newCursor(v, appendStr([]byte{prefixReceiptByCap}, capabilityID))
	b, err2 := newCursor(v, []byte{prefixUnattributed})
	defer a.close()
	defer b.close()
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	for a.valid() || b.valid() {
		cur := a
		if !a.valid() || (b.valid() && string(b.suffix()) < string(a.suffix())) {
			cur = b
		}
		key := append([]byte{prefixGoverned}, cur.suffix()...)
		rec, err := getFrom(v, key)
		switch {
		case errors.Is(err, errNotFound): // not governed
		case err != nil:
			return fmt.Errorf("receipt %s: %w", key[9:], err)
		default:
			if more, err := add(string(key[9:]), rec); err != nil || !more {
				return err
			}
		}
		cur.next()
	}
	return errors.Join(a.it.Error(), b.it.Error())
}

// decodeGoverned decodes one governed record.
func decodeGoverned(id string, val []byte) (*authz.Governed, error) {
	var g authz.Governed
	if err := json.Unmarshal(val, &g); err != nil {
		return nil, fmt.Errorf("governed record of receipt %s: %w", id, err)
	}
	return &g, nil
}

// cursor walks the (leaf, id) suffixes of one index prefix.
type cursor struct {
	it     *pebble.Iterator
	prefix int
}

func newCursor(v view, prefix []byte) (*cursor, error) {
	it, err := v.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return &cursor{}, fmt.Errorf("open iterator: %w", err)
	}
	it.First()
	return &cursor{it: it, prefix: len(prefix)}, nil
}

func (c *cursor) valid() bool    { return c.it != nil && c.it.Valid() }
func (c *cursor) suffix() []byte { return c.it.Key()[c.prefix:] }
func (c *cursor) next()          { c.it.Next() }
func (c *cursor) close() {
	if c.it != nil {
		_ = c.it.Close()
	}
}

// scanUntil is scan whose callback may stop early.
func scanUntil(src iterSource, prefix []byte, fn func(k, v []byte) (bool, error)) error {
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("open iterator: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return err
		}
		if more, err := fn(it.Key(), v); err != nil || !more {
			return err
		}
	}
	return it.Error()
}

// eventsBehind reports whether the events consumer has not yet folded its
// stream's end (false if that cannot be told quickly).
func (s *Service) eventsBehind(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	lags, err := s.Lag(ctx)
	if err != nil {
		return false
	}
	for _, l := range lags {
		if l.Stream == schemas.EventsStream && l.Behind > 0 {
			return true
		}
	}
	return false
}
