package evidence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/stagedir"
	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/schemas"
)

// Client reads a ledger's (and its projections') HTTP API.
type Client struct {
	// Base is the service's base URL, e.g. http://127.0.0.1:8080.
	Base string
	// HTTP does the requests; its transport may authenticate them (DPoP).
	HTTP *http.Client
	// Token, when set, is sent as Authorization: Bearer.
	Token string
}

// maxBody bounds one response: a page of receipts, each at most 32 MiB,
// is the largest.
const maxBody = 256 << 20

// apiError is a non-2xx answer.
type apiError struct {
	Status int
	Code   string
	Msg    string
}

func (e *apiError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("%s (%s, HTTP %d)", e.Msg, e.Code, e.Status)
	}
	return fmt.Sprintf("HTTP %d", e.Status)
}

// get reads path with query q and returns the body of a 2xx answer, or an
// *apiError.
func (c *Client) get(ctx context.Context, path string, q url.Values) ([]byte, error) {
	u := c.Base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: read the answer: %w", path, err)
	}
	if len(body) > maxBody {
		return nil, fmt.Errorf("GET %s: the answer is larger than %d bytes", path, maxBody)
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{Status: resp.StatusCode}
		var eb struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(body, &eb) == nil {
			e.Code, e.Msg = eb.Code, eb.Error
		}
		return nil, fmt.Errorf("GET %s: %w", path, e)
	}
	return body, nil
}

// Options of an export.
type Options struct {
	Filter Filter
	// PageSize is the query page size (1–200; 0 means 200): at most this
	// many receipts are held in memory.
	PageSize int
	// ConsistencyFrom, when set, is an earlier signed checkpoint of the
	// same log: the package then proves its checkpoint extends it.
	ConsistencyFrom []byte
	// Now is the export time (nil: time.Now).
	Now    func() time.Time
	Logger *slog.Logger
	// Progress, when set, is called after each receipt the query returns
	// with the receipts gone through so far and the query's total count
	// (which may hold receipts past the checkpoint, left out). Cancelling
	// the export's context from it stops the export before the next one.
	Progress func(done, total uint64)
}

// Export writes a package of the receipts the client's credential reads
// and o.Filter selects into dir, which must not exist. It fetches the
// checkpoint first and every proof at that checkpoint's size; receipts
// appended to the log after it are left out. It streams: one query page
// is held at a time.
//
// The package is built in a marked directory beside dir
// (internal/stagedir) and renamed to dir once complete, so dir exists
// only as a finished package: an export that fails or is interrupted
// leaves no dir, and the next export into the same dir removes what an
// interrupted one left.
func Export(ctx context.Context, c *Client, dir string, o Options) (*Query, error) {
	stage, err := stagedir.New(dir, stagedir.Options{Unmarked: true, What: "package"})
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	q, err := export(ctx, c, stage.Path, o)
	if err == nil {
		err = stage.Commit()
	}
	if err != nil {
		return nil, errors.Join(err, stage.Discard())
	}
	return q, nil
}

// exporter is the state of one export.
type exporter struct {
	c   *Client
	o   Options
	log *slog.Logger

	size     uint64
	cpText   string // the checkpoint's signed text, to compare with each proof's
	receipts *hashedFile
	proofs   *hashedFile
	lineage  *hashedFile
	edges    *hashedFile
	// edgesSeen: the edge credential ids the receipts named so far.
	edgesSeen map[string]bool
	q         Query

	lineageReadable bool
	// caps holds what is decided of each capability the query named: no
	// records, which are written to the file as soon as a receipt needs
	// them and not kept. written holds the capability ids of the records
	// in the file. Both grow with the distinct capabilities, not with the
	// receipts or the size of their lineage.
	caps    map[string]capState
	written map[string]bool
}

// capState is what an export remembers of a capability.
type capState struct {
	// excluded: its chain does not descend from the filter's principal.
	excluded bool
	// named: a receipt in the package names it, so its lineage is written
	// (or it is listed as missing).
	named bool
}

