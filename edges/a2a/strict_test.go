package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	pb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// eventCount is how many decision and outcome events CHIO_EVENTS holds.
func eventCount(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	return len(streamEvents(t, js, schemas.SubjectDecision)) + len(streamEvents(t, js, schemas.SubjectOutcome))
}

// hostileDocs are the hostile variants of a valid send's parts: the whole
// document, its message's metadata, and its data part's value, each
// spliced into the document (at placeholder) as the whole of it.
type hostileDoc struct {
	name string
	doc  []byte
	err  error
}

func hostileDocs(doc string) []hostileDoc {
	const meta, data = `{"note":"n"}`, `{"text":"hi"}`
	if strings.Count(doc, meta) != 1 || strings.Count(doc, data) != 1 {
		panic("hostileDocs: no one metadata and data part to vary")
	}
	var out []hostileDoc
	for _, c := range hostilejson.Variants([]byte(doc)) {
		out = append(out, hostileDoc{"envelope/" + c.Name, c.Doc, c.Err})
	}
	for _, at := range []struct{ name, sample string }{{"message metadata", meta}, {"data part", data}} {
		for _, c := range hostilejson.Variants([]byte(at.sample)) {
			out = append(out, hostileDoc{at.name + "/" + c.Name, []byte(strings.Replace(doc, at.sample, string(c.Doc), 1)), c.Err})
		}
	}
	return out
}

// jsonrpcCode is the JSON-RPC code a strictjson refusal is answered with.
func jsonrpcCode(err error) int {
	if errors.Is(err, strictjson.ErrSyntax) || errors.Is(err, strictjson.ErrEncoding) {
		return wire.CodeParseError
	}
	return wire.CodeInvalidRequest
}

