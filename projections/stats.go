package projections

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/schemas"
)

// Call statistics: per-minute counters the receipt fold keeps, keyed by
// the receipt's own timestamp (never the folding clock), so a rebuild
// counts exactly what the live projection counted.
//
// Only verified receipts count: anyone who can publish on the receipts
// stream could otherwise inflate the charts with unsigned ones.

// Kinds of call counter (the byte after the minute in an S key).
const (
	statOutcome = 'o' // label: the verdict
	statGuard   = 'g' // label: the denying guard
	statTool    = 't' // label: tool_server + "/" + tool_name, of denials
)

// Statistics limits.
const (
	DefaultStatsBucket = 60
	MaxStatsBucket     = 3600
	DefaultStatsRange  = time.Hour
	// MaxStatsRange bounds until - since: 7 days is 10080 one-minute
	// buckets, a series a chart still draws.
	MaxStatsRange = 7 * 24 * time.Hour
)

// callStat is what one receipt adds to the counters.
type callStat struct {
	minute  uint64
	verdict string
	guard   string // "" unless denied
	tool    string // "" unless denied
}

// callStatOf is the counters' view of a verified receipt.
func callStatOf(r *schemas.Receipt) *callStat {
	st := &callStat{minute: r.Timestamp - r.Timestamp%60, verdict: string(r.Decision.Verdict)}
	if r.Decision.Verdict == schemas.VerdictDeny {
		st.guard, st.tool = r.Decision.Guard, r.ToolServer+"/"+r.ToolName
	}
	return st
}

// count adds st to the counters; a nil st counts nothing.
func (st *callStat) count(tx *txn) {
	if st == nil {
		return
	}
	tx.add(callStatKey(st.minute, statOutcome, st.verdict), 1)
	if st.verdict == string(schemas.VerdictDeny) {
		tx.add(callStatKey(st.minute, statGuard, st.guard), 1)
		tx.add(callStatKey(st.minute, statTool, st.tool), 1)
	}
}

func callStatKey(minute uint64, kind byte, label string) []byte {
	return append(append(appendU64([]byte{prefixCallStats}, minute), kind), label...)
}

// CallStats is the body of GET /v1/stats/calls.
type CallStats struct {
	BucketSeconds uint64 `json:"bucket_seconds"`
	Since         uint64 `json:"since"`
	Until         uint64 `json:"until"`
	// Series has one entry per bucket from the one holding Since to the
	// one holding Until, empty ones included (zeros).
	Series []CallBucket `json:"series"`
	// DenialsByGuard and DenialsByTool have an entry per bucket and label
	// with denials, ordered by bucket, then label.
	DenialsByGuard []GuardCount `json:"denials_by_guard"`
	DenialsByTool  []ToolCount  `json:"denials_by_tool"`
}

// CallBucket counts the calls of one bucket by outcome.
type CallBucket struct {
	T          uint64 `json:"t"` // bucket start, Unix seconds
	Allow      uint64 `json:"allow"`
	Deny       uint64 `json:"deny"`
	Cancelled  uint64 `json:"cancelled"`
	Incomplete uint64 `json:"incomplete"`
}

// GuardCount counts one guard's denials in one bucket.
type GuardCount struct {
	T     uint64 `json:"t"`
	Guard string `json:"guard"`
	Count uint64 `json:"count"`
}

// ToolCount counts one tool's denials in one bucket.
type ToolCount struct {
	T     uint64 `json:"t"`
	Tool  string `json:"tool"` // tool_server + "/" + tool_name
	Count uint64 `json:"count"`
}

