package tools

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// The three caveats of the hello-a2a agent card, copied from the example.
var helloCaveats = []string{
	"stream-capable tools execute through 'message/stream' deferred tasks; output is surfaced on follow-up 'task/get' rather than incremental transport updates",
	"stream chunks are collated into the terminal task payload instead of pushed as incremental A2A events",
	"partial output is preserved only in the terminal task payload, not incremental updates",
}

func TestA2AFidelity(t *testing.T) {
	sideEffects := def(`{}`)
	sideEffects.HasSideEffects = true
	deferred, sse, grpc := A2AProfile{Stdio: true}, A2AProfile{}, A2AProfile{GRPC: true}
	hello := def(`{"type":"object","x-chio-streaming":true,"x-chio-partial-output":true}`)
	streamSSE := "stream output is delivered incrementally: SendStreamingMessage ('message/stream' in 0.3) and SubscribeToTask ('tasks/resubscribe') push each chunk as an artifact update as the tool produces it, over SSE on the JSON-RPC and HTTP+JSON bindings; a blocking SendMessage ('message/send') answers once the call ends, with every chunk in the task's artifacts"
	streamGRPC := strings.Replace(streamSSE, "HTTP+JSON bindings;", "HTTP+JSON bindings and over gRPC server streaming;", 1)

	cases := []struct {
		name    string
		tool    schemas.ToolDefinition
		profile A2AProfile
		kind    FidelityKind
		caveats []string
		reason  string // substring
	}{
		{name: "plain tool", tool: def(`{"type":"object"}`), profile: deferred, kind: FidelityLossless},
		{name: "plain tool, HTTP edge", tool: def(`{}`), profile: sse, kind: FidelityLossless},
		{name: "hello tool, stdio", tool: hello, profile: deferred, kind: FidelityAdapted, caveats: helloCaveats},
		{name: "hello tool, HTTP edge", tool: hello, profile: sse, kind: FidelityAdapted, caveats: []string{streamSSE, a2aCaveatPartialSSE}},
		{name: "hello tool, HTTP edge with gRPC", tool: hello, profile: grpc, kind: FidelityAdapted, caveats: []string{streamGRPC, a2aCaveatPartialSSE}},
		{name: "side effects", tool: sideEffects, kind: FidelityAdapted, caveats: []string{a2aCaveatSideEffects}},
		{name: "destructive", tool: withAnnotations(def(`{}`), schemas.ToolAnnotations{Destructive: true}), kind: FidelityAdapted, caveats: []string{a2aCaveatSideEffects}},
		{name: "streaming alone, stdio", tool: def(`{"x-chio-streaming":true,"x-chio-partial-output":false}`), profile: deferred, kind: FidelityAdapted, caveats: helloCaveats[:2]},
		{name: "streaming alone, HTTP edge", tool: def(`{"x-chio-streaming":true,"x-chio-partial-output":false}`), profile: sse, kind: FidelityAdapted, caveats: []string{streamSSE}},
		{name: "partial output alone, stdio", tool: def(`{"x-chio-partial-output":true}`), profile: deferred, kind: FidelityAdapted, caveats: helloCaveats[2:]},
		{name: "partial output alone, HTTP edge", tool: def(`{"x-chio-partial-output":true}`), profile: sse, kind: FidelityAdapted, caveats: []string{a2aCaveatPartialSSE}},
		{name: "cancellation alone, stdio", tool: def(`{"x-chio-cancellation":true}`), profile: deferred, kind: FidelityAdapted, caveats: []string{a2aCaveatCancelTask}},
		{name: "cancellation alone, HTTP edge", tool: def(`{"x-chio-cancellation":true}`), profile: sse, kind: FidelityAdapted, caveats: []string{a2aCaveatCancelSSE}},
		{name: "slow side-effecting tool, in order", tool: withLatency(sideEffects, schemas.LatencySlow), profile: deferred, kind: FidelityAdapted,
			caveats: append(append([]string{a2aCaveatSideEffects}, helloCaveats...), a2aCaveatCancelTask)},
		{name: "slow side-effecting tool, HTTP edge", tool: withLatency(sideEffects, schemas.LatencySlow), profile: sse, kind: FidelityAdapted,
			caveats: []string{a2aCaveatSideEffects, streamSSE, a2aCaveatPartialSSE, a2aCaveatCancelSSE}},
		{name: "publish false", tool: def(`{"x-chio-publish":false}`), kind: FidelityUnsupported, reason: "x-chio-publish=false"},
		{name: "publish false via output schema", tool: withOutput(def(`{}`), `{"x-chio-publish":false}`), kind: FidelityUnsupported, reason: "x-chio-publish=false"},
		{name: "approval hint", tool: def(`{"x-chio-approval-required":true}`), kind: FidelityUnsupported, reason: "approval"},
		{name: "approval annotation", tool: withAnnotations(def(`{}`), schemas.ToolAnnotations{RequiresApproval: true}), kind: FidelityUnsupported, reason: "approval"},
		{name: "approval beats everything, SSE profile", tool: withAnnotations(hello, schemas.ToolAnnotations{RequiresApproval: true}), profile: sse, kind: FidelityUnsupported, reason: "approval"},
		{name: "bad hint fails closed", tool: def(`{"x-chio-streaming":"yes"}`), kind: FidelityUnsupported, reason: "cannot be read"},
		{name: "bad target protocol fails closed", tool: def(`{"x-chio-target-protocol":"smtp"}`), kind: FidelityUnsupported, reason: "cannot be read"},
		{name: "bad schema fails closed", tool: def(`not json`), kind: FidelityUnsupported, reason: "cannot be read"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := A2AFidelity(&c.tool, c.profile)
			checkFidelityShape(t, got)
			if got.Kind != c.kind || !slices.Equal(got.Caveats, c.caveats) || !strings.Contains(got.Reason, c.reason) {
				t.Errorf("A2AFidelity = %+v\nwant kind %s caveats %q reason ~%q", got, c.kind, c.caveats, c.reason)
			}
			if got.Publishable() != (c.kind != FidelityUnsupported) {
				t.Errorf("Publishable = %v for %s", got.Publishable(), got.Kind)
			}
		})
	}
	if got := A2AFidelity(nil, deferred); got.Kind != FidelityUnsupported {
		t.Errorf("A2AFidelity(nil) = %+v", got)
	}
}

