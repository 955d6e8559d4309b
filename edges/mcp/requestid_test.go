package mcp

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func TestStampIDs(t *testing.T) {
	cases := []struct {
		name, in, want string // want "" means unchanged
	}{
		{"call", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","arguments":{"a":"<b>"}}}`,
			`{"id":7,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"chio/jsonrpc_id":7},"arguments":{"a":"<b>"},"name":"x"}}`},
		{"string id, _meta kept, forged id overwritten",
			`{"jsonrpc":"2.0","id":"r1","method":"tools/call","params":{"name":"x","_meta":{"progressToken":1,"chio/jsonrpc_id":"forged"}}}`,
			`{"id":"r1","jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"chio/jsonrpc_id":"r1","progressToken":1},"name":"x"}}`},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}]`,
			`[{"id":1,"jsonrpc":"2.0","method":"tools/list"},{"id":2,"jsonrpc":"2.0","method":"tools/call","params":{"_meta":{"chio/jsonrpc_id":2},"name":"x"}}]`},
		{"other method", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, ""},
		{"notification", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}`, ""},
		{"params not an object", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}`, ""},
		{"_meta not an object", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":"m"}}`, ""},
		{"not JSON", `{"jsonrpc":`, ""},
		{"batch with null", `[null]`, ""},
	}
	for _, c := range cases {
		got := string(stampIDs([]byte(c.in)))
		want := c.want
		if want == "" {
			want = c.in
		}
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
	}
}

// Over stdio the ids are stamped line by line; a line too long to read
// whole, or one readMessages refuses, never reaches the SDK: its answer
// is the refusal's.
func TestStampingReader(t *testing.T) {
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`
	long := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"` + strings.Repeat("y", maxStampedLine) + `"}}`
	list := `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`
	dup := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"x","Name":"y"}}`
	in := call + "\n" + long + "\n" + list + "\n" + dup + "\n\n" + call // the last line has no newline
	var refused []string
	out, err := io.ReadAll(newStampingReader(strings.NewReader(in), func(id json.RawMessage, werr *jsonrpc.Error) {
		refused = append(refused, fmt.Sprintf("%s %d", id, werr.Code))
	}))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(out), "\n")
	stamped := string(stampIDs([]byte(call)))
	if len(lines) != 4 || lines[0] != stamped || lines[1] != list || lines[2] != "" || lines[3] != stamped {
		t.Fatalf("%d lines; first %q", len(lines), lines[0])
	}
	if want := []string{"null -32600", "4 -32602"}; !slices.Equal(refused, want) {
		t.Fatalf("refused %v, want %v", refused, want)
	}
	var m struct {
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil || m.Params.Meta[metaRequestID] != float64(1) {
		t.Fatalf("stamped %s", lines[0])
	}
}