// callStats serves GET /v1/stats/calls?since=&until=&bucket=: calls by
// outcome and denials by guard and by tool, per bucket, counted from the
// receipts' timestamps. since and until are Unix seconds (inclusive;
// default the last hour, until - since at most MaxStatsRange); bucket is
// seconds, a multiple of 60 from 60 to 3600 (default 60). A bucket that
// overlaps the range counts whole. Only readers of every receipt may
// read it (an operator or an auditor): counts across tenants would tell a
// tenant of the others' activity. Anyone else is answered 403.
func (s *Service) callStats(c echo.Context) error {
	if !readauth.From(c).AllReceipts() {
		return deny(c, readauth.Forbidden("call statistics"))
	}
	q, ok, err := query(c, "since", "until", "bucket")
	if !ok {
		return err
	}
	bucket, ok, err := intParam(c, q, "bucket", DefaultStatsBucket, 60, MaxStatsBucket)
	if !ok {
		return err
	}
	if bucket%60 != 0 {
		return badParam(c, "bucket", "bucket must be a multiple of 60 seconds, got %d", bucket)
	}
	maxRange := uint64(MaxStatsRange / time.Second)
	until, ok, err := intParam(c, q, "until", uint64(time.Now().Unix()), 0, 1<<53)
	if !ok {
		return err
	}
	since, ok, err := intParam(c, q, "since", until-min(until, uint64(DefaultStatsRange/time.Second)), 0, 1<<53)
	if !ok {
		return err
	}
	switch {
	case since > until:
		return badParam(c, "since", "since (%d) is after until (%d)", since, until)
	case until-since > maxRange:
		return badParam(c, "since", "the range since..until must be at most %d seconds (7 days), got %d", maxRange, until-since)
	}
	snap := s.store.db.NewSnapshot()
	defer snap.Close()
	st, err := readCallStats(snap, since, until, bucket)
	if err != nil {
		return s.internal(c, err)
	}
	return c.JSON(http.StatusOK, st)
}

// readCallStats sums the minute counters of v into buckets covering
// since..until.
func readCallStats(v view, since, until, bucket uint64) (*CallStats, error) {
	first, last := since-since%bucket, until-until%bucket
	out := &CallStats{BucketSeconds: bucket, Since: since, Until: until,
		Series: make([]CallBucket, (last-first)/bucket+1), DenialsByGuard: []GuardCount{}, DenialsByTool: []ToolCount{}}
	for i := range out.Series {
		out.Series[i].T = first + uint64(i)*bucket
	}
	type labelled struct {
		t     uint64
		label string
	}
	guards, tools := map[labelled]uint64{}, map[labelled]uint64{}
	lower := appendU64([]byte{prefixCallStats}, first)
	upper := appendU64([]byte{prefixCallStats}, last+bucket)
	it, err := v.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, fmt.Errorf("read call stats: %w", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if len(k) < 10 {
			return nil, fmt.Errorf("read call stats: corrupt key %q", k)
		}
		minute, kind, label := binary.BigEndian.Uint64(k[1:9]), k[9], string(k[10:])
		raw, err := it.ValueAndErr()
		if err != nil {
			return nil, fmt.Errorf("read call stats: %w", err)
		}
		n, err := decodeU64(raw)
		if err != nil {
			return nil, fmt.Errorf("read call stats at minute %d: %w", minute, err)
		}
		t := minute - minute%bucket
		b := &out.Series[(t-first)/bucket]
		switch kind {
		case statOutcome:
			switch schemas.Verdict(label) {
			case schemas.VerdictAllow:
				b.Allow += n
			case schemas.VerdictDeny:
				b.Deny += n
			case schemas.VerdictCancelled:
				b.Cancelled += n
			case schemas.VerdictIncomplete:
				b.Incomplete += n
			}
		case statGuard:
			guards[labelled{t, label}] += n
		case statTool:
			tools[labelled{t, label}] += n
		}
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("read call stats: %w", err)
	}
	for k, n := range guards {
		out.DenialsByGuard = append(out.DenialsByGuard, GuardCount{T: k.t, Guard: k.label, Count: n})
	}
	for k, n := range tools {
		out.DenialsByTool = append(out.DenialsByTool, ToolCount{T: k.t, Tool: k.label, Count: n})
	}
	slices.SortFunc(out.DenialsByGuard, func(a, b GuardCount) int {
		if a.T != b.T {
			return cmp.Compare(a.T, b.T)
		}
		return strings.Compare(a.Guard, b.Guard)
	})
	slices.SortFunc(out.DenialsByTool, func(a, b ToolCount) int {
		if a.T != b.T {
			return cmp.Compare(a.T, b.T)
		}
		return strings.Compare(a.Tool, b.Tool)
	})
	return out, nil
}
