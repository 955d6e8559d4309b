package logstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Filter selects receipts; zero fields match everything. Since and Until
// are inclusive Unix seconds.
type Filter struct {
	CapabilityID string
	ToolServer   string
	ToolName     string
	Verdict      string
	Since, Until uint64
	// Principals, when set, keeps receipts made under any of these
	// authority paths (Summary.Principals): a scoped reader's receipts.
	Principals []string
	// Principal, when set, keeps receipts made under this authority path
	// too: a filter a reader asks for, on top of its scope (Principals).
	Principal string
}

func (f *Filter) empty() bool {
	return f.CapabilityID == "" && f.ToolServer == "" && f.ToolName == "" && f.Verdict == "" &&
		f.Since == 0 && f.Until == 0 && len(f.Principals) == 0 && f.Principal == ""
}

func (f *Filter) match(s *Summary) bool {
	if len(f.Principals) > 0 && !slices.ContainsFunc(s.Principals, func(p string) bool { return slices.Contains(f.Principals, p) }) {
		return false
	}
	return (f.Principal == "" || slices.Contains(s.Principals, f.Principal)) &&
		(f.CapabilityID == "" || s.CapabilityID == f.CapabilityID) &&
		(f.ToolServer == "" || s.ToolServer == f.ToolServer) &&
		(f.ToolName == "" || s.ToolName == f.ToolName) &&
		(f.Verdict == "" || s.Verdict == f.Verdict) &&
		(f.Since == 0 || s.Timestamp >= f.Since) &&
		(f.Until == 0 || s.Timestamp <= f.Until)
}

// Page is one page of a query, in log order.
type Page struct {
	Indexes []uint64 // leaf indexes on this page
	Total   uint64   // receipts matching the filter in the whole log
	// More is true when the page is full: the caller then hands out a cursor
	// even if nothing follows, as Chio's query API does.
	More bool
}

// Query returns up to limit leaf indexes >= from that match f, in log order,
// and the total number of matches. It walks the narrowest index the filter
// allows: by capability, by tool server (and name), or every leaf; counting
// the total costs one pass over that index (O(size) for a filter on outcome
// or time alone).
func (s *Store) Query(f Filter, from uint64, limit int) (Page, error) {
	prefix := []byte{prefixSummary}
	rest := f // predicates the walked index does not already imply
	switch {
	case f.CapabilityID != "":
		prefix = append(append([]byte{prefixByCap}, f.CapabilityID...), 0)
		rest.CapabilityID = ""
	case len(f.Principals) == 1:
		// A scoped reader's own index first: a principal= it names cannot
		// make its query walk more than its own receipts.
		prefix = append(append([]byte{prefixByOwner}, f.Principals[0]...), 0)
		rest.Principals = nil
	case f.Principal != "":
		prefix = append(append([]byte{prefixByOwner}, f.Principal...), 0)
		rest.Principal = ""
	case f.ToolServer != "" && f.ToolName != "":
		prefix = append(append(append(append([]byte{prefixByTool}, f.ToolServer...), 0), f.ToolName...), 0)
		rest.ToolServer, rest.ToolName = "", ""
	case f.ToolServer != "":
		prefix = append(append([]byte{prefixByServer}, f.ToolServer...), 0)
		rest.ToolServer = ""
	}
	size := s.State().Size
	page := Page{}
	err := s.scan(prefix, from, func(idx uint64) (bool, error) {
		if idx >= size {
			return false, nil // committed after we read the size
		}
		ok, err := s.matches(rest, idx)
		if ok && len(page.Indexes) < limit {
			page.Indexes = append(page.Indexes, idx)
		}
		return len(page.Indexes) < limit, err
	})
	if err != nil {
		return Page{}, err
	}
	page.More = len(page.Indexes) == limit
	if rest.empty() && prefix[0] == prefixSummary {
		page.Total = size
		return page, nil
	}
	err = s.scan(prefix, 0, func(idx uint64) (bool, error) {
		ok, err := s.matches(rest, idx)
		if ok && idx < size {
			page.Total++
		}
		return idx < size, err
	})
	return page, err
}

// scan calls f with the leaf index of each key under prefix whose index is
// at least from, in order, until f returns false.
func (s *Store) scan(prefix []byte, from uint64, f func(idx uint64) (bool, error)) error {
	upper := bytes.Clone(prefix)
	upper[len(upper)-1]++
	db, done, err := s.acquire()
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	defer done()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("query: %w", err)
	}
	defer it.Close()
	for it.SeekGE(binary.BigEndian.AppendUint64(bytes.Clone(prefix), from)); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) != len(prefix)+8 {
			return fmt.Errorf("query: malformed index key %q", k)
		}
		more, err := f(binary.BigEndian.Uint64(k[len(prefix):]))
		if err != nil || !more {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("query: %w", err)
	}
	return nil
}

func (s *Store) matches(f Filter, idx uint64) (bool, error) {
	if f.empty() {
		return true, nil
	}
	sum, err := s.Summary(idx)
	if err != nil {
		return false, fmt.Errorf("query: %w", err)
	}
	return f.match(&sum), nil
}
