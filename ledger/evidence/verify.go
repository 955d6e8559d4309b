package evidence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	tlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/verify"
	"github.com/chio-ledger/chio/schemas"
)

// VerifyOptions are the keys pinned out of band.
type VerifyOptions struct {
	VKey      string // the log's note verifier key; its name is the origin
	KernelKey string // the kernel's public key (64 lowercase hex)
	// Checkpoint, when set, checks the signed checkpoint further (a
	// witness quorum) and returns who vouched for it.
	Checkpoint func(signedNote []byte, log note.Verifier) ([]string, error)
	// EdgeIssuers, when set, are the issuer keys (64 lowercase hex) an
	// edge credential must be signed by; without them each is checked
	// against the issuer it names, and Report.EdgeIssuers lists those.
	EdgeIssuers []string
}

// Report is what a package that verified holds. Receipts is how many
// receipts were verified, each inside Filter: not that they are every
// receipt of the log the filter selects, which no offline check can tell
// (see the package documentation).
type Report struct {
	Origin     string
	TreeSize   uint64
	Filter     Filter
	Receipts   int
	Unreadable int
	Lineage    int
	// EdgeCredentials is how many edge credentials were verified, and
	// EdgeIssuers the issuer keys that signed them.
	EdgeCredentials int
	EdgeIssuers     []string
	Files           int // the manifest and every file it covers, all verified
	// Cosigners are what VerifyOptions.Checkpoint returned.
	Cosigners []string
	// ConsistencyFrom is the size of the earlier checkpoint proven to be
	// extended, when the package holds a consistency proof.
	ConsistencyFrom *uint64
}

// Verify checks the package in dir, in order: the manifest (every file
// listed, none else, each of its size and SHA-256); the checkpoint's
// signature by the pinned log key; query.json's form and checkpoint; the
// lineage records (each once, a chain's parent before its child, depths
// in order); each receipt (kernel key, signature, parameter hash, as
// `chio verify` checks one) with its inclusion proof at the checkpoint's
// size, in strictly increasing log order, every line in the one form the
// writer produces, inside query.json's filter, its capability's lineage
// in the package unless query.json says why not; every lineage record on
// a receipt's chain; query.json's counts; opts.Checkpoint; the
// consistency proof. The first failure is returned as a *Failure naming
// the file and, for a line, the line.
//
// A package that verifies does not prove it is complete: see the package
// documentation.
func Verify(dir string, opts VerifyOptions) (*Report, error) {
	files, err := checkManifest(dir)
	if err != nil {
		return nil, err
	}
	rep := &Report{Files: len(files) + 1} // and the manifest itself

	cpNote, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
	if err != nil {
		return nil, &Failure{File: CheckpointFile, Check: "read", Err: err}
	}
	v, err := note.NewVerifier(opts.VKey)
	if err != nil {
		return nil, &Failure{File: CheckpointFile, Check: "checkpoint", Err: fmt.Errorf("verifier key: %w", err)}
	}
	cp, _, _, err := tlog.ParseCheckpoint(cpNote, v.Name(), v)
	if err != nil {
		return nil, &Failure{File: CheckpointFile, Check: "checkpoint", Err: err}
	}
	rep.Origin, rep.TreeSize = cp.Origin, cp.Size

	q, err := readQuery(dir, rep)
	if err != nil {
		return nil, err
	}
	rep.Filter = q.Filter
	lin, err := readLineage(dir, q)
	if err != nil {
		return nil, err
	}
	edges, err := readEdges(dir, files, q, opts.EdgeIssuers)
	if err != nil {
		return nil, err
	}
	if err := checkReceipts(dir, cpNote, cp.Size, opts, q, lin, edges, rep); err != nil {
		return nil, err
	}
	if err := lin.checkNamed(); err != nil {
		return nil, err
	}
	if err := edges.checkNamed(); err != nil {
		return nil, err
	}
	rep.EdgeCredentials, rep.EdgeIssuers = len(edges.creds), edges.issuers
	rep.Lineage = len(lin.order)
	if err := checkCounts(q, rep); err != nil {
		return nil, err
	}
	if opts.Checkpoint != nil {
		if rep.Cosigners, err = opts.Checkpoint(cpNote, v); err != nil {
			return nil, &Failure{File: CheckpointFile, Check: "witness-quorum", Err: err}
		}
	}
	if slices.Contains(files, ConsistencyFile) {
		from, err := checkConsistency(dir, v, cp)
		if err != nil {
			return nil, err
		}
		rep.ConsistencyFrom = &from
	}
	return rep, nil
}

