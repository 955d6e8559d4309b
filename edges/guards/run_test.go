package guards

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chio-ledger/chio/schemas"
)

// stubGuard returns a fixed verdict and counts its calls.
type stubGuard struct {
	name  string
	res   Result
	err   error
	panic bool
	calls int
}

func (s *stubGuard) Name() string { return s.name }

func (s *stubGuard) Check(context.Context, *Call) (Result, error) {
	s.calls++
	if s.panic {
		panic("boom: secret-value")
	}
	return s.res, s.err
}

func TestRun(t *testing.T) {
	allow := func(name, details string) *stubGuard {
		return &stubGuard{name: name, res: Result{Allow: true, Details: details}}
	}
	long := strings.Repeat("é", 1000) // 2000 bytes
	tests := []struct {
		name     string
		guards   func() []Guard
		evidence []schemas.GuardEvidence
		deniedBy string
		reason   string
	}{
		{
			name:     "all allow",
			guards:   func() []Guard { return []Guard{allow("A", ""), allow("B", "noted")} },
			evidence: []schemas.GuardEvidence{{GuardName: "A", Verdict: true}, {GuardName: "B", Verdict: true, Details: "noted"}},
		},
		{
			name:     "no guards",
			guards:   func() []Guard { return nil },
			evidence: []schemas.GuardEvidence{},
		},
		{
			name: "first deny stops",
			guards: func() []Guard {
				return []Guard{allow("A", ""), &stubGuard{name: "PathGuard", res: Result{Details: `/path: ".." traversal`}}, allow("C", "")}
			},
			evidence: []schemas.GuardEvidence{{GuardName: "A", Verdict: true}, {GuardName: "PathGuard", Details: `/path: ".." traversal`}},
			deniedBy: "PathGuard",
			reason:   `guard "PathGuard" denied the request: /path: ".." traversal`,
		},
		{
			name:     "deny without details",
			guards:   func() []Guard { return []Guard{&stubGuard{name: "X"}} },
			evidence: []schemas.GuardEvidence{{GuardName: "X"}},
			deniedBy: "X",
			reason:   `guard "X" denied the request`,
		},
		{
			name: "error fails closed",
			guards: func() []Guard {
				return []Guard{&stubGuard{name: "E", res: Result{Allow: true}, err: errors.New("backend down")}, allow("C", "")}
			},
			evidence: []schemas.GuardEvidence{{GuardName: "E", Details: "error: backend down (fail-closed)"}},
			deniedBy: "E",
			reason:   `guard "E" denied the request: error: backend down (fail-closed)`,
		},
		{
			name:     "panic fails closed without the panic value",
			guards:   func() []Guard { return []Guard{&stubGuard{name: "P", panic: true}} },
			evidence: []schemas.GuardEvidence{{GuardName: "P", Details: "error: run guard: guard panicked (fail-closed)"}},
			deniedBy: "P",
			reason:   `guard "P" denied the request: error: run guard: guard panicked (fail-closed)`,
		},
		{
			name:     "nil guard fails closed",
			guards:   func() []Guard { return []Guard{nil} },
			evidence: []schemas.GuardEvidence{{GuardName: "NilGuard", Details: "error: run guard: nil guard (fail-closed)"}},
			deniedBy: "NilGuard",
			reason:   `guard "NilGuard" denied the request: error: run guard: nil guard (fail-closed)`,
		},
		{
			name:     "unnamed guard",
			guards:   func() []Guard { return []Guard{allow("", "")} },
			evidence: []schemas.GuardEvidence{{GuardName: "UnnamedGuard", Verdict: true}},
		},
		{
			name:     "long details are cut",
			guards:   func() []Guard { return []Guard{allow("L", long)} },
			evidence: []schemas.GuardEvidence{{GuardName: "L", Verdict: true, Details: strings.Repeat("é", 510) + "…"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, by, reason := Run(context.Background(), tt.guards(), &Call{})
			if by != tt.deniedBy || reason != tt.reason {
				t.Errorf("deniedBy %q reason %q, want %q %q", by, reason, tt.deniedBy, tt.reason)
			}
			if len(ev) != len(tt.evidence) {
				t.Fatalf("evidence %+v, want %+v", ev, tt.evidence)
			}
			for i := range ev {
				if ev[i] != tt.evidence[i] {
					t.Errorf("evidence[%d] = %+v, want %+v", i, ev[i], tt.evidence[i])
				}
				if len(ev[i].Details) > MaxDetails || !utf8.ValidString(ev[i].Details) {
					t.Errorf("evidence[%d] details: %d bytes, valid UTF-8 %v", i, len(ev[i].Details), utf8.ValidString(ev[i].Details))
				}
			}
			if strings.Contains(reason, "secret-value") {
				t.Error("the panic value leaked into the reason")
			}
		})
	}
}

func TestRunCanceledContext(t *testing.T) {
	g := &stubGuard{name: "A", res: Result{Allow: true}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ev, by, reason := Run(ctx, []Guard{g}, &Call{})
	if g.calls != 0 {
		t.Error("the guard ran on a canceled context")
	}
	if by != "A" || len(ev) != 1 || ev[0].Verdict || ev[0].Details != "error: run guard: context canceled (fail-closed)" {
		t.Errorf("got %+v %q %q", ev, by, reason)
	}
	ev, by, _ = Run(context.Background(), []Guard{g}, nil)
	if by != "A" || ev[0].Details != "error: run guard: nil call (fail-closed)" {
		t.Errorf("nil call: %+v", ev)
	}
}

func TestRunDefaultPipeline(t *testing.T) {
	gs := defaultPipeline(t)
	cs, err := CompileConstraints([]schemas.Constraint{constraint("prefix", `{"pointer":"/path","prefix":"docs/"}`)})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args     string
		deniedBy string
		details  string
	}{
		{`{"path":"docs/readme.md","url":"https://api.example.com/v1","query":"hello world","limit":10}`, "", ""},
		{`{"path":"src/main.go"}`, "ConstraintGuard", `constraint[0] prefix at "/path": value lacks the required prefix`},
		{`{"path":"docs/../.ssh/id_rsa"}`, "PathGuard", `/path: ".." traversal`},
		{`{"path":"docs/a","url":"https://169.254.169.254/"}`, "EgressAllowlistGuard", `/url: link-local address`},
		{`{"path":"docs/a","token":"` + fake("AKIA", "IOSFODNN7EXAMPLE") + `"}`, "SecretLeakGuard", `/token: aws access key id`},
		{`{"path":"docs/a","path":"src/b"}`, "ConstraintGuard", `error: constraint guard: decode arguments: offset 17: duplicate object key (fail-closed)`},
	}
	for _, tt := range tests {
		ev, by, reason := Run(context.Background(), gs, &Call{Arguments: json.RawMessage(tt.args), Constraints: cs})
		if by != tt.deniedBy {
			t.Errorf("%s: denied by %q (%s), want %q", tt.args, by, reason, tt.deniedBy)
			continue
		}
		if by == "" {
			if len(ev) != len(gs) || reason != "" {
				t.Errorf("%s: %+v %q", tt.args, ev, reason)
			}
			continue
		}
		last := ev[len(ev)-1]
		if last.GuardName != by || last.Verdict || last.Details != tt.details {
			t.Errorf("%s: last evidence %+v, want details %q", tt.args, last, tt.details)
		}
		if want := `guard "` + by + `" denied the request: ` + tt.details; reason != want {
			t.Errorf("%s: reason %q, want %q", tt.args, reason, want)
		}
		for _, e := range ev[:len(ev)-1] {
			if !e.Verdict {
				t.Errorf("%s: earlier evidence %+v failed", tt.args, e)
			}
		}
	}
}

func TestTruncateDetails(t *testing.T) {
	if got := truncateDetails("ok"); got != "ok" {
		t.Errorf("got %q", got)
	}
	got := truncateDetails(strings.Repeat("a", 2000))
	if len(got) != MaxDetails || !strings.HasSuffix(got, "…") {
		t.Errorf("len %d", len(got))
	}
	got = truncateDetails("bad \xff utf8")
	if !utf8.ValidString(got) {
		t.Errorf("got %q", got)
	}
	got = truncateDetails(strings.Repeat("€", 400)) // 1200 bytes, 3 per rune
	if len(got) > MaxDetails || !utf8.ValidString(got) {
		t.Errorf("len %d valid %v", len(got), utf8.ValidString(got))
	}
}
