// Package evidence writes and verifies evidence packages: a directory an
// auditor can check offline, holding a selection of signed receipts, an
// inclusion proof of each against one signed checkpoint, that checkpoint,
// the capability lineage the receipts name, the query that selected them
// and a manifest of every file's SHA-256.
//
// The files (Format "chio.evidence.v1"):
//
//	receipts.ndjson            one receipt a line, in log order: the leaf
//	                           bytes (the JCS of the signed receipt) as the
//	                           log holds them; a receipt no reader can
//	                           decode (docs/limits.md) is the line
//	                           {"receipt_id","leaf_index","unreadable","raw"}
//	                           with the stored bytes in base64 (the body
//	                           GET /v1/receipts/{id} serves for it), since
//	                           those bytes need not be one line of JSON
//	inclusion-proofs.ndjson    line N is the proof of receipt N:
//	                           {"receipt_id","leaf_index","tree_size",
//	                           "leaf_hash","audit_path"}, all at the size
//	                           of the checkpoint file
//	checkpoints                the C2SP signed checkpoint note, verbatim,
//	                           with any cosignature lines it was served with
//	capability-lineage.ndjson  capability_lineage records (schemas.
//	                           CapabilityLineage) of the capabilities the
//	                           receipts name, each chain root first, each
//	                           record once; empty when the credential could
//	                           not read lineage (query.json says so). They
//	                           are projections, not signed: the manifest
//	                           is all that covers them
//	edge-credentials.ndjson    the chio.edge_credential.v1 of each edge
//	                           the receipts name (metadata.edge), each once,
//	                           canonical; signed by the issuer key
//	                           (EdgeCredentialsFile)
//	consistency-proof.json     optional: {"from_checkpoint","from","to",
//	                           "proof"}, the RFC 6962 proof that the
//	                           checkpoint extends an earlier one
//	query.json                 the filter, the server, the export time, the
//	                           checkpoint's size and what was exported
//	manifest.json              {"format","files":[{"name","size","sha256"}]}
//	                           for every other file, sorted by name
//
// Every line of every .ndjson file ends in "\n" and is the one encoding
// the writer produces, so an edited, added, removed or reordered byte fails
// verification even with the manifest recomputed.
//
// # What a package proves, and what it cannot
//
// Only the checkpoint (by the log key, and by witnesses when it carries
// their cosignatures) and each receipt (by the kernel key) are signed.
// manifest.json, query.json and capability-lineage.ndjson are not: anyone
// holding a package can rewrite them consistently. So a package that
// verifies proves that:
//
//   - every receipt in it was signed by the pinned kernel key and is in the
//     log, at the leaf it names, under the checkpoint signed by the pinned
//     log key; the receipts are in log order, none twice;
//   - every receipt is inside the filter query.json records: its tool
//     server and name, its outcome and its timestamp are the filter's, and
//     with a principal, the lineage chain of its capability in the package
//     descends from that principal;
//   - every receipt's capability has its lineage chain in the package,
//     unless query.json says lineage was not readable or lists that
//     capability as one whose lineage the projections did not serve; every
//     lineage record is on the chain of a receipt's capability, and the
//     chains are well formed;
//   - every receipt that names the edge that decided it names one whose
//     credential is in the package (or in query.json's edges.missing),
//     with the same edge id and key, signed by its issuer key, one of
//     those the auditor pins when any are; every credential is named;
//   - with consistency-proof.json, the checkpoint extends the earlier one.
//
// The edge's own signature on the event that carried a decision was
// checked by the ledger when it folded it, against that credential: the
// receipt, which the kernel key signs, records that result, not the
// signed event, which stays in the event stream.
//
// It cannot prove completeness: that the package holds every receipt of
// the log (at its checkpoint) that the filter selects. An exporter who
// leaves out receipts, or anyone who removes receipts from a package and
// rewrites query.json's counts and the manifest, makes a package that
// verifies, and without the log no offline check can tell. Verify reports
// how many receipts it verified; an auditor who needs completeness
// re-queries the log with the same filter and compares the receipts at
// leaves below the package's tree size (a new export does this), or
// compares the package with a second export made independently. Nor can
// it prove that the lineage records are what the projections served: they
// bind a receipt to a principal only as far as the exporter is trusted,
// and a lineage query to the projections confirms them.
package evidence

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
)

// Format names this package layout in manifest.json and query.json.
const Format = "chio.evidence.v1"

// File names inside a package.
const (
	ReceiptsFile    = "receipts.ndjson"
	ProofsFile      = "inclusion-proofs.ndjson"
	CheckpointFile  = "checkpoints"
	LineageFile     = "capability-lineage.ndjson"
	ConsistencyFile = "consistency-proof.json"
	QueryFile       = "query.json"
	ManifestFile    = "manifest.json"
)

// requiredFiles are in every package; ConsistencyFile is optional.
var requiredFiles = []string{CheckpointFile, LineageFile, ProofsFile, QueryFile, ReceiptsFile}

// maxLine bounds one line of a package: a receipt is at most a 32 MiB
// document (docs/limits.md), and in base64 when unreadable.
const maxLine = 48 << 20

// Manifest is manifest.json.
type Manifest struct {
	Format string      `json:"format"`
	Files  []FileEntry `json:"files"`
}

