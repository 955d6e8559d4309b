package a2a

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
)

// restCall sends one REST request and returns the status, headers and body.
func restCall(t *testing.T, method, url, tok, contentType, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("A2A-Version", "1.0")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// restReason is the ErrorInfo reason of an AIP-193 error body.
func restReason(t *testing.T, body []byte) (int, string) {
	t.Helper()
	var e struct {
		Error struct {
			Code    int    `json:"code"`
			Status  string `json:"status"`
			Message string `json:"message"`
			Details []struct {
				Type   string `json:"@type"`
				Reason string `json:"reason"`
			} `json:"details"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Status == "" || e.Error.Message == "" || len(e.Error.Details) == 0 {
		t.Fatalf("not an AIP-193 error: %s (%v)", body, err)
	}
	if e.Error.Details[0].Type != "type.googleapis.com/google.rpc.ErrorInfo" {
		t.Fatalf("first detail is not an ErrorInfo: %s", body)
	}
	return e.Error.Code, e.Error.Details[0].Reason
}

// The HTTP+JSON binding on the wire: results, AIP-193 errors with the
// status codes of A2A v1.0.0, and SSE on subscribe by GET and POST.
func TestRESTBinding(t *testing.T) {
	cl := startCluster(t, 1, "")
	tok := token(t, agentKey, "cap-rest")
	base := cl.edges[0].URL + RESTPath
	send := `{"message":{"messageId":"r1","role":"ROLE_USER","parts":[{"text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}`

	code, h, body := restCall(t, http.MethodPost, base+"/message:send", tok, "application/a2a+json", send)
	var sent struct {
		Task struct {
			ID     string `json:"id"`
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"task"`
	}
	if code != 200 || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || json.Unmarshal(body, &sent) != nil || sent.Task.Status.State != "TASK_STATE_COMPLETED" {
		t.Fatalf("send: %d %s", code, body)
	}
	id := sent.Task.ID
	if code, _, body := restCall(t, http.MethodGet, base+"/tasks/"+id+"?historyLength=0", tok, "", ""); code != 200 || strings.Contains(string(body), `"history"`) {
		t.Fatalf("get: %d %s", code, body)
	}
	if code, _, body := restCall(t, http.MethodGet, base+"/tasks?pageSize=1&status=TASK_STATE_COMPLETED", tok, "", ""); code != 200 || !strings.Contains(string(body), id) {
		t.Fatalf("list: %d %s", code, body)
	}

	errs := []struct {
		name, method, path, contentType, body, version string
		status                                         int
		reason                                         string
	}{
		{"unknown task", http.MethodGet, "/tasks/0190f3c2-7a1b-7c3d-9e4f-0a1b2c3d4e5f", "", "", "1.0", 404, "TASK_NOT_FOUND"},
		{"cancel a completed task", http.MethodPost, "/tasks/" + id + ":cancel", "application/json", "", "1.0", 409, "TASK_NOT_CANCELABLE"},
		{"subscribe to a completed task", http.MethodPost, "/tasks/" + id + ":subscribe", "application/json", "", "1.0", 400, "UNSUPPORTED_OPERATION"},
		{"text/plain body", http.MethodPost, "/message:send", "text/plain", send, "1.0", 415, "CONTENT_TYPE_NOT_SUPPORTED"},
		{"unsupported part media type", http.MethodPost, "/message:send", "application/json",
			`{"message":{"messageId":"r2","role":"ROLE_USER","parts":[{"text":"x","mediaType":"application/x-unsupported-tck-type"}]}}`, "1.0", 415, "CONTENT_TYPE_NOT_SUPPORTED"},
		{"bad params", http.MethodPost, "/message:send", "application/json", `{"message":"hi"}`, "1.0", 400, ""},
		{"bad query", http.MethodGet, "/tasks?pageSize=many", "", "", "1.0", 400, ""},
		{"unknown version", http.MethodGet, "/tasks/" + id, "", "", "99.0", 400, "VERSION_NOT_SUPPORTED"},
		{"no such path", http.MethodGet, "/nothing/here", "", "", "1.0", 404, ""},
		{"wrong method", http.MethodDelete, "/message:send", "", "", "1.0", 405, ""},
	}
	for _, c := range errs {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
			if c.contentType != "" {
				req.Header.Set("Content-Type", c.contentType)
			}
			req.Header.Set("A2A-Version", c.version)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			code, reason := restReason(t, b)
			if resp.StatusCode != c.status || code != c.status || (c.reason != "" && reason != c.reason) {
				t.Fatalf("%d %s, want %d %s: %s", resp.StatusCode, reason, c.status, c.reason, b)
			}
			if c.status == 405 && resp.Header.Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		})
	}
	if n := cl.tool.runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times; bad requests must not run it", n)
	}

	// Subscribe by GET (the proto) and by POST (the spec text), on a task
	// that is still running.
	res := restSendImmediately(t, base, tok)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req, _ := http.NewRequest(method, base+"/tasks/"+res+":subscribe", nil)
		req.Header.Set("A2A-Version", "1.0")
		req.Header.Set("Authorization", "Bearer "+tok)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(resp.Body)
		line, _ := br.ReadString('\n')
		for strings.HasPrefix(line, ":") || strings.HasPrefix(line, "id:") || line == "\n" {
			line, _ = br.ReadString('\n')
		}
		if resp.Header.Get("Content-Type") != "text/event-stream" || !strings.HasPrefix(line, `data: {"task":`) {
			t.Fatalf("%s subscribe: %s %q", method, resp.Header.Get("Content-Type"), line)
		}
		resp.Body.Close()
		cancel()
	}
	cl.step.open(stepChunks)
}

func restSendImmediately(t *testing.T, base, tok string) string {
	body := `{"message":{"messageId":"r3","role":"ROLE_USER","parts":[{"text":"x"}]},"configuration":{"returnImmediately":true},"metadata":{"chio":{"targetSkillId":"step_task"}}}`
	code, _, b := restCall(t, http.MethodPost, base+"/message:send", tok, "application/json", body)
	var r struct {
		Task struct{ ID string } `json:"task"`
	}
	if code != 200 || json.Unmarshal(b, &r) != nil || r.Task.ID == "" {
		t.Fatalf("send: %d %s", code, b)
	}
	return r.Task.ID
}

// The same conversation through JSON-RPC and REST yields equivalent tasks:
// one core serves both bindings.
func TestBindingsEquivalent(t *testing.T) {
	cl := startCluster(t, 1, "")
	tok := token(t, agentKey, "cap-equiv")
	ctx := context.Background()
	var tasks []*a2apb.Task
	for _, binding := range []a2apb.TransportProtocol{a2apb.TransportProtocolJSONRPC, a2apb.TransportProtocolHTTPJSON} {
		c := sdkClientOver(t, cl.edges[0].URL, tok, binding)
		m := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("same words"))
		m.ID = "same-id"
		res, err := c.SendMessage(ctx, &a2apb.SendMessageRequest{Message: m, Metadata: helloTarget})
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.GetTask(ctx, &a2apb.GetTaskRequest{ID: res.(*a2apb.Task).ID})
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, got)
	}
	norm := func(tk *a2apb.Task) string {
		meta := chioMetaOf(t, tk.Metadata)
		for _, k := range []string{"receiptId", "receiptIds", "capabilityId"} {
			if meta[k] == nil {
				t.Fatalf("no %s in %v", k, meta)
			}
			delete(meta, k)
		}
		var parts []string
		for _, a := range tk.Artifacts {
			for _, p := range a.Parts {
				b, _ := json.Marshal(p)
				parts = append(parts, string(b))
			}
		}
		hist, _ := json.Marshal(tk.History)
		mb, _ := json.Marshal(meta)
		sm, _ := json.Marshal(tk.Status.Message.Parts)
		return strings.Join([]string{string(tk.Status.State), strings.Join(parts, ","), string(hist), string(mb), string(sm)}, "\n")
	}
	if a, b := norm(tasks[0]), norm(tasks[1]); a != b {
		t.Fatalf("JSON-RPC task:\n%s\nREST task:\n%s", a, b)
	}
}
