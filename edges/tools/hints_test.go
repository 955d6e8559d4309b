package tools

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

func TestReadHints(t *testing.T) {
	defaults := Hints{Publish: true, TargetProtocol: TargetNative}
	with := func(f func(*Hints)) Hints {
		h := defaults
		f(&h)
		return h
	}
	cases := []struct {
		name    string
		tool    schemas.ToolDefinition
		want    Hints
		wantErr string // substring; empty means success
	}{
		{name: "defaults", tool: def(`{"type":"object"}`), want: defaults},
		{name: "fast latency", tool: withLatency(def(`{}`), schemas.LatencyFast), want: defaults},
		{name: "moderate latency streams", tool: withLatency(def(`{}`), schemas.LatencyModerate),
			want: with(func(h *Hints) { h.Streaming, h.PartialOutput = true, true })},
		{name: "slow latency streams and cancels", tool: withLatency(def(`{}`), schemas.LatencySlow),
			want: with(func(h *Hints) { h.Streaming, h.PartialOutput, h.Cancellation = true, true, true })},
		{name: "explicit streaming false also turns partial output off", tool: withLatency(def(`{"x-chio-streaming":false}`), schemas.LatencySlow),
			want: with(func(h *Hints) { h.Cancellation = true })},
		{name: "partial output defaults to explicit streaming", tool: def(`{"x-chio-streaming":true}`),
			want: with(func(h *Hints) { h.Streaming, h.PartialOutput = true, true })},
		{name: "partial output without streaming", tool: def(`{"x-chio-partial-output":true}`),
			want: with(func(h *Hints) { h.PartialOutput = true })},
		{name: "explicit cancellation false on slow", tool: withLatency(def(`{"x-chio-cancellation":false}`), schemas.LatencySlow),
			want: with(func(h *Hints) { h.Streaming, h.PartialOutput = true, true })},
		{name: "all hints", tool: def(`{"x-chio-publish":false,"x-chio-approval-required":true,"x-chio-streaming":true,"x-chio-cancellation":true,"x-chio-partial-output":false,"x-chio-target-protocol":"a2a"}`),
			want: Hints{ApprovalRequired: true, Streaming: true, Cancellation: true, TargetProtocol: TargetA2A}},
		{name: "output schema is the fallback", tool: withOutput(def(`{}`), `{"x-chio-publish":false,"x-chio-target-protocol":"open_ai"}`),
			want: with(func(h *Hints) { h.Publish, h.TargetProtocol = false, TargetOpenAI })},
		{name: "input schema wins over output schema", tool: withOutput(def(`{"x-chio-publish":true}`), `{"x-chio-publish":false}`),
			want: defaults},
		{name: "nested hints are not top level", tool: def(`{"properties":{"x-chio-publish":false}}`), want: defaults},
		{name: "escaped key is the same key", tool: def(`{"x\u002dchio-publish":false}`),
			want: with(func(h *Hints) { h.Publish = false })},
		{name: "has_side_effects", tool: func() schemas.ToolDefinition { d := def(`{}`); d.HasSideEffects = true; return d }(),
			want: with(func(h *Hints) { h.SideEffects = true })},
		{name: "destructive annotation", tool: withAnnotations(def(`{}`), schemas.ToolAnnotations{Destructive: true}),
			want: with(func(h *Hints) { h.SideEffects = true })},
		{name: "requires_approval annotation", tool: withAnnotations(def(`{"x-chio-approval-required":false}`), schemas.ToolAnnotations{RequiresApproval: true}),
			want: with(func(h *Hints) { h.ApprovalRequired = true })},
		{name: "read-only annotation changes nothing", tool: withAnnotations(def(`{}`), schemas.ToolAnnotations{ReadOnly: true}), want: defaults},
		{name: "every target protocol", tool: def(`{"x-chio-target-protocol":"http"}`),
			want: with(func(h *Hints) { h.TargetProtocol = TargetHTTP })},

		{name: "string true is not a bool", tool: def(`{"x-chio-publish":"true"}`), wantErr: "x-chio-publish must be a JSON boolean"},
		{name: "null is not a bool", tool: def(`{"x-chio-streaming":null}`), wantErr: "x-chio-streaming must be a JSON boolean"},
		{name: "number is not a bool", tool: def(`{"x-chio-cancellation":1}`), wantErr: "x-chio-cancellation"},
		{name: "object is not a bool", tool: def(`{"x-chio-partial-output":{}}`), wantErr: "x-chio-partial-output"},
		{name: "wrong type in input is not rescued by output", tool: withOutput(def(`{"x-chio-approval-required":"no"}`), `{"x-chio-approval-required":false}`),
			wantErr: "x-chio-approval-required"},
		{name: "wrong type in output fallback", tool: withOutput(def(`{}`), `{"x-chio-publish":0}`), wantErr: "x-chio-publish"},
		{name: "unknown target protocol", tool: def(`{"x-chio-target-protocol":"grpc"}`), wantErr: "is not native"},
		{name: "target protocol is case-sensitive", tool: def(`{"x-chio-target-protocol":"A2A"}`), wantErr: "is not native"},
		{name: "target protocol not a string", tool: def(`{"x-chio-target-protocol":true}`), wantErr: "must be a JSON string"},
		{name: "duplicate hint key", tool: def(`{"x-chio-publish":true,"x-chio-publish":false}`), wantErr: "given twice"},
		{name: "input schema array", tool: def(`[]`), wantErr: "input_schema: not a JSON object"},
		{name: "input schema null", tool: def(`null`), wantErr: "input_schema: not a JSON object"},
		{name: "input schema missing", tool: def(``), wantErr: "input_schema"},
		{name: "input schema malformed", tool: def(`{"a":}`), wantErr: "malformed JSON"},
		{name: "input schema trailing data", tool: def(`{} {}`), wantErr: "trailing data"},
		{name: "output schema not an object", tool: withOutput(def(`{}`), `"x"`), wantErr: "output_schema"},
		{name: "unknown latency hint", tool: withLatency(def(`{}`), "glacial"), wantErr: "latency_hint"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReadHints(&c.tool)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("ReadHints error = %v, want one containing %q", err, c.wantErr)
				}
				if !strings.Contains(err.Error(), "read hints") {
					t.Errorf("error %q does not name the operation", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadHints: %v", err)
			}
			if got != c.want {
				t.Errorf("ReadHints = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestReadHintsNil(t *testing.T) {
	if _, err := ReadHints(nil); err == nil {
		t.Fatal("ReadHints(nil) succeeded")
	}
}

// FuzzReadHints feeds random schemas and latency hints through ReadHints and
// both ratings: nothing may panic, and a tool whose hints fail to read must
// rate unsupported on both surfaces.
func FuzzReadHints(f *testing.F) {
	for _, seed := range []struct{ in, out, latency string }{
		{`{"type":"object"}`, ``, ``},
		{`{"x-chio-streaming":true,"x-chio-partial-output":true}`, ``, ``},
		{`{"x-chio-publish":"true"}`, `{}`, `slow`},
		{`{"x-chio-target-protocol":"acp"}`, `{"x-chio-cancellation":true}`, `moderate`},
		{`{"x-chio-publish":true,"x-chio-publish":false}`, ``, `fast`},
		{`[1,2]`, `null`, `x`},
		{`{"a":{"b":[{"x-chio-publish":false}]}}`, `{"x-chio-approval-required":true}`, ``},
	} {
		f.Add([]byte(seed.in), []byte(seed.out), seed.latency, false, false)
	}
	f.Fuzz(func(t *testing.T, in, out []byte, latency string, sideEffects, destructive bool) {
		tool := &schemas.ToolDefinition{
			Name:           "fuzz_tool",
			InputSchema:    in,
			OutputSchema:   out,
			HasSideEffects: sideEffects,
			LatencyHint:    schemas.LatencyHint(latency),
			Annotations:    &schemas.ToolAnnotations{Destructive: destructive},
		}
		h, err := ReadHints(tool)
		a2a := A2AFidelity(tool, A2AProfile{Stdio: true})
		sse := A2AFidelity(tool, A2AProfile{GRPC: true})
		_, acp := ACPFidelity(tool, "")
		for _, fid := range []Fidelity{a2a, sse, acp} {
			checkFidelityShape(t, fid)
			if err != nil && fid.Kind != FidelityUnsupported {
				t.Fatalf("hints error %v but fidelity %+v", err, fid)
			}
		}
		if err == nil {
			if h.TargetProtocol == "" || !knownTarget(h.TargetProtocol) {
				t.Fatalf("target protocol %q", h.TargetProtocol)
			}
			if h.SideEffects != (sideEffects || destructive) {
				t.Fatalf("side effects %v", h.SideEffects)
			}
			if !json.Valid(in) {
				t.Fatalf("invalid input schema %q accepted", in)
			}
		}
	})
}

// checkFidelityShape asserts a rating is well formed: caveats only when
// adapted, a reason only when unsupported.
func checkFidelityShape(t *testing.T, f Fidelity) {
	t.Helper()
	switch f.Kind {
	case FidelityLossless:
		if len(f.Caveats) != 0 || f.Reason != "" {
			t.Fatalf("lossless with extras: %+v", f)
		}
	case FidelityAdapted:
		if len(f.Caveats) == 0 || f.Reason != "" {
			t.Fatalf("adapted without caveats: %+v", f)
		}
	case FidelityUnsupported:
		if f.Reason == "" || len(f.Caveats) != 0 {
			t.Fatalf("unsupported without a reason: %+v", f)
		}
	default:
		t.Fatalf("unknown kind: %+v", f)
	}
}

func def(input string) schemas.ToolDefinition {
	return schemas.ToolDefinition{Name: "some_tool", Description: "d", InputSchema: json.RawMessage(input)}
}

func withLatency(d schemas.ToolDefinition, l schemas.LatencyHint) schemas.ToolDefinition {
	d.LatencyHint = l
	return d
}

func withOutput(d schemas.ToolDefinition, output string) schemas.ToolDefinition {
	d.OutputSchema = json.RawMessage(output)
	return d
}

func withAnnotations(d schemas.ToolDefinition, a schemas.ToolAnnotations) schemas.ToolDefinition {
	d.Annotations = &a
	return d
}
