// Package api is the ledger's HTTP read API (Echo): the C2SP tlog-tiles
// endpoints under /log, and Chio's receipt, proof, checkpoint and query
// endpoints under /v1. Every response is built from committed, checkpointed
// state; bad paths, sizes and ids get a 4xx with a JSON error body.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/ledger/scitt"
	"github.com/chio-ledger/chio/ledger/tlogproof"
	"github.com/chio-ledger/chio/schemas"
)

// Keys is what /v1/log/keys publishes for offline verifiers.
type Keys struct {
	Origin         string `json:"origin"`
	CheckpointVKey string `json:"checkpoint_vkey"`
	KernelKey      string `json:"kernel_key"`
}

// Handler serves the read API over one store.
type Handler struct {
	store *logstore.Store
	keys  Keys
	log   *slog.Logger
	auth  *readauth.Authenticator
	// cosigned, when set, gives the latest checkpoint its witnesses
	// cosigned (nil when there is none yet).
	cosigned func(context.Context) ([]byte, error)
	logKey   note.Verifier

	wmu    sync.Mutex
	wcache witnessedCache
	// serving, when set, says why no checkpoint or proof may be served
	// now (WithServing).
	serving func() error
	scitt   *scitt.Signers
	heavy   heavyReads // queues each principal's queries and bundle reads
}

// witnessedCache is the last checked witnessed checkpoint, reused for a
// moment so that a burst of proof requests reads the bucket once.
type witnessedCache struct {
	raw  []byte // as the bucket held it
	head uint64 // the local size it was checked against
	at   time.Time
	w    *witnessed
	err  error
}

// Option configures New.
type Option func(*Handler)

// WithAuthenticator sets who may read receipts. Without one, every
// private path answers 401: only the public half of the log is served.
func WithAuthenticator(a *readauth.Authenticator) Option { return func(h *Handler) { h.auth = a } }

// WithCosigned serves, at /log/checkpoint, the checkpoint get returns
// (the log's latest one cosigned by its witness quorum) instead of the
// latest one, once one exists: the checkpoint served never goes back to
// one the witnesses did not see. Proofs are made at its size when it holds
// the leaf. It is checked before it is served: signed by this log's key,
// and consistent with this instance's own tree.
func WithCosigned(get func(context.Context) ([]byte, error)) Option {
	return func(h *Handler) { h.cosigned = get }
}

// WithServing makes every checkpoint, tile, statement and proof path
// answer 503 while serving returns an error (the ledger's HeadErr: its
// store is below, or does not extend, the checkpoint it published), so a
// log rebuilding from its stream shows no smaller tree than one it
// showed before. Receipts and queries are still served.
func WithServing(serving func() error) Option { return func(h *Handler) { h.serving = serving } }

// WithSCITT serves /v1/receipts/{id}/scitt, signed with s: only a process
// that holds the ledger's keys can.
func WithSCITT(s scitt.Signers) Option { return func(h *Handler) { h.scitt = &s } }

// gate is the middleware of WithServing.
func (h *Handler) gate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if h.serving != nil {
			if err := h.serving(); err != nil {
				return fail(http.StatusServiceUnavailable, "log_not_serving", "%v", err)
			}
		}
		return next(c)
	}
}