func export(ctx context.Context, c *Client, dir string, o Options) (*Query, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	if o.PageSize <= 0 || o.PageSize > 200 {
		o.PageSize = 200
	}
	e := &exporter{c: c, o: o, log: logger, lineageReadable: true, caps: map[string]capState{}, written: map[string]bool{}, edgesSeen: map[string]bool{},
		q: Query{Format: Format, Server: c.Base, ExportedAt: now().UTC().Format(time.RFC3339), Filter: o.Filter}}

	// The log's key as it publishes it: the export checks what it fetches
	// against it so a mistake shows now; the auditor's verify pins its own.
	keysBody, err := c.get(ctx, "/v1/log/keys", nil)
	if err != nil {
		return nil, fmt.Errorf("export: log keys: %w", err)
	}
	var keys struct {
		Origin         string `json:"origin"`
		CheckpointVKey string `json:"checkpoint_vkey"`
	}
	if err := json.Unmarshal(keysBody, &keys); err != nil {
		return nil, fmt.Errorf("export: log keys: %w", err)
	}
	v, err := note.NewVerifier(keys.CheckpointVKey)
	if err != nil {
		return nil, fmt.Errorf("export: log keys: %w", err)
	}

	// The checkpoint first: every proof is fetched at its size.
	cpNote, err := c.get(ctx, "/log/checkpoint", nil)
	if err != nil {
		return nil, fmt.Errorf("export: checkpoint: %w", err)
	}
	cp, _, n, err := tlog.ParseCheckpoint(cpNote, v.Name(), v)
	if err != nil {
		return nil, fmt.Errorf("export: checkpoint: %w", err)
	}
	e.size, e.cpText, e.q.TreeSize, e.q.Origin = cp.Size, n.Text, cp.Size, cp.Origin

	var entries []FileEntry
	var open []*hashedFile
	defer func() {
		for _, f := range open {
			f.abort()
		}
	}()
	create := func(name string) (*hashedFile, error) {
		f, err := createHashed(dir, name)
		if err == nil {
			open = append(open, f)
		}
		return f, err
	}
	closeAll := func() error {
		for _, f := range open {
			fe, err := f.close()
			if err != nil {
				return err
			}
			entries = append(entries, fe)
		}
		open = nil
		return nil
	}

	cpf, err := create(CheckpointFile)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if _, err := cpf.Write(cpNote); err != nil {
		return nil, fmt.Errorf("export: write %s: %w", CheckpointFile, err)
	}
	if len(o.ConsistencyFrom) > 0 {
		if err := e.consistency(ctx, v, cp, create); err != nil {
			return nil, err
		}
	}
	if e.receipts, err = create(ReceiptsFile); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if e.proofs, err = create(ProofsFile); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if e.lineage, err = create(LineageFile); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if e.edges, err = create(EdgeCredentialsFile); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if err := e.pages(ctx); err != nil {
		return nil, err
	}
	switch {
	case e.lineageReadable && e.q.Lineage.Records == 0 && len(e.q.Lineage.Missing) > 0:
		// The projections answer lineage outside a reader's scope as not
		// found: an auditor of receipts alone reads none.
		e.lineageReadable = false
		fallthrough
	case !e.lineageReadable:
		e.q.Lineage.Missing = nil
		e.q.Lineage.Note = "no capability lineage was readable with this credential at this URL: " + LineageFile + " is empty"
	case len(e.q.Lineage.Missing) > 0:
		slices.Sort(e.q.Lineage.Missing)
		e.q.Lineage.Note = "some receipts name a capability whose lineage the projections did not serve (none recorded, or outside the credential's scope): lineage.missing lists them"
	}
	e.q.Lineage.Readable = e.lineageReadable
	slices.Sort(e.q.Edges.Missing)

	qf, err := create(QueryFile)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	qb, err := json.MarshalIndent(e.q, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("export: encode %s: %w", QueryFile, err)
	}
	if _, err := qf.Write(append(qb, '\n')); err != nil {
		return nil, fmt.Errorf("export: write %s: %w", QueryFile, err)
	}
	if err := closeAll(); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	if err := writeManifest(dir, entries); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return &e.q, nil
}