// Every hostile variant of a valid send (of the whole body, of the
// message's metadata, of its data part) is refused in the binding's own
// form, and writes no event; the valid send itself is served.
func TestHostileRequestsRefused(t *testing.T) {
	cl := startCluster(t, 1, token(t, agentKey, "cap-dev"))
	url := cl.edges[0].URL
	tok := token(t, agentKey, "cap-hostile")
	params := `{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"hello"},{"data":{"text":"hi"}}],"metadata":{"note":"n"}},"metadata":{"chio":{"targetSkillId":"hello_task"}}}`
	rpcSend := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":` + params + `}`
	stdioSend := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"type":"text","text":"hello"},{"type":"data","data":{"text":"hi"}}],"metadata":{"note":"n"}},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`
	before := eventCount(t, cl.js)

	t.Run("JSON-RPC", func(t *testing.T) {
		for _, h := range hostileDocs(rpcSend) {
			if got, want := errCode(rpc(t, url, tok, "1.0", string(h.doc))), jsonrpcCode(h.err); got != want {
				t.Errorf("%s: code %d, want %d", h.name, got, want)
			}
		}
	})
	t.Run("REST", func(t *testing.T) {
		for _, h := range hostileDocs(params) {
			status, _, body := restCall(t, http.MethodPost, url+RESTPath+"/message:send", tok, "application/json", string(h.doc))
			_, reason := restReason(t, body)
			want := "INVALID_REQUEST"
			if jsonrpcCode(h.err) == wire.CodeParseError {
				want = "PARSE_ERROR"
			}
			if status != http.StatusBadRequest || reason != want {
				t.Errorf("%s: HTTP %d %s, want 400 %s: %s", h.name, status, reason, want, body)
			}
		}
	})
	t.Run("stdio", func(t *testing.T) {
		for _, h := range hostileDocs(stdioSend) {
			var out bytes.Buffer
			if err := cl.raw[0].ServeStdio(context.Background(), bytes.NewReader(append(h.doc, '\n')), &out); err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(out.Bytes(), &m); err != nil {
				t.Fatalf("%s: answer %q: %v", h.name, out.Bytes(), err)
			}
			if got, want := errCode(m), jsonrpcCode(h.err); got != want || m["id"] != nil {
				t.Errorf("%s: code %d id %v, want %d and a null id", h.name, got, m["id"], want)
			}
		}
	})
	if after := eventCount(t, cl.js); after != before || cl.tool.runs.Load() != 0 {
		t.Fatalf("refused requests wrote %d events and ran the tool %d times", after-before, cl.tool.runs.Load())
	}

	// The valid send, on each binding, is served.
	if m := rpc(t, url, tok, "1.0", rpcSend); errCode(m) != 0 {
		t.Fatalf("JSON-RPC send: %v", m)
	}
	if status, _, body := restCall(t, http.MethodPost, url+RESTPath+"/message:send", tok, "application/json", params); status != http.StatusOK {
		t.Fatalf("REST send: HTTP %d %s", status, body)
	}
	var out bytes.Buffer
	if err := cl.raw[0].ServeStdio(context.Background(), strings.NewReader(stdioSend+"\n"), &out); err != nil || !strings.Contains(out.String(), `"completed"`) {
		t.Fatalf("stdio send: %s %v", out.String(), err)
	}
	if eventCount(t, cl.js) == before {
		t.Fatal("the valid sends wrote no event")
	}
}

// nestedValue is a protobuf Value holding lists nested depth deep.
func nestedValue(depth int) *structpb.Value {
	v := structpb.NewListValue(&structpb.ListValue{})
	for range depth - 1 {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	return v
}

// gRPC is protobuf, but its Struct and Value fields nest as JSON does: a
// message metadata or a data part nested past strictjson.MaxDepth is
// INVALID_ARGUMENT, with no event written; shallow ones are served.
func TestGRPCDepthRefused(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t))
	g.serve(t, cl)
	raw := rawGRPC(t, cl.raw[0].cfg.GRPCURL)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+token(t, agentKey, "cap-grpc-depth"))
	target, _ := structpb.NewStruct(map[string]any{"chio": map[string]any{"targetSkillId": "hello_task"}})
	send := func(meta, data *structpb.Value) error {
		msg := &pb.Message{MessageId: "m-depth", Role: pb.Role_ROLE_USER,
			Parts:    []*pb.Part{{Content: &pb.Part_Text{Text: "hi"}}, {Content: &pb.Part_Data{Data: data}}},
			Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"deep": meta}}}
		_, err := raw.SendMessage(ctx, &pb.SendMessageRequest{Message: msg, Metadata: target})
		return err
	}
	before := eventCount(t, cl.js)
	shallow := nestedValue(3)
	for _, tc := range []struct {
		name       string
		meta, data *structpb.Value
	}{
		{"metadata one past the limit", nestedValue(strictjson.MaxDepth), shallow},
		{"metadata far past the limit", nestedValue(2000), shallow},
		{"data part one past the limit", shallow, nestedValue(strictjson.MaxDepth)},
	} {
		if code, _, _ := grpcStatusOf(t, send(tc.meta, tc.data)); code != codes.InvalidArgument {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", tc.name, code)
		}
	}
	if after := eventCount(t, cl.js); after != before {
		t.Fatalf("refused requests wrote %d events", after-before)
	}
	if err := send(shallow, shallow); err != nil {
		t.Fatalf("a shallow send: %v", err)
	}
}

// FuzzStdioLine runs arbitrary lines through the stdio binding: it must
// not panic, must answer each line with one JSON-RPC response, and must
// read as a request (answer anything but a parse error or an invalid
// request) only a line that is strict JSON.
func FuzzStdioLine(f *testing.F) {
	valid := `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"type":"text","text":"hello"},{"type":"data","data":{"text":"hi"}}],"metadata":{"note":"n"}},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`
	f.Add([]byte(valid))
	f.Add([]byte(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"id":"x"}}`))
	for _, h := range hostileDocs(valid) {
		f.Add(h.doc)
	}
	cl := startCluster(f, 1, token(f, agentKey, "cap-fuzz"))
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.ContainsAny(line, "\r\n") {
			return // one line is one request
		}
		var out bytes.Buffer
		if err := cl.raw[0].ServeStdio(context.Background(), bytes.NewReader(append(line, '\n')), &out); err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			return
		}
		answer := bytes.TrimSpace(out.Bytes())
		if len(answer) == 0 { // a notification, read and not answered
			if err := strictjson.Valid(bytes.TrimSpace(line)); err != nil {
				t.Fatalf("read a line strictjson refuses: %v", err)
			}
			return
		}
		var m map[string]any
		if err := strictjson.Valid(answer); err != nil || json.Unmarshal(answer, &m) != nil {
			t.Fatalf("answer %q: %v", answer, err)
		}
		if code := errCode(m); code == wire.CodeParseError || code == wire.CodeInvalidRequest {
			return
		}
		if err := strictjson.Valid(bytes.TrimSpace(line)); err != nil {
			t.Fatalf("read a line strictjson refuses: %v", err)
		}
	})
}