// checkManifest checks manifest.json against the directory and returns
// the names it lists.
func checkManifest(dir string) ([]string, error) {
	fail := func(file, format string, args ...any) error {
		return &Failure{File: file, Check: "manifest", Err: fmt.Errorf(format, args...)}
	}
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fail(ManifestFile, "%v", err)
	}
	var m Manifest
	if err := schemas.DecodeStrict(raw, &m); err != nil {
		return nil, fail(ManifestFile, "parse: %v", err)
	}
	if m.Format != Format {
		return nil, fail(ManifestFile, "format %q, want %q", m.Format, Format)
	}
	listed := map[string]FileEntry{}
	var names []string
	for _, f := range m.Files {
		if f.Name == "" || f.Name == ManifestFile || f.Name != filepath.Base(f.Name) || strings.ContainsAny(f.Name, `/\`) || f.Name == "." || f.Name == ".." {
			return nil, fail(ManifestFile, "lists the file name %q", f.Name)
		}
		if _, dup := listed[f.Name]; dup {
			return nil, fail(ManifestFile, "lists %s twice", f.Name)
		}
		listed[f.Name] = f
		names = append(names, f.Name)
	}
	for _, name := range requiredFiles {
		if _, ok := listed[name]; !ok {
			return nil, fail(name, "not listed in %s", ManifestFile)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fail(dir, "%v", err)
	}
	present := map[string]bool{}
	for _, de := range entries {
		name := de.Name()
		if name == ManifestFile {
			continue
		}
		if _, ok := listed[name]; !ok {
			return nil, fail(name, "a file the manifest does not list")
		}
		if !de.Type().IsRegular() {
			return nil, fail(name, "not a regular file")
		}
		present[name] = true
	}
	for _, name := range names {
		f := listed[name]
		if !present[name] {
			return nil, fail(name, "listed in %s but missing", ManifestFile)
		}
		size, sum, err := hashFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fail(name, "%v", err)
		}
		if size != f.Size {
			return nil, fail(name, "%d bytes, the manifest says %d", size, f.Size)
		}
		if sum != f.SHA256 {
			return nil, fail(name, "SHA-256 %s, the manifest says %s", sum, f.SHA256)
		}
	}
	return names, nil
}

func hashFile(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// receiptChecks are verify.Verify's checks about the receipt itself; the
// others are about its proof.
var receiptChecks = []string{"receipt", "kernel-key", "receipt-signature", "parameter-hash"}

// checkReceipts walks receipts.ndjson and inclusion-proofs.ndjson in step.
func checkReceipts(dir string, cpNote []byte, size uint64, opts VerifyOptions, q *Query, lin *lineageSet, edges *edgeSet, rep *Report) error {
	rf, err := os.Open(filepath.Join(dir, ReceiptsFile))
	if err != nil {
		return &Failure{File: ReceiptsFile, Check: "read", Err: err}
	}
	defer rf.Close()
	pf, err := os.Open(filepath.Join(dir, ProofsFile))
	if err != nil {
		return &Failure{File: ProofsFile, Check: "read", Err: err}
	}
	defer pf.Close()
	receipts, proofs := newLineReader(ReceiptsFile, rf), newLineReader(ProofsFile, pf)
	var last *uint64
	for {
		rl, rerr := receipts.next()
		pl, perr := proofs.next()
		switch {
		case rerr == errEOF && perr == errEOF:
			return nil
		case rerr != nil && rerr != errEOF:
			return rerr
		case perr != nil && perr != errEOF:
			return perr
		case rerr == errEOF:
			return &Failure{File: ProofsFile, Line: proofs.n, Check: "proof", Err: fmt.Errorf("a proof with no receipt: %s has %d lines", ReceiptsFile, receipts.n)}
		case perr == errEOF:
			return &Failure{File: ReceiptsFile, Line: receipts.n, Check: "proof", Err: fmt.Errorf("a receipt with no proof: %s has %d lines", ProofsFile, proofs.n)}
		}
		n := receipts.n
		atReceipt := func(check string, err error) error {
			return &Failure{File: ReceiptsFile, Line: n, Check: check, Err: err}
		}
		atProof := func(check string, err error) error {
			return &Failure{File: ProofsFile, Line: n, Check: check, Err: err}
		}

		// The one form the writer produces: JCS of a readable receipt,
		// or the compact UnreadableLine of one that is not.
		var u UnreadableLine
		unreadable := schemas.DecodeStrict(rl, &u) == nil && u.Unreadable != ""
		if unreadable {
			if again, err := encodeLine(u); err != nil || !bytes.Equal(again, rl) {
				return atReceipt("format", errors.New("not in the form the package writes an unreadable receipt"))
			}
		} else if canon, err := schemas.CanonicalizeJSON(rl); err == nil && !bytes.Equal(canon, rl) {
			return atReceipt("format", errors.New("not the receipt's canonical (JCS) bytes, which the log holds"))
		}
		var p ProofLine
		if err := schemas.DecodeStrict(pl, &p); err != nil {
			return atProof("proof", fmt.Errorf("parse: %w", err))
		}
		if again, err := encodeLine(p); err != nil || !bytes.Equal(again, pl) {
			return atProof("format", errors.New("not in the form the package writes a proof"))
		}

		res, err := verify.Verify(verify.Inputs{Receipt: rl, Proof: pl, Checkpoint: cpNote, VKey: opts.VKey, KernelKey: opts.KernelKey})
		if err != nil {
			var f *verify.Failure
			if !errors.As(err, &f) {
				return atReceipt("verify", err)
			}
			switch {
			case slices.Contains(receiptChecks, f.Check):
				return atReceipt(f.Check, f.Err)
			case f.Check == "checkpoint":
				return &Failure{File: CheckpointFile, Check: f.Check, Err: f.Err}
			case f.Check == "proof" && p.ReceiptID != "" && p.TreeSize == size:
				// The proof is sound but about another receipt or leaf:
				// the two files are out of step.
				return &Failure{File: ReceiptsFile, Line: n, Check: f.Check,
					Err: fmt.Errorf("%w (%s:%d)", f.Err, ProofsFile, n)}
			default:
				return atProof(f.Check, f.Err)
			}
		}
		if unreadable && u.ReceiptID != res.ReceiptID {
			return atReceipt("receipt", fmt.Errorf("the line names receipt %q, its bytes are receipt %q", u.ReceiptID, res.ReceiptID))
		}
		// Log order, each leaf once: a reordered, repeated or dropped-in
		// line fails here even with both files consistent.
		if last != nil && res.LeafIndex <= *last {
			return atReceipt("order", fmt.Errorf("leaf %d after leaf %d: receipts must be in strictly increasing log order", res.LeafIndex, *last))
		}
		idx := res.LeafIndex
		last = &idx

		// The signature covers the head: what the filter selected on.
		leaf := rl
		if unreadable {
			leaf = u.Raw
		}
		head, err := schemas.ReadReceiptHead(leaf)
		if err != nil {
			return atReceipt("receipt", err)
		}
		if err := q.Filter.check(head); err != nil {
			return atReceipt("filter", err)
		}
		if err := lin.receipt(head.CapabilityID); err != nil {
			return atReceipt("lineage", err)
		}
		if err := lin.checkPrincipal(head.CapabilityID, q.Filter.Principal); err != nil {
			return atReceipt("filter", err)
		}
		if !unreadable {
			if err := edges.receipt(leaf); err != nil {
				return atReceipt("edge", err)
			}
		}
		rep.Receipts++
		if res.Unreadable != "" {
			rep.Unreadable++
		}
	}
}

// check reports why receipt head h is outside the filter, or nil. It
// selects as the log's query does (logstore.Filter) on what the receipt's
// signature covers; the principal is checked against lineage apart.
func (f Filter) check(h *schemas.ReceiptHead) error {
	switch {
	case f.ToolServer != "" && h.ToolServer != f.ToolServer:
		return fmt.Errorf("receipt %s is of tool server %q, the filter in %s selects %q", h.ID, h.ToolServer, QueryFile, f.ToolServer)
	case f.ToolName != "" && h.ToolName != f.ToolName:
		return fmt.Errorf("receipt %s is of tool %q, the filter in %s selects %q", h.ID, h.ToolName, QueryFile, f.ToolName)
	case f.Outcome != "" && string(h.Decision.Verdict) != f.Outcome:
		return fmt.Errorf("receipt %s has outcome %q, the filter in %s selects %q", h.ID, h.Decision.Verdict, QueryFile, f.Outcome)
	case f.Since != 0 && h.Timestamp < f.Since:
		return fmt.Errorf("receipt %s is of time %d, before the filter's since %d in %s", h.ID, h.Timestamp, f.Since, QueryFile)
	case f.Until != 0 && h.Timestamp > f.Until:
		return fmt.Errorf("receipt %s is of time %d, after the filter's until %d in %s", h.ID, h.Timestamp, f.Until, QueryFile)
	}
	return nil
}

// readQuery reads query.json and checks its form and that it names the
// package's checkpoint; its counts are checked once the files are read.
func readQuery(dir string, rep *Report) (*Query, error) {
	raw, err := os.ReadFile(filepath.Join(dir, QueryFile))
	if err != nil {
		return nil, &Failure{File: QueryFile, Check: "read", Err: err}
	}
	var q Query
	if err := schemas.DecodeStrict(raw, &q); err != nil {
		return nil, &Failure{File: QueryFile, Check: "query", Err: fmt.Errorf("parse: %w", err)}
	}
	fail := func(format string, args ...any) error {
		return &Failure{File: QueryFile, Check: "query", Err: fmt.Errorf(format, args...)}
	}
	switch {
	case q.Format != Format:
		return nil, fail("format %q, want %q", q.Format, Format)
	case q.Origin != rep.Origin || q.TreeSize != rep.TreeSize:
		return nil, fail("says %s at size %d, the checkpoint signs %s at size %d", q.Origin, q.TreeSize, rep.Origin, rep.TreeSize)
	case q.Filter.Principal != "" && !q.Lineage.Readable:
		return nil, fail("a filter on principal %s, which needs the lineage, and lineage not readable", q.Filter.Principal)
	case !q.Lineage.Readable && len(q.Lineage.Missing) > 0:
		return nil, fail("lineage not readable, and yet capabilities listed as missing lineage")
	}
	for i, id := range q.Lineage.Missing {
		if id == "" || (i > 0 && id <= q.Lineage.Missing[i-1]) {
			return nil, fail("lineage.missing is not a sorted list of distinct capability ids")
		}
	}
	return &q, nil
}

// checkCounts checks query.json's counts against what the files hold.
func checkCounts(q *Query, rep *Report) error {
	fail := func(format string, args ...any) error {
		return &Failure{File: QueryFile, Check: "query", Err: fmt.Errorf(format, args...)}
	}
	switch {
	case q.Receipts != uint64(rep.Receipts) || q.Unreadable != uint64(rep.Unreadable):
		return fail("says %d receipts (%d unreadable), %s holds %d (%d)", q.Receipts, q.Unreadable, ReceiptsFile, rep.Receipts, rep.Unreadable)
	case q.Lineage.Records != uint64(rep.Lineage):
		return fail("says %d lineage records, %s holds %d", q.Lineage.Records, LineageFile, rep.Lineage)
	}
	return nil
}

// lineageSet is capability-lineage.ndjson as Verify holds it: a few
// fields of each record, so its size is the records', not the receipts'.
type lineageSet struct {
	readable bool
	recs     map[string]*lineageNode
	order    []*lineageNode  // in file order, to name the first stray one
	missing  map[string]bool // query.json's lineage.missing: true once a receipt names it
}

// lineageNode is one lineage record.
type lineageNode struct {
	id, issuer, subject string
	line                int
	depth               int
	parent              *lineageNode
	// onChain: a receipt's capability is this one or descends from it.
	onChain bool
	// principals of the authority path, computed when first needed.
	principals []string
}

// readLineage parses each lineage record: one per capability, a chain's
// parent before its child, its delegation depth its parent's and one.
func readLineage(dir string, q *Query) (*lineageSet, error) {
	f, err := os.Open(filepath.Join(dir, LineageFile))
	if err != nil {
		return nil, &Failure{File: LineageFile, Check: "read", Err: err}
	}
	defer f.Close()
	ls := &lineageSet{readable: q.Lineage.Readable, recs: map[string]*lineageNode{}, missing: map[string]bool{}}
	for _, id := range q.Lineage.Missing {
		ls.missing[id] = false
	}
	lr := newLineReader(LineageFile, f)
	for {
		line, err := lr.next()
		if err == errEOF {
			return ls, nil
		}
		if err != nil {
			return nil, err
		}
		fail := func(format string, args ...any) error {
			return &Failure{File: LineageFile, Line: lr.n, Check: "lineage", Err: fmt.Errorf(format, args...)}
		}
		if !ls.readable {
			return nil, fail("a record, and %s says lineage was not readable", QueryFile)
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, line); err != nil {
			return nil, fail("parse: %v", err)
		}
		if !bytes.Equal(compact.Bytes(), line) {
			return nil, fail("not compact JSON, as the package writes it")
		}
		var rec schemas.CapabilityLineage
		if err := json.Unmarshal(line, &rec); err != nil {
			return nil, fail("parse: %v", err)
		}
		n := &lineageNode{id: rec.CapabilityID, issuer: rec.IssuerKey, subject: rec.SubjectKey, line: lr.n, depth: rec.DelegationDepth}
		switch {
		case rec.CapabilityID == "" || rec.IssuerKey == "" || rec.SubjectKey == "":
			return nil, fail("a record without capability_id, issuer_key or subject_key")
		case ls.recs[rec.CapabilityID] != nil:
			return nil, fail("capability %s recorded twice", rec.CapabilityID)
		case ls.hasMissing(rec.CapabilityID):
			return nil, fail("capability %s is recorded, and %s lists it as missing lineage", rec.CapabilityID, QueryFile)
		case rec.ParentCapabilityID == "" && rec.DelegationDepth != 0:
			return nil, fail("capability %s is a root of delegation depth %d", rec.CapabilityID, rec.DelegationDepth)
		case rec.ParentCapabilityID != "":
			parent := ls.recs[rec.ParentCapabilityID]
			if parent == nil {
				return nil, fail("capability %s names parent %s, which no earlier line records", rec.CapabilityID, rec.ParentCapabilityID)
			}
			if rec.DelegationDepth != parent.depth+1 {
				return nil, fail("capability %s has delegation depth %d, its parent %s %d", rec.CapabilityID, rec.DelegationDepth, parent.id, parent.depth)
			}
			n.parent = parent
		}
		ls.recs[n.id] = n
		ls.order = append(ls.order, n)
	}
}

func (ls *lineageSet) hasMissing(id string) bool {
	_, ok := ls.missing[id]
	return ok
}

// receipt checks the lineage of a receipt's capability id: recorded (its
// chain then counts as named), or listed as missing, or lineage not
// readable at all.
func (ls *lineageSet) receipt(id string) error {
	if !ls.readable || id == "" {
		return nil
	}
	n := ls.recs[id]
	if n == nil {
		if !ls.hasMissing(id) {
			return fmt.Errorf("capability %s has no record in %s, and %s does not list it as missing lineage", id, LineageFile, QueryFile)
		}
		ls.missing[id] = true
		return nil
	}
	for c := n; c != nil && !c.onChain; c = c.parent {
		c.onChain = true
	}
	return nil
}

// checkPrincipal checks that capability id's lineage chain descends from
// principal, when the filter names one.
func (ls *lineageSet) checkPrincipal(id, principal string) error {
	if principal == "" {
		return nil
	}
	n := ls.recs[id]
	if n == nil {
		return fmt.Errorf("capability %q has no lineage in %s, so no principal, and the filter in %s selects principal %s", id, LineageFile, QueryFile, principal)
	}
	if n.principals == nil {
		var subjects []string
		root := n
		for c := n; c != nil; c = c.parent {
			subjects, root = append(subjects, c.subject), c
		}
		slices.Reverse(subjects)
		n.principals = schemas.PathPrincipals(root.issuer, subjects)
	}
	if !slices.Contains(n.principals, principal) {
		return fmt.Errorf("capability %s's lineage chain does not descend from principal %s, which the filter in %s selects", id, principal, QueryFile)
	}
	return nil
}

// checkNamed checks, once every receipt is read, that each lineage record
// is on a receipt's chain and each capability listed missing is named.
func (ls *lineageSet) checkNamed() error {
	for _, n := range ls.order {
		if !n.onChain {
			return &Failure{File: LineageFile, Line: n.line, Check: "lineage",
				Err: fmt.Errorf("capability %s is on no receipt's lineage chain", n.id)}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ls.missing)) {
		if !ls.missing[id] {
			return &Failure{File: QueryFile, Check: "lineage",
				Err: fmt.Errorf("lists capability %s as missing lineage, and no receipt names it", id)}
		}
	}
	return nil
}

// checkConsistency checks consistency-proof.json: an earlier checkpoint
// signed by the same pinned key, and the proof that cp extends it.
func checkConsistency(dir string, v note.Verifier, cp *tlog.Checkpoint) (uint64, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ConsistencyFile))
	if err != nil {
		return 0, &Failure{File: ConsistencyFile, Check: "read", Err: err}
	}
	fail := func(format string, args ...any) error {
		return &Failure{File: ConsistencyFile, Line: 1, Check: "consistency", Err: fmt.Errorf(format, args...)}
	}
	var c Consistency
	if err := schemas.DecodeStrict(raw, &c); err != nil {
		return 0, fail("parse: %v", err)
	}
	if again, err := encodeLine(c); err != nil || !bytes.Equal(append(again, '\n'), raw) {
		return 0, fail("not in the form the package writes it")
	}
	old, _, _, err := tlog.ParseCheckpoint([]byte(c.FromCheckpoint), v.Name(), v)
	if err != nil {
		return 0, fail("the earlier checkpoint: %v", err)
	}
	if c.From != old.Size || c.To != cp.Size {
		return 0, fail("a proof from %d to %d, the checkpoints are of sizes %d and %d", c.From, c.To, old.Size, cp.Size)
	}
	hashes := make([][]byte, len(c.Proof))
	for i, s := range c.Proof {
		if hashes[i], err = schemas.ParseHash(s); err != nil {
			return 0, fail("proof[%d]: %v", i, err)
		}
	}
	if err := verifyConsistency(old, cp, hashes); err != nil {
		return 0, fail("%v", err)
	}
	return old.Size, nil
}