// consistency fetches and checks the proof that cp extends the earlier
// checkpoint of the options, and writes ConsistencyFile.
func (e *exporter) consistency(ctx context.Context, v note.Verifier, cp *tlog.Checkpoint, create func(string) (*hashedFile, error)) error {
	old, _, _, err := tlog.ParseCheckpoint(e.o.ConsistencyFrom, v.Name(), v)
	if err != nil {
		return fmt.Errorf("export: consistency: the earlier checkpoint is not one of this log (origin %s): %w", v.Name(), err)
	}
	if old.Size > cp.Size {
		return fmt.Errorf("export: consistency: the earlier checkpoint's size %d is past the log's %d", old.Size, cp.Size)
	}
	var hashes [][]byte
	var encoded []string
	if old.Size > 0 && old.Size < cp.Size {
		body, err := e.c.get(ctx, "/v1/log/consistency-proof", url.Values{"from": {strconv.FormatUint(old.Size, 10)}, "to": {strconv.FormatUint(cp.Size, 10)}})
		if err != nil {
			return fmt.Errorf("export: consistency: %w", err)
		}
		var p api.ConsistencyProof
		if err := json.Unmarshal(body, &p); err != nil {
			return fmt.Errorf("export: consistency: %w", err)
		}
		if p.From != old.Size || p.To != cp.Size {
			return fmt.Errorf("export: consistency: asked for a proof from %d to %d, the log answered one from %d to %d", old.Size, cp.Size, p.From, p.To)
		}
		encoded = p.Proof
		for i, s := range p.Proof {
			h, err := schemas.ParseHash(s)
			if err != nil {
				return fmt.Errorf("export: consistency: proof[%d]: %w", i, err)
			}
			hashes = append(hashes, h)
		}
	}
	if err := verifyConsistency(old, cp, hashes); err != nil {
		return fmt.Errorf("export: consistency: %w", err)
	}
	if encoded == nil {
		encoded = []string{}
	}
	b, err := encodeLine(Consistency{FromCheckpoint: string(e.o.ConsistencyFrom), From: old.Size, To: cp.Size, Proof: encoded})
	if err != nil {
		return fmt.Errorf("export: encode %s: %w", ConsistencyFile, err)
	}
	f, err := create(ConsistencyFile)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if err := f.line(b); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	from := old.Size
	e.q.ConsistencyFrom = &from
	return nil
}

// verifyConsistency checks that cp extends old.
func verifyConsistency(old, cp *tlog.Checkpoint, hashes [][]byte) error {
	if old.Origin != cp.Origin {
		return fmt.Errorf("the earlier checkpoint is of log %q, not %q", old.Origin, cp.Origin)
	}
	if old.Size > cp.Size {
		return fmt.Errorf("the earlier checkpoint's size %d is past %d", old.Size, cp.Size)
	}
	if old.Size == 0 {
		return nil // the empty tree is a prefix of every tree
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old.Size, cp.Size, hashes, old.Hash, cp.Hash); err != nil {
		return fmt.Errorf("tree size %d does not extend to %d: %w", old.Size, cp.Size, err)
	}
	return nil
}

// progress reports to the options' callback, if any.
func (e *exporter) progress(done, total uint64) {
	if e.o.Progress != nil {
		e.o.Progress(done, total)
	}
}

// queryItem is what an export reads of a query page's item: a receipt, or
// the stand-in of an unreadable one.
type queryItem struct {
	ID           string  `json:"id"`
	CapabilityID string  `json:"capability_id"`
	Unreadable   *string `json:"unreadable"`
}