// The hello card's bridgeFidelity object, byte for byte after compaction.
func TestA2AFidelityHelloJSON(t *testing.T) {
	tool := def(`{"type":"object","x-chio-streaming":true,"x-chio-partial-output":true}`)
	got, err := json.Marshal(A2AFidelity(&tool, A2AProfile{Stdio: true}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"kind":"adapted","caveats":["stream-capable tools execute through 'message/stream' deferred tasks; output is surfaced on follow-up 'task/get' rather than incremental transport updates","stream chunks are collated into the terminal task payload instead of pushed as incremental A2A events","partial output is preserved only in the terminal task payload, not incremental updates"]}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	for _, f := range []struct {
		fid  Fidelity
		want string
	}{
		{Fidelity{Kind: FidelityLossless}, `{"kind":"lossless"}`},
		{unsupported("r"), `{"kind":"unsupported","reason":"r"}`},
	} {
		if got, _ := json.Marshal(f.fid); string(got) != f.want {
			t.Errorf("got %s, want %s", got, f.want)
		}
	}
	if (Fidelity{}).Publishable() || (Fidelity{Kind: "full"}).Publishable() {
		t.Error("an unknown kind is publishable")
	}
}

func TestInferACPCategory(t *testing.T) {
	cases := []struct {
		name     string
		fallback ACPCategory
		want     ACPCategory
	}{
		{"read_file", "", ACPFilesystem},
		{"write_file", "", ACPFilesystem},
		{"safe_read_file_v2", "", ACPFilesystem},
		{"list_dir", "", ACPFilesystem},
		{"fs_stat", "", ACPFilesystem},
		{"my_fs_stat", "", ACPTool}, // fs_ counts only as a prefix
		{"exec_command", "", ACPTerminal},
		{"run_shell", "", ACPTerminal},
		{"open_terminal", "", ACPTerminal},
		{"run_command", "", ACPTerminal},
		{"browser_click", "", ACPBrowser},
		{"navigate_to", "", ACPBrowser},
		{"take_screenshot", "", ACPBrowser},
		{"search", "", ACPTool},
		{"get_weather", "", ACPTool},
		{"get_weather", ACPTerminal, ACPTerminal},
		{"fs_exec", "", ACPFilesystem},           // filesystem rule comes first
		{"shell_screenshot", "", ACPTerminal},    // terminal before browser
		{"read_file", ACPBrowser, ACPFilesystem}, // a match beats the fallback
		{"ExecCommand", "", ACPTerminal},         // case-insensitive
		{"Browser_Click", "", ACPBrowser},
		{"FS_STAT", "", ACPFilesystem},
	}
	for _, c := range cases {
		if got := InferACPCategory(c.name, c.fallback); got != c.want {
			t.Errorf("InferACPCategory(%q, %q) = %q, want %q", c.name, c.fallback, got, c.want)
		}
	}
}

func TestACPFidelity(t *testing.T) {
	named := func(name, input string) schemas.ToolDefinition {
		d := def(input)
		d.Name = name
		return d
	}
	mutating := func(d schemas.ToolDefinition) schemas.ToolDefinition {
		d.HasSideEffects = true
		return d
	}
	cases := []struct {
		name     string
		tool     schemas.ToolDefinition
		fallback ACPCategory
		cat      ACPCategory
		kind     FidelityKind
		caveats  []string
		reason   string
	}{
		{name: "read_file lossless", tool: named("read_file", `{}`), cat: ACPFilesystem, kind: FidelityLossless},
		{name: "exec_command lossless", tool: named("exec_command", `{}`), cat: ACPTerminal, kind: FidelityLossless},
		{name: "write_file needs permission preview", tool: mutating(named("write_file", `{}`)), cat: ACPFilesystem, kind: FidelityAdapted,
			caveats: []string{acpCaveatPermission}},
		{name: "slow terminal", tool: withLatency(named("run_shell", `{}`), schemas.LatencySlow), cat: ACPTerminal, kind: FidelityAdapted,
			caveats: []string{acpCaveatCollected, acpCaveatPartial, acpCaveatCancel}},
		{name: "all caveats in order", tool: withLatency(mutating(named("exec", `{}`)), schemas.LatencySlow), cat: ACPTerminal, kind: FidelityAdapted,
			caveats: []string{acpCaveatPermission, acpCaveatCollected, acpCaveatPartial, acpCaveatCancel}},
		{name: "generic read-only tool", tool: named("search", `{}`), cat: ACPTool, kind: FidelityAdapted, caveats: []string{acpCaveatGeneric}},
		{name: "generic streaming tool", tool: named("hello_task", `{"x-chio-streaming":true,"x-chio-partial-output":true}`), cat: ACPTool, kind: FidelityAdapted,
			caveats: []string{acpCaveatCollected, acpCaveatPartial, acpCaveatGeneric}},
		{name: "fallback filesystem is lossless", tool: named("search", `{}`), fallback: ACPFilesystem, cat: ACPFilesystem, kind: FidelityLossless},
		{name: "generic mutating tool", tool: mutating(named("search", `{}`)), cat: ACPTool, kind: FidelityUnsupported, reason: "generic mutating"},
		{name: "generic destructive tool", tool: withAnnotations(named("purge", `{}`), schemas.ToolAnnotations{Destructive: true}), cat: ACPTool, kind: FidelityUnsupported, reason: "generic mutating"},
		{name: "browser", tool: named("browser_click", `{}`), cat: ACPBrowser, kind: FidelityUnsupported, reason: "browser"},
		{name: "browser by fallback", tool: named("search", `{}`), fallback: ACPBrowser, cat: ACPBrowser, kind: FidelityUnsupported, reason: "browser"},
		{name: "publish false", tool: named("read_file", `{"x-chio-publish":false}`), cat: ACPFilesystem, kind: FidelityUnsupported, reason: "x-chio-publish=false"},
		{name: "approval", tool: named("read_file", `{"x-chio-approval-required":true}`), cat: ACPFilesystem, kind: FidelityUnsupported, reason: "approval"},
		{name: "bad hint", tool: named("read_file", `{"x-chio-publish":1}`), cat: ACPFilesystem, kind: FidelityUnsupported, reason: "cannot be read"},
		{name: "unknown default category", tool: named("search", `{}`), fallback: "fs", cat: "fs", kind: FidelityUnsupported, reason: "default ACP category"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cat, got := ACPFidelity(&c.tool, c.fallback)
			checkFidelityShape(t, got)
			if cat != c.cat || got.Kind != c.kind || !slices.Equal(got.Caveats, c.caveats) || !strings.Contains(got.Reason, c.reason) {
				t.Errorf("ACPFidelity = %q %+v\nwant %q kind %s caveats %q reason ~%q", cat, got, c.cat, c.kind, c.caveats, c.reason)
			}
		})
	}
	if cat, got := ACPFidelity(nil, ""); got.Kind != FidelityUnsupported || cat != ACPTool {
		t.Errorf("ACPFidelity(nil) = %q %+v", cat, got)
	}
}
