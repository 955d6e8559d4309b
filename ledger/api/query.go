package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// Query limits, as in Chio's receipt query API.
const (
	defaultLimit = 50
	maxLimit     = 200
)

// QueryResponse is the body of /v1/receipts/query. Cursors are receipt
// sequence numbers (leaf index + 1): a page holds receipts with seq > cursor
// and nextCursor is the seq of its last receipt, present whenever the page
// is full.
//
// A stored receipt that cannot be embedded as JSON
// (schemas.CheckReceiptReadable) is listed in its place as an
// UnreadableItem, never failing the page: {"id", "leaf_index",
// "unreadable"}. Its bytes are served by GET /v1/receipts/{id}.
type QueryResponse struct {
	TotalCount uint64    `json:"totalCount"`
	NextCursor *uint64   `json:"nextCursor"`
	Receipts   []rawJSON `json:"receipts"`
}

// query serves GET /v1/receipts/query. Filters, all optional and ANDed:
// capabilityId, toolServer, toolName, outcome (allow, deny, cancelled or
// incomplete), principal (an authority path principal "p:<64 hex>": the
// receipts made under that path or below it, logstore.Summary.Principals),
// and since and until, the receipt's timestamp in Unix seconds, both
// inclusive. Paging: cursor and limit (1–200, default 50). A reader that
// may not read every receipt gets those of its own principals only; a
// principal filter outside them yields an empty page, not an error.
func (h *Handler) query(c echo.Context) error {
	r := readauth.From(c)
	q := c.QueryParams()
	for k := range q {
		switch k {
		case "capabilityId", "toolServer", "toolName", "outcome", "principal", "since", "until", "cursor", "limit":
		default:
			return fail(http.StatusBadRequest, "bad_parameter", "unknown query parameter %q", abbreviate(k))
		}
	}
	f := logstore.Filter{CapabilityID: q.Get("capabilityId"), ToolServer: q.Get("toolServer"), ToolName: q.Get("toolName")}
	for name, v := range map[string]string{"capabilityId": f.CapabilityID, "toolServer": f.ToolServer, "toolName": f.ToolName} {
		if v != "" && !schemas.ValidName(v) {
			return fail(http.StatusBadRequest, "bad_parameter", "%s must be at most 256 bytes of UTF-8 without control characters", name)
		}
	}
	if p := q.Get("principal"); p != "" {
		if !schemas.ValidPrincipal(p) {
			return fail(http.StatusBadRequest, "bad_parameter", `principal must be an authority path principal "p:<64 hex>"`)
		}
		// On top of a scoped reader's own principals below: what was done
		// under p that the reader may read, and nothing when p lies
		// outside its scope.
		f.Principal = p
	}
	switch o := q.Get("outcome"); o {
	case "", string(schemas.VerdictAllow), string(schemas.VerdictDeny), string(schemas.VerdictCancelled), string(schemas.VerdictIncomplete):
		f.Verdict = o
	default:
		return fail(http.StatusBadRequest, "bad_parameter", "outcome must be allow, deny, cancelled or incomplete")
	}
	if !r.AllReceipts() {
		if len(r.Principals) == 0 {
			return c.JSON(http.StatusOK, QueryResponse{Receipts: []rawJSON{}}) // a scope that covers nothing
		}
		f.Principals = r.Principals // only what was done under the reader's authority paths
	}
	var err error
	opt := func(name string, dst *uint64) {
		if v := q.Get(name); v != "" && err == nil {
			*dst, err = parseSize(name, v)
		}
	}
	var cursor, limit uint64 = 0, defaultLimit
	opt("since", &f.Since)
	opt("until", &f.Until)
	opt("cursor", &cursor)
	opt("limit", &limit)
	if err != nil {
		return err
	}
	if f.Since != 0 && f.Until != 0 && f.Since > f.Until {
		return fail(http.StatusBadRequest, "bad_range", "since is after until")
	}
	limit = min(max(limit, 1), maxLimit)
	page, err := h.store.Query(f, cursor, int(limit))
	if err != nil {
		return err
	}
	resp := QueryResponse{TotalCount: page.Total, Receipts: make([]rawJSON, 0, len(page.Indexes))}
	for _, idx := range page.Indexes {
		leaf, err := h.store.Entry(idx)
		if err != nil {
			return err
		}
		if rerr := schemas.CheckReceiptReadable(leaf); rerr != nil {
			if leaf, err = h.unreadableItem(idx, rerr); err != nil {
				return err
			}
		}
		resp.Receipts = append(resp.Receipts, leaf)
	}
	if page.More {
		next := page.Indexes[len(page.Indexes)-1] + 1
		resp.NextCursor = &next
	}
	return c.JSON(http.StatusOK, resp)
}

// UnreadableItem stands in a query page for a stored receipt that cannot
// be embedded as JSON: "id" is the receipt id (a receipt's own id
// member), "unreadable" why it cannot be embedded.
type UnreadableItem struct {
	ID         string `json:"id"`
	LeafIndex  uint64 `json:"leaf_index"`
	Unreadable string `json:"unreadable"`
}

// unreadableItem is the UnreadableItem of leaf idx, named by the log's own
// index of it (what the query matched), not by the bytes no reader takes.
func (h *Handler) unreadableItem(idx uint64, why error) (rawJSON, error) {
	sum, err := h.store.Summary(idx)
	if err != nil {
		return nil, fmt.Errorf("query: summary of leaf %d: %w", idx, err)
	}
	b, err := json.Marshal(UnreadableItem{ID: sum.ReceiptID, LeafIndex: idx, Unreadable: why.Error()})
	if err != nil {
		return nil, fmt.Errorf("query: encode unreadable leaf %d: %w", idx, err)
	}
	return b, nil
}