// pages walks the query, writing each page's receipts and proofs as it
// arrives, until the query ends or reaches past the checkpoint.
func (e *exporter) pages(ctx context.Context) error {
	f := e.o.Filter
	q := url.Values{"limit": {strconv.Itoa(e.o.PageSize)}}
	for k, v := range map[string]string{"toolServer": f.ToolServer, "toolName": f.ToolName, "outcome": f.Outcome} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Since != 0 {
		q.Set("since", strconv.FormatUint(f.Since, 10))
	}
	if f.Until != 0 {
		q.Set("until", strconv.FormatUint(f.Until, 10))
	}
	var seen, total uint64 // receipts gone through; the query's count
	for {
		body, err := e.c.get(ctx, "/v1/receipts/query", q)
		if err != nil {
			return fmt.Errorf("export: query: %w", err)
		}
		var page struct {
			NextCursor *uint64           `json:"nextCursor"`
			Receipts   []json.RawMessage `json:"receipts"`
			TotalCount uint64            `json:"totalCount"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("export: query: %w", err)
		}
		if total == 0 {
			total = page.TotalCount
			e.progress(0, total)
		}
		for _, item := range page.Receipts {
			// A page is worked through without a request when its
			// receipts are excluded: check ctx so an interrupt stops it.
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("export: stopped after %d of %d receipts: %w", seen, total, err)
			}
			done, err := e.item(ctx, item)
			if err != nil {
				return err
			}
			if done {
				return nil
			}
			seen++
			e.progress(seen, max(total, seen))
		}
		if page.NextCursor == nil || len(page.Receipts) == 0 {
			return nil
		}
		q.Set("cursor", strconv.FormatUint(*page.NextCursor, 10))
	}
}

// item writes one receipt and its proof; done is true when the receipt
// is past the checkpoint (the query is in log order, so every later one
// is too).
func (e *exporter) item(ctx context.Context, raw json.RawMessage) (done bool, err error) {
	var it queryItem
	if err := json.Unmarshal(raw, &it); err != nil {
		return false, fmt.Errorf("export: query: an item: %w", err)
	}
	if !schemas.ValidID(it.ID) {
		return false, errors.New("export: query: an item without a valid id")
	}
	var line []byte
	capID := it.CapabilityID
	if it.Unreadable != nil {
		// The page names it; its bytes come from the receipt path.
		body, err := e.c.get(ctx, "/v1/receipts/"+url.PathEscape(it.ID), nil)
		if err != nil {
			return false, fmt.Errorf("export: unreadable receipt %s: %w", it.ID, err)
		}
		var u UnreadableLine
		if err := json.Unmarshal(body, &u); err != nil || u.Unreadable == "" || len(u.Raw) == 0 {
			return false, fmt.Errorf("export: unreadable receipt %s: the log did not serve its raw bytes", it.ID)
		}
		if line, err = encodeLine(u); err != nil {
			return false, fmt.Errorf("export: unreadable receipt %s: %w", it.ID, err)
		}
		// Its top-level members read however deep the rest nests: its
		// capability is selected and its lineage written as any other's.
		head, err := schemas.ReadReceiptHead(u.Raw)
		if err != nil {
			return false, fmt.Errorf("export: unreadable receipt %s: %w", it.ID, err)
		}
		capID = head.CapabilityID
	} else {
		// The leaf is the JCS of the receipt; the page's JSON encoder may
		// have escaped characters in it, which JCS undoes.
		if line, err = schemas.CanonicalizeJSON(raw); err != nil {
			return false, fmt.Errorf("export: receipt %s: %w", it.ID, err)
		}
	}
	// Decided before the proof is fetched, so an excluded receipt costs no
	// proof; written after, so no record is written for a capability no
	// receipt of the package names.
	var chain []lineageRecord
	if cs := e.caps[capID]; !cs.named {
		if cs.excluded {
			return false, nil
		}
		var principals []string
		if chain, principals, err = e.chain(ctx, capID); err != nil {
			return false, err
		}
		if p := e.o.Filter.Principal; p != "" {
			if !e.lineageReadable {
				return false, errors.New("export: --principal needs the capability lineage, which this credential cannot read")
			}
			if !slices.Contains(principals, p) {
				e.caps[capID] = capState{excluded: true}
				return false, nil
			}
		}
	}
	p, err := e.proof(ctx, it.ID)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.Code == "leaf_not_in_tree" {
			return true, nil
		}
		return false, err
	}
	pl, err := encodeLine(p)
	if err != nil {
		return false, fmt.Errorf("export: proof of %s: %w", it.ID, err)
	}
	if err := e.receipts.line(line); err != nil {
		return false, fmt.Errorf("export: %w", err)
	}
	if err := e.proofs.line(pl); err != nil {
		return false, fmt.Errorf("export: %w", err)
	}
	e.q.Receipts++
	if it.Unreadable != nil {
		e.q.Unreadable++
	} else if err := e.edgeCredential(ctx, line); err != nil {
		return false, err
	}
	if !e.caps[capID].named {
		if err := e.writeLineage(capID, chain); err != nil {
			return false, err
		}
	}
	return false, nil
}

// proof fetches receipt id's inclusion proof at the package's size, which
// it names explicitly: the log's latest checkpoint may move on while the
// export runs, and every proof must be at the one in the package.
func (e *exporter) proof(ctx context.Context, id string) (*ProofLine, error) {
	body, err := e.c.get(ctx, "/v1/receipts/"+url.PathEscape(id)+"/inclusion-proof", url.Values{"tree_size": {strconv.FormatUint(e.size, 10)}})
	if err != nil {
		return nil, fmt.Errorf("export: proof of %s: %w", id, err)
	}
	var p struct {
		ProofLine
		Checkpoint string `json:"checkpoint"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("export: proof of %s: %w", id, err)
	}
	if p.ReceiptID != id || p.TreeSize != e.size {
		return nil, fmt.Errorf("export: proof of %s: the log answered a proof of %s at size %d, not at %d", id, p.ReceiptID, p.TreeSize, e.size)
	}
	// The same size signed twice with another tree head would be a fork:
	// refuse to package either.
	if text, _, ok := bytes.Cut([]byte(p.Checkpoint), []byte("\n\n")); !ok || string(text)+"\n" != e.cpText {
		return nil, fmt.Errorf("export: proof of %s: the log signed size %d with another checkpoint than the one exported", id, e.size)
	}
	if p.AuditPath == nil {
		p.AuditPath = []string{}
	}
	return &p.ProofLine, nil
}

// lineageRecord is one record of a chain as the package writes it.
type lineageRecord struct {
	id  string
	raw []byte // compact JSON
}

// chain fetches capability id's lineage chain: its records, root first,
// and the principals of its authority path. Both are nil when the
// projections serve none, or lineage is not readable here.
func (e *exporter) chain(ctx context.Context, id string) (records []lineageRecord, principals []string, err error) {
	if id == "" || !e.lineageReadable {
		return nil, nil, nil
	}
	body, err := e.c.get(ctx, "/v1/lineage/"+url.PathEscape(id)+"/chain", nil)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Code == "lineage_not_found":
		return nil, nil, nil
	case errors.As(err, &ae) && (ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden || ae.Status == http.StatusNotFound):
		// Refused, or no projections at this URL (a ledger alone).
		if e.q.Lineage.Records > 0 {
			// query.json can say lineage is readable or not, not that it
			// stopped being readable part way through.
			return nil, nil, fmt.Errorf("export: lineage of %s: refused after %d records were read: %w", id, e.q.Lineage.Records, err)
		}
		e.lineageReadable = false
		e.log.Warn("evidence export: no capability lineage readable here", "err", err)
		return nil, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("export: lineage of %s: %w", id, err)
	}
	var ch struct {
		Chain []json.RawMessage `json:"chain"`
	}
	if err := json.Unmarshal(body, &ch); err != nil {
		return nil, nil, fmt.Errorf("export: lineage of %s: %w", id, err)
	}
	recs := make([]schemas.CapabilityLineage, len(ch.Chain))
	for i, raw := range ch.Chain {
		if err := json.Unmarshal(raw, &recs[i]); err != nil {
			return nil, nil, fmt.Errorf("export: lineage of %s: record %d: %w", id, i, err)
		}
		if recs[i].CapabilityID == "" {
			return nil, nil, fmt.Errorf("export: lineage of %s: record %d has no capability id", id, i)
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, nil, fmt.Errorf("export: lineage of %s: %w", id, err)
		}
		records = append(records, lineageRecord{id: recs[i].CapabilityID, raw: b.Bytes()})
	}
	if len(recs) > 0 && recs[len(recs)-1].CapabilityID != id {
		return nil, nil, fmt.Errorf("export: lineage of %s: the chain ends at capability %s", id, recs[len(recs)-1].CapabilityID)
	}
	return records, schemas.LineagePrincipals(recs), nil
}

// writeLineage writes the records of capability id's chain not written
// yet, or lists the capability as missing when the projections served
// none, and marks it named.
func (e *exporter) writeLineage(id string, records []lineageRecord) error {
	if id == "" {
		return nil
	}
	e.caps[id] = capState{named: true}
	if len(records) == 0 {
		if e.lineageReadable {
			e.q.Lineage.Missing = append(e.q.Lineage.Missing, id)
		}
		return nil
	}
	for _, rec := range records {
		if e.written[rec.id] {
			continue
		}
		if err := e.lineage.line(rec.raw); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		e.written[rec.id] = true
		e.q.Lineage.Records++
	}
	return nil
}

// writeManifest writes ManifestFile for entries.
func writeManifest(dir string, entries []FileEntry) error {
	slices.SortFunc(entries, func(a, b FileEntry) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	b, err := json.MarshalIndent(Manifest{Format: Format, Files: entries}, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", ManifestFile, err)
	}
	f, err := createHashed(dir, ManifestFile)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.abort()
		return fmt.Errorf("write %s: %w", ManifestFile, err)
	}
	_, err = f.close()
	return err
}