// New returns a handler.
func New(store *logstore.Store, keys Keys, logger *slog.Logger, opts ...Option) *Handler {
	if logger == nil {
		logger = slog.Default()
	}
	h := &Handler{store: store, keys: keys, log: logger, auth: readauth.New(), heavy: heavyReads{max: DefaultHeavyReads}}
	if v, err := note.NewVerifier(keys.CheckpointVKey); err == nil {
		h.logKey = v
	}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Register adds the routes to e.
//
// Public, for witnesses and monitors: the checkpoint, hash tiles,
// consistency proofs, the checkpoint statement and the keys. They commit
// to the receipts without revealing them: a leaf hash covers a receipt's
// Ed25519 signature and random id bits, which no outsider can predict, so
// it confirms no guess about the receipt's content.
//
// Private: receipts, their proofs and queries, to readers whose scope
// covers them (readauth); entry bundles, which hold every tenant's
// receipts, to readers of every receipt. A capability that can delegate
// (or whose grant asks for it) reads only as Authorization: DPoP with a
// proof of possession for the request (readauth); a refused proof is a
// 401 whose body's check names the failed check.
func (h *Handler) Register(e *echo.Echo) {
	e.GET("/log/checkpoint", h.checkpoint, h.gate)
	e.GET("/log/tile/:level/*", h.tile, h.gate)
	e.GET("/v1/log/keys", h.logKeys)
	e.GET("/v1/log/consistency-proof", h.consistency, h.gate)
	e.GET("/v1/checkpoints/latest", h.latestStatement, h.gate)
	deny := func(_ echo.Context, e *readauth.Error) error {
		return &echo.HTTPError{Code: e.Status, Message: Error{Error: e.Message, Code: e.Code, Check: string(e.Check)}}
	}
	auth := readauth.Middleware(h.auth, deny)
	private := func(what string) []echo.MiddlewareFunc {
		return []echo.MiddlewareFunc{auth, readauth.Require(what, deny)}
	}
	e.GET("/log/tile/entries/*", h.entries, append(private("reading entry bundles"), h.gate, h.heavy.middleware, middleware.Gzip())...)
	e.GET("/v1/receipts/query", h.query, append(private("querying receipts"), h.heavy.middleware)...)
	e.GET("/v1/receipts/:id", h.receipt, private("reading receipts")...)
	e.GET("/v1/receipts/:id/inclusion-proof", h.inclusion, append(private("reading receipts"), h.gate)...)
	e.GET("/v1/receipts/:id/tlog-proof", h.tlogProof, append(private("reading receipts"), h.gate)...)
	e.GET("/v1/receipts/:id/scitt", h.scittStatement, append(private("reading receipts"), h.gate)...)
	e.GET("/v1/edge-credentials/:id", h.edgeCredential, private("reading edge credentials")...)
}

// edgeCredential serves GET /v1/edge-credentials/{id}: the
// chio.edge_credential.v1 a receipt's metadata.edge names, as the ledger
// kept it when it folded what that edge signed, for an auditor to check
// against the issuer's key offline. Any reader may read it: it names an
// edge and its public key, no call.
func (h *Handler) edgeCredential(c echo.Context) error {
	id := c.Param("id")
	if !schemas.ValidID(id) {
		return fail(http.StatusBadRequest, "bad_credential_id", "malformed edge credential id")
	}
	raw, err := h.store.EdgeCredential(id)
	if errors.Is(err, logstore.ErrNotFound) {
		return fail(http.StatusNotFound, "edge_credential_not_found", "no edge credential %s signed an event this log folded", id)
	}
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, raw)
}

// NewServer returns an Echo server with the JSON error handler, panic
// recovery and the ledger routes: what `chio ledger` listens with.
func NewServer(h *Handler) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = ErrorHandler(h.log)
	e.Use(middleware.Recover())
	h.Register(e)
	return e
}

// Error is the JSON body of every error response. Check names the failed
// proof-of-possession check (dpop.Check) of a refused DPoP credential.
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	Check string `json:"check,omitempty"`
}

func fail(status int, code, format string, args ...any) error {
	return &echo.HTTPError{Code: status, Message: Error{Error: fmt.Sprintf(format, args...), Code: code}}
}

// ErrorHandler renders every error as {"error": …, "code": …}; Echo's own
// errors (unknown route, wrong method) included.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		status, body := http.StatusInternalServerError, Error{Error: "internal error", Code: "internal"}
		var he *echo.HTTPError
		if errors.As(err, &he) {
			status = he.Code
			switch m := he.Message.(type) {
			case Error:
				body = m
			default:
				body = Error{Error: fmt.Sprint(m), Code: strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")}
			}
		} else {
			logger.Error("request failed", "method", c.Request().Method, "path", c.Request().URL.Path, "err", err)
		}
		if c.Request().Method == http.MethodHead {
			err = c.NoContent(status)
		} else {
			err = c.JSON(status, body)
		}
		if err != nil {
			logger.Debug("write error response", "err", err)
		}
	}
}