// FileEntry is one file of the manifest.
type FileEntry struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Filter is the selection the receipts were exported under. Since and
// Until are inclusive Unix seconds; zero fields match everything.
type Filter struct {
	Principal  string `json:"principal,omitempty"`
	ToolServer string `json:"tool_server,omitempty"`
	ToolName   string `json:"tool_name,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	Since      uint64 `json:"since,omitempty"`
	Until      uint64 `json:"until,omitempty"`
}

// Query is query.json: what was asked, of whom, and what came back.
type Query struct {
	Format     string `json:"format"`
	Server     string `json:"server"`
	ExportedAt string `json:"exported_at"` // RFC 3339, UTC
	Filter     Filter `json:"filter"`
	Origin     string `json:"origin"`
	TreeSize   uint64 `json:"tree_size"`
	Receipts   uint64 `json:"receipts"`
	// Unreadable counts the receipts exported as raw bytes.
	Unreadable uint64  `json:"unreadable"`
	Lineage    Lineage `json:"lineage"`
	// Edges says what EdgeCredentialsFile holds.
	Edges Edges `json:"edges"`
	// ConsistencyFrom is the size of the earlier checkpoint the
	// consistency proof starts at, when there is one.
	ConsistencyFrom *uint64 `json:"consistency_from,omitempty"`
}

// Lineage says what capability-lineage.ndjson holds.
type Lineage struct {
	// Readable is false when the credential could not read lineage at
	// all: the file is then empty.
	Readable bool   `json:"readable"`
	Records  uint64 `json:"records"`
	// Missing lists, sorted, the capabilities named by receipts whose
	// lineage the projections did not serve (none recorded, or outside the
	// scope): the only capabilities of receipts with no records here.
	Missing []string `json:"missing,omitempty"`
	Note    string   `json:"note,omitempty"`
}

// ProofLine is one line of inclusion-proofs.ndjson: the body of
// /v1/receipts/{id}/inclusion-proof without its checkpoint, which is the
// package's.
type ProofLine struct {
	ReceiptID string   `json:"receipt_id"`
	LeafIndex uint64   `json:"leaf_index"`
	TreeSize  uint64   `json:"tree_size"`
	LeafHash  string   `json:"leaf_hash"`
	AuditPath []string `json:"audit_path"`
}

// UnreadableLine is the line of receipts.ndjson of a receipt no reader
// can decode: the body GET /v1/receipts/{id} serves for it.
type UnreadableLine struct {
	ReceiptID  string `json:"receipt_id"`
	LeafIndex  uint64 `json:"leaf_index"`
	Unreadable string `json:"unreadable"`
	Raw        []byte `json:"raw"`
}

// Consistency is consistency-proof.json.
type Consistency struct {
	FromCheckpoint string   `json:"from_checkpoint"`
	From           uint64   `json:"from"`
	To             uint64   `json:"to"`
	Proof          []string `json:"proof"`
}

// encodeLine is the one JSON encoding of a package's lines: compact, no
// HTML escaping, no trailing newline.
func encodeLine(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// hashedFile writes one file of a package, hashing as it goes, so the
// manifest needs no second read.
type hashedFile struct {
	name string
	f    *os.File
	bw   *bufio.Writer
	h    hash.Hash
	n    int64
}

func createHashed(dir, name string) (*hashedFile, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", name, err)
	}
	return &hashedFile{name: name, f: f, bw: bufio.NewWriterSize(f, 256<<10), h: sha256.New()}, nil
}

func (w *hashedFile) Write(p []byte) (int, error) {
	n, err := w.bw.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// line writes b and a newline; b must not hold one.
func (w *hashedFile) line(b []byte) error {
	if bytes.IndexByte(b, '\n') >= 0 {
		return fmt.Errorf("write %s: a line holds a newline", w.name)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("write %s: %w", w.name, err)
	}
	if _, err := w.Write([]byte{'\n'}); err != nil {
		return fmt.Errorf("write %s: %w", w.name, err)
	}
	return nil
}

// close flushes, syncs and closes the file and returns its manifest entry.
func (w *hashedFile) close() (FileEntry, error) {
	err := w.bw.Flush()
	if err == nil {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return FileEntry{}, fmt.Errorf("close %s: %w", w.name, err)
	}
	return FileEntry{Name: w.name, Size: w.n, SHA256: hex.EncodeToString(w.h.Sum(nil))}, nil
}

// abort closes the file without caring: the package is being removed.
func (w *hashedFile) abort() { _ = w.f.Close() }

// lineReader reads a package's lines: each must end in "\n" and be at
// most maxLine bytes.
type lineReader struct {
	name string
	r    *bufio.Reader
	n    int // lines read
}

func newLineReader(name string, r io.Reader) *lineReader {
	return &lineReader{name: name, r: bufio.NewReaderSize(r, 256<<10)}
}

// errEOF is returned by next at the end of the file.
var errEOF = errors.New("end of file")

// next returns the next line without its newline, errEOF at the end, or
// a *Failure naming the line.
func (l *lineReader) next() ([]byte, error) {
	var line []byte
	for {
		chunk, err := l.r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLine+1 {
			return nil, &Failure{File: l.name, Line: l.n + 1, Check: "format", Err: fmt.Errorf("a line longer than %d bytes", maxLine)}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			if len(line) == 0 {
				return nil, errEOF
			}
			return nil, &Failure{File: l.name, Line: l.n + 1, Check: "format", Err: errors.New("the last line does not end in a newline")}
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", l.name, err)
		}
		l.n++
		line = line[:len(line)-1]
		if len(line) == 0 {
			return nil, &Failure{File: l.name, Line: l.n, Check: "format", Err: errors.New("an empty line")}
		}
		return line, nil
	}
}

// Failure is a failed check of Verify: the file (and line, from 1, when
// the check is about one line) and the check's name.
type Failure struct {
	File  string
	Line  int
	Check string
	Err   error
}

func (f *Failure) Error() string {
	where := f.File
	if f.Line > 0 {
		where = fmt.Sprintf("%s:%d", f.File, f.Line)
	}
	return fmt.Sprintf("%s: %s: %v", where, f.Check, f.Err)
}

func (f *Failure) Unwrap() error { return f.Err }
