package evidence

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"

	"github.com/chio-ledger/chio/schemas"
)

// EdgeCredentialsFile holds, one a line, the chio.edge_credential.v1 of
// every edge a receipt of the package names (its metadata.edge), each
// once, as the log kept it (GET /v1/edge-credentials/{id}). A credential
// is signed by the operator's issuer key, so unlike lineage it is checked
// offline: against the issuer keys the auditor pins, and against the
// edge id and key the kernel-signed receipt names. Packages written
// before it existed do not have it.
const EdgeCredentialsFile = "edge-credentials.ndjson"

// Edges says what edge-credentials.ndjson holds.
type Edges struct {
	Credentials uint64 `json:"credentials"`
	// Missing lists, sorted, the credential ids receipts name that the
	// log did not serve (a receipt folded before the log kept
	// credentials).
	Missing []string `json:"missing,omitempty"`
}

// receiptEdge is the edge a receipt's metadata names, nil when none.
func receiptEdge(leaf []byte) (*schemas.EdgeRef, error) {
	members, err := schemas.TopMembers(leaf)
	if err != nil {
		return nil, err
	}
	for _, m := range members {
		if m.Name != "metadata" {
			continue
		}
		var meta struct {
			Edge *schemas.EdgeRef `json:"edge"`
		}
		if err := json.Unmarshal(m.Canonical, &meta); err != nil {
			return nil, fmt.Errorf("metadata.edge: %w", err)
		}
		return meta.Edge, nil
	}
	return nil, nil
}

// edgeCredential writes the credential the receipt leaf names, once.
func (e *exporter) edgeCredential(ctx context.Context, leaf []byte) error {
	ref, err := receiptEdge(leaf)
	if err != nil || ref == nil || e.edgesSeen[ref.CredentialID] {
		return err
	}
	e.edgesSeen[ref.CredentialID] = true
	if !schemas.ValidID(ref.CredentialID) {
		return fmt.Errorf("export: a receipt names the edge credential id %q", ref.CredentialID)
	}
	body, err := e.c.get(ctx, "/v1/edge-credentials/"+url.PathEscape(ref.CredentialID), nil)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		e.q.Edges.Missing = append(e.q.Edges.Missing, ref.CredentialID)
		return nil
	case err != nil:
		return fmt.Errorf("export: edge credential %s: %w", ref.CredentialID, err)
	}
	c, err := schemas.ParseEdgeCredential(body)
	if err != nil || c.ID != ref.CredentialID {
		return fmt.Errorf("export: edge credential %s: the log served another document (%v)", ref.CredentialID, err)
	}
	line, err := schemas.Canonical(c)
	if err != nil {
		return fmt.Errorf("export: edge credential %s: %w", ref.CredentialID, err)
	}
	if err := e.edges.line(line); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	e.q.Edges.Credentials++
	return nil
}

// edgeSet is edge-credentials.ndjson as Verify holds it.
type edgeSet struct {
	present bool // the package has the file
	creds   map[string]*schemas.EdgeCredential
	line    map[string]int
	named   map[string]bool
	missing map[string]bool // query.json's edges.missing: true once a receipt names it
	issuers []string        // the issuer keys of the credentials, sorted
}

// readEdges parses each credential: canonical, once, and signed by its
// issuer, which must be one of pinned when any are.
func readEdges(dir string, files []string, q *Query, pinned []string) (*edgeSet, error) {
	es := &edgeSet{creds: map[string]*schemas.EdgeCredential{}, line: map[string]int{}, named: map[string]bool{}, missing: map[string]bool{}}
	for _, id := range q.Edges.Missing {
		es.missing[id] = false
	}
	if !slices.Contains(files, EdgeCredentialsFile) {
		if len(pinned) > 0 {
			return nil, &Failure{File: EdgeCredentialsFile, Check: "edge", Err: errors.New("edge issuer keys are pinned, and the package carries no edge credentials (it predates them)")}
		}
		return es, nil
	}
	es.present = true
	f, err := os.Open(filepath.Join(dir, EdgeCredentialsFile))
	if err != nil {
		return nil, &Failure{File: EdgeCredentialsFile, Check: "read", Err: err}
	}
	defer f.Close()
	lr := newLineReader(EdgeCredentialsFile, f)
	for {
		raw, err := lr.next()
		if err == errEOF {
			break
		}
		if err != nil {
			return nil, err
		}
		fail := func(format string, args ...any) error {
			return &Failure{File: EdgeCredentialsFile, Line: lr.n, Check: "edge", Err: fmt.Errorf(format, args...)}
		}
		c, err := schemas.ParseEdgeCredential(raw)
		if err != nil {
			return nil, fail("%v", err)
		}
		if canon, err := schemas.Canonical(c); err != nil || !bytes.Equal(canon, raw) {
			return nil, fail("not the credential's canonical (JCS) bytes")
		}
		if _, dup := es.creds[c.ID]; dup {
			return nil, fail("credential %s twice", c.ID)
		}
		if err := c.Verify(func(k string) bool { return len(pinned) == 0 || slices.Contains(pinned, k) }); err != nil {
			return nil, fail("credential %s: %v (issuer %s)", c.ID, err, c.Issuer)
		}
		es.creds[c.ID], es.line[c.ID] = c, lr.n
		if !slices.Contains(es.issuers, c.Issuer) {
			es.issuers = append(es.issuers, c.Issuer)
		}
	}
	slices.Sort(es.issuers)
	if uint64(len(es.creds)) != q.Edges.Credentials {
		return nil, &Failure{File: QueryFile, Check: "query", Err: fmt.Errorf("says %d edge credentials, %s holds %d", q.Edges.Credentials, EdgeCredentialsFile, len(es.creds))}
	}
	return es, nil
}

// receipt checks the edge the receipt leaf names against its credential:
// the same edge id and key, the credential in the package (or listed as
// missing in query.json).
func (es *edgeSet) receipt(leaf []byte) error {
	ref, err := receiptEdge(leaf)
	if err != nil || ref == nil || !es.present {
		return err
	}
	c := es.creds[ref.CredentialID]
	if c == nil {
		if _, ok := es.missing[ref.CredentialID]; ok {
			es.missing[ref.CredentialID] = true
			return nil
		}
		return fmt.Errorf("the receipt names edge credential %s, which is not in %s", ref.CredentialID, EdgeCredentialsFile)
	}
	if c.EdgeID != ref.EdgeID || c.PublicKey != ref.Key {
		return fmt.Errorf("the receipt names edge %q with key %s, credential %s certifies edge %q with key %s", ref.EdgeID, ref.Key, c.ID, c.EdgeID, c.PublicKey)
	}
	es.named[c.ID] = true
	return nil
}

// checkNamed: every credential in the file, and every missing one in
// query.json, is named by a receipt.
func (es *edgeSet) checkNamed() error {
	for id, line := range es.line {
		if !es.named[id] {
			return &Failure{File: EdgeCredentialsFile, Line: line, Check: "edge", Err: fmt.Errorf("credential %s is named by no receipt of the package", id)}
		}
	}
	for id, seen := range es.missing {
		if !seen {
			return &Failure{File: QueryFile, Check: "query", Err: fmt.Errorf("edges.missing lists %s, which no receipt names", id)}
		}
	}
	return nil
}