func (h *Handler) checkpoint(c echo.Context) error {
	_, note := h.store.Head()
	if note == nil {
		return fail(http.StatusNotFound, "no_checkpoint", "the log has not signed a checkpoint yet")
	}
	w, err := h.witnessedCheckpoint(c.Request().Context())
	if err != nil {
		return err
	}
	if w != nil {
		note = w.note
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=1")
	return c.Blob(http.StatusOK, "text/plain; charset=utf-8", note)
}

const immutable = "public, max-age=31536000, immutable"

func (h *Handler) tile(c echo.Context) error {
	level, err := strconv.ParseUint(c.Param("level"), 10, 8)
	if err != nil || level > logstore.MaxTileLevel || strconv.FormatUint(level, 10) != c.Param("level") {
		return fail(http.StatusBadRequest, "bad_tile_path", "tile level %q is not 0–63", c.Param("level"))
	}
	index, width, err := logstore.ParseTileIndex(strings.Split(c.Param("*"), "/"))
	if err != nil {
		return fail(http.StatusBadRequest, "bad_tile_path", "%v", err)
	}
	t, err := h.store.Tile(uint(level), index, width)
	return h.serveTile(c, t, err)
}

func (h *Handler) entries(c echo.Context) error {
	if !readauth.From(c).AllReceipts() {
		e := readauth.Forbidden("an entry bundle holds every tenant's receipts: reading it")
		return fail(e.Status, e.Code, "%s", e.Message)
	}
	index, width, err := logstore.ParseTileIndex(strings.Split(c.Param("*"), "/"))
	if err != nil {
		return fail(http.StatusBadRequest, "bad_tile_path", "%v", err)
	}
	b, err := h.store.EntryBundle(index, width)
	// Private: a shared cache must not serve it to the next caller.
	return h.serveTileCached(c, b, err, "private, max-age=31536000, immutable")
}

func (h *Handler) serveTile(c echo.Context, b []byte, err error) error {
	return h.serveTileCached(c, b, err, immutable)
}

func (h *Handler) serveTileCached(c echo.Context, b []byte, err error, cache string) error {
	switch {
	case errors.Is(err, logstore.ErrBeyondCheckpoint), errors.Is(err, logstore.ErrNotFound):
		return fail(http.StatusNotFound, "tile_not_found", "no such tile in the checkpointed tree")
	case err != nil:
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, cache)
	return c.Blob(http.StatusOK, echo.MIMEOctetStream, b)
}

func (h *Handler) logKeys(c echo.Context) error { return c.JSON(http.StatusOK, h.keys) }

// leafOf finds the receipt the path names, if the reader may read it. A
// receipt outside the reader's scope is answered exactly as one that is
// not in the log, so a scoped reader learns nothing of others' ids.
func (h *Handler) leafOf(c echo.Context) (string, uint64, error) {
	r := readauth.From(c)
	id := c.Param("id")
	if !schemas.ValidID(id) {
		return "", 0, fail(http.StatusBadRequest, "bad_receipt_id", "malformed receipt id")
	}
	notFound := fail(http.StatusNotFound, "receipt_not_found", "receipt %s is not in the log", id)
	idx, err := h.store.LeafIndex(id)
	if errors.Is(err, logstore.ErrNotFound) {
		return "", 0, notFound
	}
	if err != nil || r.AllReceipts() {
		return id, idx, err
	}
	sum, err := h.store.Summary(idx)
	if err != nil {
		return "", 0, err
	}
	if !r.Sees(sum.Principals) {
		return "", 0, notFound
	}
	return id, idx, nil
}

// receipt serves GET /v1/receipts/{id}: {"receipt": …, "leaf_index": N},
// or, for a stored receipt no reader can decode whole
// (schemas.CheckReceiptReadable), an UnreadableReceipt: 200 as well,
// since the log does hold it and its signed bytes are what an auditor
// investigates (they hash to the leaf its proofs are about).
func (h *Handler) receipt(c echo.Context) error {
	id, idx, err := h.leafOf(c)
	if err != nil {
		return err
	}
	leaf, err := h.store.Entry(idx)
	if err != nil {
		return err
	}
	if err := schemas.CheckReceiptReadable(leaf); err != nil {
		return c.JSON(http.StatusOK, UnreadableReceipt{ReceiptID: id, LeafIndex: idx, Unreadable: err.Error(), Raw: leaf})
	}
	return c.JSON(http.StatusOK, struct {
		Receipt   rawJSON `json:"receipt"`
		LeafIndex uint64  `json:"leaf_index"`
	}{rawJSON(leaf), idx})
}

// UnreadableReceipt is the body of GET /v1/receipts/{id} for a stored
// receipt that cannot be embedded as JSON (nested deeper than
// schemas.MaxReceiptDepth, or not JSON): there is no "receipt" member;
// "unreadable" says why, and "raw" holds the stored bytes (base64), the
// leaf its inclusion proof is about (chio verify accepts this body).
type UnreadableReceipt struct {
	ReceiptID  string `json:"receipt_id"`
	LeafIndex  uint64 `json:"leaf_index"`
	Unreadable string `json:"unreadable"`
	Raw        []byte `json:"raw"`
}

// rawJSON embeds stored canonical bytes as they are.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// InclusionProof is the body of /v1/receipts/{id}/inclusion-proof.
type InclusionProof struct {
	ReceiptID  string   `json:"receipt_id"`
	LeafIndex  uint64   `json:"leaf_index"`
	TreeSize   uint64   `json:"tree_size"`
	LeafHash   string   `json:"leaf_hash"`
	AuditPath  []string `json:"audit_path"`
	Checkpoint string   `json:"checkpoint"`
}

func (h *Handler) inclusion(c echo.Context) error {
	p, err := h.proveInclusion(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, InclusionProof{ReceiptID: p.id, LeafIndex: p.index, TreeSize: p.size,
		LeafHash: schemas.EncodeHash(p.leafHash), AuditPath: encodeHashes(p.path), Checkpoint: string(p.checkpoint)})
}

// tlogProof serves the same proof as a C2SP tlog-proof@v1 text document.
func (h *Handler) tlogProof(c echo.Context) error {
	p, err := h.proveInclusion(c)
	if err != nil {
		return err
	}
	doc := (&tlogproof.Proof{Index: p.index, Path: p.path, Checkpoint: p.checkpoint}).Marshal()
	return c.Blob(http.StatusOK, "text/plain; charset=utf-8", doc)
}

// scittStatement serves the receipt as a SCITT transparent statement: the
// COSE_Sign1 of the receipt by the kernel key, with a COSE Receipt of its
// inclusion (the same proof, against the same checkpoint's root, signed
// with the log key).
func (h *Handler) scittStatement(c echo.Context) error {
	if h.scitt == nil {
		return fail(http.StatusNotFound, "scitt_not_served", "this log API holds no signing keys, so it exports no SCITT statements: ask a ledger instance")
	}
	p, err := h.proveInclusion(c)
	if err != nil {
		return err
	}
	leaf, err := h.store.Entry(p.index)
	if err != nil {
		return storeError(err)
	}
	cp, _, _, err := log.ParseCheckpoint(p.checkpoint, h.logKey.Name(), h.logKey)
	if err != nil {
		return fmt.Errorf("scitt: the checkpoint of size %d: %w", p.size, err)
	}
	root, err := proof.RootFromInclusionProof(rfc6962.DefaultHasher, p.index, p.size, p.leafHash, p.path)
	if err != nil || !bytes.Equal(root, cp.Hash) || cp.Size != p.size {
		// Never sign a root the log's own checkpoint does not.
		return fmt.Errorf("scitt: the proof of %s does not reach the checkpoint's root: %v", p.id, err)
	}
	ts, err := scitt.Export(*h.scitt, leaf, p.id, scitt.Inclusion{Index: p.index, Size: p.size, Path: p.path, Root: cp.Hash})
	if err != nil {
		return err
	}
	return c.Blob(http.StatusOK, scitt.StatementMediaType, ts)
}

// inclusion is one receipt's proof against one signed checkpoint, before
// it is encoded for either endpoint.
type inclusion struct {
	id          string
	index, size uint64
	leafHash    []byte
	path        [][]byte
	checkpoint  []byte
}

func (h *Handler) proveInclusion(c echo.Context) (*inclusion, error) {
	id, idx, err := h.leafOf(c)
	if err != nil {
		return nil, err
	}
	size, note := h.store.Head()
	// Against the cosigned checkpoint when it holds the leaf, so that the
	// proof carries the witnesses' cosignatures too.
	if w, _ := h.witnessedCheckpoint(c.Request().Context()); w != nil && idx < w.size {
		size, note = w.size, w.note
	}
	if ts := c.QueryParam("tree_size"); ts != "" {
		if size, err = parseSize("tree_size", ts); err != nil {
			return nil, err
		}
		if note, err = h.signedAt(c.Request().Context(), size); err != nil {
			return nil, err
		}
	}
	if idx >= size {
		return nil, fail(http.StatusBadRequest, "leaf_not_in_tree", "receipt %s (leaf %d) is not in the tree of size %d", id, idx, size)
	}
	leafHash, path, err := h.store.InclusionProof(idx, size)
	if err != nil {
		return nil, storeError(err)
	}
	return &inclusion{id: id, index: idx, size: size, leafHash: leafHash, path: path, checkpoint: note}, nil
}

// ConsistencyProof is the body of /v1/log/consistency-proof.
type ConsistencyProof struct {
	From  uint64   `json:"from"`
	To    uint64   `json:"to"`
	Proof []string `json:"proof"`
}

func (h *Handler) consistency(c echo.Context) error {
	from, err := parseSize("from", c.QueryParam("from"))
	if err != nil {
		return err
	}
	to, err := parseSize("to", c.QueryParam("to"))
	if err != nil {
		return err
	}
	if from > to {
		return fail(http.StatusBadRequest, "bad_range", "from (%d) is larger than to (%d)", from, to)
	}
	// Only `to` must be a size this log signed. `from` may be any smaller
	// size: an auditor's checkpoint may come from another ledger instance
	// of the same log (active/standby), which signs at other batch
	// boundaries but over the same leaves, so the same roots.
	if _, err := h.signedAt(c.Request().Context(), to); err != nil {
		return err
	}
	p, err := h.store.ConsistencyProof(from, to)
	if err != nil {
		return storeError(err)
	}
	return c.JSON(http.StatusOK, ConsistencyProof{From: from, To: to, Proof: encodeHashes(p)})
}

// storeError maps the store's not-yet-visible errors to a 404: a checkpoint
// is durable an instant before the in-memory head moves to it.
func storeError(err error) error {
	if errors.Is(err, logstore.ErrBeyondCheckpoint) || errors.Is(err, logstore.ErrNotFound) {
		return fail(http.StatusNotFound, "not_yet_visible", "not in the checkpointed tree yet; retry")
	}
	return err
}

// signedAt returns the checkpoint signed for exactly size.
// witnessed is a cosigned checkpoint this instance serves.
type witnessed struct {
	size uint64
	note []byte
}

// errBehind: this instance's tree is smaller than the witnessed
// checkpoint; another replica serves it until this one catches up.
// errWitnessedUnread, errWitnessedBad: the witnessed checkpoint cannot be
// read (and none was checked before), or what is held does not verify or
// is not consistent with this tree. Either way no checkpoint is served
// rather than the head the witnesses may not have seen.
var (
	errWitnessedUnread = fail(http.StatusServiceUnavailable, "witnessed_checkpoint_unavailable", "the witnessed checkpoint cannot be read now; retry")
	errWitnessedBad    = fail(http.StatusServiceUnavailable, "witnessed_checkpoint_invalid", "the witnessed checkpoint held does not verify against this log; see the ledger's log")
)

var errBehind = fail(http.StatusServiceUnavailable, "not_yet_visible", "this replica is behind the witnessed checkpoint; retry")

// witnessedCheckpoint is the cosigned checkpoint to serve: nil when none
// is configured or held yet; errBehind when this instance cannot prove
// against it yet. One the log key does not sign, or that this instance's
// tree contradicts, is never served (and the second is logged: it is a
// fork of this log).
func (h *Handler) witnessedCheckpoint(ctx context.Context) (*witnessed, error) {
	if h.cosigned == nil || h.logKey == nil {
		return nil, nil
	}
	headSize, headNote := h.store.Head()
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if c := h.wcache; c.at.Add(250*time.Millisecond).After(time.Now()) && c.head == headSize {
		return c.w, c.err
	}
	raw, err := h.cosigned(ctx)
	if err != nil {
		h.log.Warn("read the witnessed checkpoint", "err", err)
		if h.wcache.w != nil {
			return h.wcache.w, nil // the last one checked
		}
		return nil, errWitnessedUnread // never the uncosigned head instead
	}
	if c := h.wcache; c.raw != nil && bytes.Equal(c.raw, raw) && c.head == headSize {
		h.wcache.at = time.Now()
		return c.w, c.err
	}
	w, werr := h.checkWitnessed(raw, headSize, headNote)
	h.wcache = witnessedCache{raw: raw, head: headSize, at: time.Now(), w: w, err: werr}
	return w, werr
}

func (h *Handler) checkWitnessed(raw []byte, headSize uint64, headNote []byte) (*witnessed, error) {
	if raw == nil {
		return nil, nil
	}
	cp, _, _, err := log.ParseCheckpoint(raw, h.logKey.Name(), h.logKey)
	if err != nil {
		h.log.Error("the witnessed checkpoint does not verify with this log's key; not served", "err", err)
		return nil, errWitnessedBad
	}
	if cp.Size > headSize {
		return nil, errBehind
	}
	head, _, _, err := log.ParseCheckpoint(headNote, h.logKey.Name(), h.logKey)
	if err != nil {
		return nil, fmt.Errorf("parse this log's checkpoint: %w", err)
	}
	var consistent bool
	if cp.Size == headSize {
		consistent = bytes.Equal(cp.Hash, head.Hash)
	} else if p, err := h.store.ConsistencyProof(cp.Size, headSize); err == nil {
		consistent = proof.VerifyConsistency(rfc6962.DefaultHasher, cp.Size, headSize, p, cp.Hash, head.Hash) == nil
	}
	if !consistent {
		h.log.Error("the witnessed checkpoint is not consistent with this log's tree; not served", "size", cp.Size, "tree_size", headSize)
		return nil, errWitnessedBad
	}
	return &witnessed{size: cp.Size, note: raw}, nil
}

// signedAt is the checkpoint of this log at size: one this instance
// signed, or the witnessed one.
func (h *Handler) signedAt(ctx context.Context, size uint64) ([]byte, error) {
	if w, _ := h.witnessedCheckpoint(ctx); w != nil && w.size == size {
		return w.note, nil
	}
	note, err := h.store.Checkpoint(size)
	if errors.Is(err, logstore.ErrNotFound) {
		return nil, fail(http.StatusNotFound, "no_checkpoint_at_size", "no signed checkpoint for tree size %d", size)
	}
	return note, err
}

func (h *Handler) latestStatement(c echo.Context) error {
	st := h.store.State()
	if st.CheckpointSeq == 0 {
		return fail(http.StatusNotFound, "no_checkpoint", "the log is empty: no checkpoint statement yet")
	}
	raw, err := h.store.Statement(st.CheckpointSeq)
	if err != nil {
		return err
	}
	// Beside the kernel's statement of the latest tree head (its signature
	// covers body alone), the C2SP checkpoint the witnesses cosigned.
	if w, _ := h.witnessedCheckpoint(c.Request().Context()); w != nil {
		// The stored statement is one canonical object: the member goes
		// in before its closing brace, the rest left byte for byte.
		q, err := json.Marshal(string(w.note))
		if err != nil {
			return fmt.Errorf("encode the witnessed checkpoint: %w", err)
		}
		raw = append(append(append(bytes.TrimSuffix(bytes.TrimSpace(raw), []byte("}")), `,"witnessed_checkpoint":`...), q...), '}')
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "public, max-age=1")
	return c.JSONBlob(http.StatusOK, raw)
}

func parseSize(name, v string) (uint64, error) {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fail(http.StatusBadRequest, "bad_parameter", "%s must be a non-negative integer, got %q", name, abbreviate(v))
	}
	return n, nil
}

func encodeHashes(hs [][]byte) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = schemas.EncodeHash(h)
	}
	return out
}

func abbreviate(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
