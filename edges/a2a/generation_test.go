package a2a

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/tools/conformance"
)

// sseEvent is one SSE frame as a raw client reads it: its id and its data,
// a JSON-RPC response (JSON-RPC binding) or a StreamResponse (REST).
type sseEvent struct {
	id   string
	data map[string]any
}

// sseStream reads one SSE response; next returns its frames in order and
// ok false at its end.
type sseStream struct {
	resp   *http.Response
	frames chan sseEvent
}

// openSSE posts body to url (JSON-RPC if rpc, else REST) with the extra
// headers and returns the stream, or the decoded non-SSE answer.
func openSSE(t *testing.T, url, tok string, rpc bool, body string, headers map[string]string) (*sseStream, int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if rpc {
		req.Header.Set("Content-Type", "application/json")
	} else {
		req.Header.Set("Content-Type", "application/a2a+json")
	}
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set("Authorization", "Bearer "+tok)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return nil, resp.StatusCode, m
	}
	s := &sseStream{resp: resp, frames: make(chan sseEvent, 64)}
	go func() {
		defer close(s.frames)
		r := bufio.NewReader(resp.Body)
		var ev sseEvent
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data) != nil {
					return
				}
			case line == "" && ev.data != nil:
				s.frames <- ev
				ev = sseEvent{}
			}
		}
	}()
	t.Cleanup(func() { resp.Body.Close() })
	return s, resp.StatusCode, nil
}

func (s *sseStream) next(t *testing.T) (sseEvent, bool) {
	t.Helper()
	select {
	case ev, ok := <-s.frames:
		return ev, ok
	case <-time.After(time.Minute): // a hang, never a timing assertion
		t.Fatal("no SSE frame within a minute")
		return sseEvent{}, false
	}
}

// all reads the stream to its end.
func (s *sseStream) all(t *testing.T) []sseEvent {
	t.Helper()
	var out []sseEvent
	for {
		ev, ok := s.next(t)
		if !ok {
			return out
		}
		out = append(out, ev)
	}
}

func (s *sseStream) close() { s.resp.Body.Close() }

// member is the StreamResponse member of a frame ("task", "statusUpdate",
// …) and its object, unwrapping the JSON-RPC envelope if any.
func (ev sseEvent) member(t *testing.T) (string, map[string]any) {
	t.Helper()
	sr := ev.data
	if r, ok := ev.data["result"].(map[string]any); ok {
		sr = r
	}
	for _, k := range []string{"task", "message", "statusUpdate", "artifactUpdate"} {
		if v, ok := sr[k].(map[string]any); ok {
			return k, v
		}
	}
	t.Fatalf("frame %v holds no StreamResponse", ev.data)
	return "", nil
}

// generationOf is metadata[wire.GenerationKey] of a task or update.
func generationOf(t *testing.T, obj map[string]any) int64 {
	t.Helper()
	md, _ := obj["metadata"].(map[string]any)
	g, ok := md[wire.GenerationKey].(float64)
	if !ok {
		t.Fatalf("no generation in %v", obj)
	}
	return int64(g)
}

// checkFrame checks that a frame's id is the generation its object carries
// and returns it, with the member and the state of a status or task.
func checkFrame(t *testing.T, ev sseEvent) (int64, string, string) {
	t.Helper()
	kind, obj := ev.member(t)
	g := generationOf(t, obj)
	if ev.id != strconv.FormatInt(g, 10) {
		t.Fatalf("SSE id %q, but the %s carries generation %d", ev.id, kind, g)
	}
	state := ""
	if st, ok := obj["status"].(map[string]any); ok {
		state, _ = st["state"].(string)
	}
	return g, kind, state
}

// contiguous checks that frames carry generations from, from+1, … and
// returns their members and states as "kind:state" strings.
func contiguous(t *testing.T, frames []sseEvent, from int64) []string {
	t.Helper()
	var shapes []string
	for i, ev := range frames {
		g, kind, state := checkFrame(t, ev)
		if g != from+int64(i) {
			t.Fatalf("frame %d carries generation %d, want %d (frames %v)", i, g, from+int64(i), frames)
		}
		shapes = append(shapes, strings.TrimSuffix(kind+":"+state, ":"))
	}
	return shapes
}

const stepStreamBody = `{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"messageId":%q,"role":"ROLE_USER","parts":[{"text":"go"}]},"metadata":{"chio":{"targetSkillId":"step_task"}}}}`

func subscribeBody(id string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"SubscribeToTask","params":{"id":%q}}`, id)
}

// A streamed task's events carry generations 2, 3, … with no gap and no
// repeat (the snapshot at 2: created and working are one commit); a client
// whose stream broke resumes at another replica with Last-Event-ID and gets
// exactly the events it missed, the ones committed meanwhile and then the
// live ones; once the task has ended, a resume still gets the missed events
// through the terminal one, over JSON-RPC and REST alike.
func TestGenerationResumeAcrossReplicas(t *testing.T) {
	cl := startCluster(t, 2, "")
	tok := token(t, agentKey, "cap-gen")
	a, b := cl.edges[0].URL, cl.edges[1].URL

	st, _, res := openSSE(t, a+"/a2a", tok, true, fmt.Sprintf(stepStreamBody, "gen-1"), nil)
	if st == nil {
		t.Fatalf("no stream: %v", res)
	}
	first, ok := st.next(t)
	if !ok {
		t.Fatal("the stream ended at once")
	}
	g0, kind, _ := checkFrame(t, first)
	_, task := first.member(t)
	id, _ := task["id"].(string)
	if kind != "task" || g0 != 2 {
		t.Fatalf("first frame %s at generation %d, want the task at 2", kind, g0)
	}
	cl.step.open(1)
	ev, ok := st.next(t)
	if !ok {
		t.Fatal("the stream ended early")
	}
	if g, kind, _ := checkFrame(t, ev); g != 3 || kind != "artifactUpdate" {
		t.Fatalf("second frame %s at %d", kind, g)
	}
	st.close() // the connection breaks at generation 3

	// The second chunk lands while the client is away.
	cl.step.open(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		m := rpc(t, b, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"id":%q}}`, id))
		r, _ := m["result"].(map[string]any)
		if r != nil && generationOf(t, r) >= 4 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the second chunk never landed: %v", m)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Resume at replica B: generation 4 (replayed), then 5 and the end (live).
	rs, _, res := openSSE(t, b+"/a2a", tok, true, subscribeBody(id), map[string]string{"Last-Event-ID": "3"})
	if rs == nil {
		t.Fatalf("resume refused: %v", res)
	}
	ev, ok = rs.next(t)
	if !ok {
		t.Fatal("the resumed stream ended at once")
	}
	rest := []sseEvent{ev}
	cl.step.open(1)
	rest = append(rest, rs.all(t)...)
	if got := strings.Join(contiguous(t, rest, 4), " "); got != "artifactUpdate artifactUpdate statusUpdate:TASK_STATE_COMPLETED" {
		t.Fatalf("resumed frames %s", got)
	}
	if _, u := rest[0].member(t); u["append"] != true {
		t.Fatalf("generation 4 is not the second chunk: %v", u)
	}

	// The task has ended: a resume from anywhere before its end replays
	// through the terminal event, on either binding and either replica.
	rpcResume := func(url, last string) (*sseStream, int, map[string]any) {
		return openSSE(t, url+"/a2a", tok, true, subscribeBody(id), map[string]string{"Last-Event-ID": last})
	}
	restResume := func(url, last string) (*sseStream, int, map[string]any) {
		return openSSE(t, url+"/a2a/rest/tasks/"+id+":subscribe", tok, false, "", map[string]string{"Last-Event-ID": last})
	}
	for name, resume := range map[string]func(string, string) (*sseStream, int, map[string]any){"jsonrpc": rpcResume, "rest": restResume} {
		t.Run(name, func(t *testing.T) {
			s, _, res := resume(a, "1")
			if s == nil {
				t.Fatalf("resume from 1 refused: %v", res)
			}
			if got := strings.Join(contiguous(t, s.all(t), 2), " "); got != "statusUpdate:TASK_STATE_WORKING artifactUpdate artifactUpdate artifactUpdate statusUpdate:TASK_STATE_COMPLETED" {
				t.Fatalf("replay from 1: %s", got)
			}
			s, _, res = resume(b, "5")
			if s == nil {
				t.Fatalf("resume from 5 refused: %v", res)
			}
			if got := strings.Join(contiguous(t, s.all(t), 6), " "); got != "statusUpdate:TASK_STATE_COMPLETED" {
				t.Fatalf("replay from 5: %s", got)
			}
			// Nothing missed: nothing to subscribe to, as without the header.
			for _, last := range []string{"6", ""} {
				s, status, res := resume(b, last)
				if s != nil {
					t.Fatalf("Last-Event-ID %q on an ended task opened a stream", last)
				}
				if name == "jsonrpc" && errCode(res) != wire.CodeUnsupportedOperation || name == "rest" && status != 400 {
					t.Fatalf("Last-Event-ID %q: %d %v", last, status, res)
				}
			}
			// Newer than the task, or no generation at all: invalid params.
			for _, last := range []string{"7", "0", "12.3"} {
				s, status, res := resume(b, last)
				if s != nil {
					t.Fatalf("Last-Event-ID %q opened a stream", last)
				}
				if name == "jsonrpc" && errCode(res) != wire.CodeInvalidParams || name == "rest" && status != 400 {
					t.Fatalf("Last-Event-ID %q: %d %v", last, status, res)
				}
			}
		})
	}

	// The request field does what the header does.
	s, _, res := openSSE(t, b+"/a2a", tok, true,
		fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"SubscribeToTask","params":{"id":%q,"metadata":{%q:"4"}}}`, id, wire.LastGenerationKey), nil)
	if s == nil {
		t.Fatalf("resume by metadata refused: %v", res)
	}
	if got := strings.Join(contiguous(t, s.all(t), 5), " "); got != "artifactUpdate statusUpdate:TASK_STATE_COMPLETED" {
		t.Fatalf("replay from metadata 4: %s", got)
	}
	// The task as read carries the generation of its last event.
	m := rpc(t, a, tok, "1.0", fmt.Sprintf(`{"jsonrpc":"2.0","id":3,"method":"GetTask","params":{"id":%q}}`, id))
	if r, _ := m["result"].(map[string]any); r == nil || generationOf(t, r) != 6 {
		t.Fatalf("task %v", m)
	}
}

// Many streamed tasks at once: every stream's generations run from its
// snapshot to its terminal event without a gap or a repeat.
func TestGenerationsHaveNoGaps(t *testing.T) {
	cl := startCluster(t, 1, "", func(c *Config, _ jetstream.JetStream) { c.KeepAlive = time.Hour })
	cl.tick.chunks, cl.tick.pace = 20, 0
	tok := token(t, agentKey, "cap-gaps")
	go func() {
		for range 4 {
			cl.tick.gate <- struct{}{}
		}
	}()
	body := `{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"messageId":"g-%d","role":"ROLE_USER","parts":[{"text":"go"}]},"metadata":{"chio":{"targetSkillId":"tick_task"}}}}`
	done := make(chan []sseEvent, 4)
	for i := range 4 {
		st, _, res := openSSE(t, cl.edges[0].URL+"/a2a", tok, true, fmt.Sprintf(body, i), nil)
		if st == nil {
			t.Fatalf("no stream: %v", res)
		}
		go func() {
			var frames []sseEvent
			for ev := range st.frames {
				frames = append(frames, ev)
			}
			done <- frames
		}()
	}
	for range 4 {
		shapes := contiguous(t, <-done, 2)
		if len(shapes) != 22 || shapes[0] != "task:TASK_STATE_WORKING" || shapes[21] != "statusUpdate:TASK_STATE_COMPLETED" {
			t.Fatalf("stream %v", shapes)
		}
	}
}

// ifGenerationMatch on a follow-up: a stale generation is -32010 over
// JSON-RPC and 409 over REST, and changes nothing; the current one starts
// the turn.
func TestIfGenerationMatch(t *testing.T) {
	cl := startCluster(t, 1, "", func(c *Config, _ jetstream.JetStream) { c.DefaultSkill = conformance.ToolName })
	tok := token(t, agentKey, "cap-ifgen")
	url := cl.edges[0].URL
	m := rpc(t, url, tok, "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"tck-input-required-g1","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`)
	task, _ := m["result"].(map[string]any)["task"].(map[string]any)
	if task == nil {
		t.Fatalf("send: %v", m)
	}
	id, g := task["id"].(string), generationOf(t, task)
	if st := task["status"].(map[string]any)["state"]; st != "TASK_STATE_INPUT_REQUIRED" || g < 2 {
		t.Fatalf("task %s at generation %d", st, g)
	}
	followUp := func(msgID, config, meta string) string {
		return fmt.Sprintf(`{"message":{"messageId":%q,"taskId":%q,"role":"ROLE_USER","parts":[{"text":"more"}]},"configuration":{%s},"metadata":{%s}}`,
			msgID, id, config, meta)
	}
	rpcSend := func(params string) map[string]any {
		return rpc(t, url, tok, "1.0", `{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":`+params+`}`)
	}
	stale := fmt.Sprintf(`"ifGenerationMatch":%d`, g-1)
	for name, params := range map[string]string{
		"configuration":       followUp("tck-complete-task-g2", stale, ""),
		"configuration-proto": followUp("tck-complete-task-g2", fmt.Sprintf(`"ifGenerationMatch":"%d"`, g+1), ""),
		"metadata":            followUp("tck-complete-task-g2", "", fmt.Sprintf(`%q:%d`, wire.IfGenerationMatchKey, g+2)),
	} {
		res := rpcSend(params)
		if errCode(res) != wire.CodeGenerationMismatch {
			t.Fatalf("%s: %v", name, res)
		}
		info := res["error"].(map[string]any)["data"].([]any)[0].(map[string]any)
		if info["reason"] != "TASK_GENERATION_MISMATCH" || info["metadata"].(map[string]any)["currentGeneration"] != strconv.FormatInt(g, 10) {
			t.Fatalf("%s: error info %v", name, info)
		}
	}
	status, _, body := restCall(t, http.MethodPost, url+"/a2a/rest/message:send", tok, "application/a2a+json", followUp("tck-complete-task-g3", stale, ""))
	if code, reason := restReason(t, body); status != http.StatusConflict || code != http.StatusConflict || reason != "TASK_GENERATION_MISMATCH" ||
		!strings.Contains(string(body), `"status":"ABORTED"`) {
		t.Fatalf("REST mismatch: %d %s", status, body)
	}
	// Without a task to be about, the condition is bad input.
	if res := rpcSend(`{"message":{"messageId":"m-no-task","role":"ROLE_USER","parts":[{"text":"x"}]},"configuration":{"ifGenerationMatch":1}}`); errCode(res) != wire.CodeInvalidParams {
		t.Fatalf("ifGenerationMatch without a taskId: %v", res)
	}
	// Nothing changed; the matching generation starts the turn.
	res := rpcSend(followUp("tck-complete-task-g4", fmt.Sprintf(`"ifGenerationMatch":%d`, g), ""))
	done, _ := res["result"].(map[string]any)["task"].(map[string]any)
	if done == nil || done["status"].(map[string]any)["state"] != "TASK_STATE_COMPLETED" || generationOf(t, done) <= g {
		t.Fatalf("matching follow-up: %v", res)
	}
	// The turn has begun: the generation it was sent against is stale now.
	if res := rpcSend(followUp("tck-complete-task-g5", fmt.Sprintf(`"ifGenerationMatch":%d`, g), "")); errCode(res) != wire.CodeGenerationMismatch {
		t.Fatalf("replayed follow-up: %v", res)
	}

	// Two clients race with the generation both read: the check is part of
	// the write that starts the turn, so exactly one wins.
	m = rpc(t, url, tok, "1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"tck-input-required-g6","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`)
	task, _ = m["result"].(map[string]any)["task"].(map[string]any)
	if task == nil {
		t.Fatalf("send: %v", m)
	}
	id, g = task["id"].(string), generationOf(t, task)
	results := make(chan map[string]any, 8)
	for i := range 8 {
		go func() {
			results <- rpcSend(followUp(fmt.Sprintf("tck-complete-task-race-%d", i), fmt.Sprintf(`"ifGenerationMatch":%d`, g), ""))
		}()
	}
	won := 0
	for range 8 {
		res := <-results
		switch {
		case res["result"] != nil:
			won++
		case errCode(res) != wire.CodeGenerationMismatch:
			t.Fatalf("a losing follow-up: %v", res)
		}
	}
	if won != 1 {
		t.Fatalf("%d follow-ups started the turn", won)
	}
}

// A subscription to a task waiting for input stays open: the follow-up
// message continues the turn and the stream ends with the terminal status
// (the conformance kit's STREAM-SUB-002), with the official Go client and
// on the raw wire; a streaming send still ends at input-required.
func TestSubscribeWhileInputRequired(t *testing.T) {
	cl := startCluster(t, 2, "", func(c *Config, _ jetstream.JetStream) { c.DefaultSkill = conformance.ToolName })
	tok := token(t, agentKey, "cap-subir")
	a, b := sdkClient(t, cl.edges[0].URL, tok), sdkClient(t, cl.edges[1].URL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	park := func(msgID string) a2apb.TaskID {
		t.Helper()
		res, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: tckMessage(msgID, "hi")})
		if err != nil {
			t.Fatal(err)
		}
		task, ok := res.(*a2apb.Task)
		if !ok || task.Status.State != a2apb.TaskStateInputRequired {
			t.Fatalf("send: %+v", res)
		}
		return task.ID
	}
	finish := func(id a2apb.TaskID, msgID string) {
		t.Helper()
		m := tckMessage(msgID, "done")
		m.TaskID = id
		if _, err := a.SendMessage(ctx, &a2apb.SendMessageRequest{Message: m}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("sdk", func(t *testing.T) {
		id := park("tck-input-required-s1")
		first := make(chan string, 1)
		var evs []a2apb.Event
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			evs, err = collect(t, b.SubscribeToTask(ctx, &a2apb.SubscribeToTaskRequest{ID: id}), first)
		}()
		select {
		case <-first:
		case <-done:
			t.Fatalf("the subscription ended before the follow-up: %v %v", eventJSON(t, evs), err)
		}
		finish(id, "tck-complete-task-s1")
		<-done
		if err != nil {
			t.Fatal(err)
		}
		end, ok := evs[len(evs)-1].(*a2apb.TaskStatusUpdateEvent)
		if !ok || end.Status.State != a2apb.TaskStateCompleted {
			t.Fatalf("events %v", eventJSON(t, evs))
		}
		if snap := evs[0].(*a2apb.Task); snap.Status.State != a2apb.TaskStateInputRequired {
			t.Fatalf("snapshot %+v", snap)
		}
	})

	t.Run("raw", func(t *testing.T) {
		id := park("tck-input-required-r1")
		st, _, res := openSSE(t, cl.edges[1].URL+"/a2a", tok, true, subscribeBody(string(id)), nil)
		if st == nil {
			t.Fatalf("subscribe: %v", res)
		}
		first, ok := st.next(t)
		if !ok {
			t.Fatal("the subscription ended at once")
		}
		g, kind, state := checkFrame(t, first)
		if kind != "task" || state != "TASK_STATE_INPUT_REQUIRED" {
			t.Fatalf("first frame %s %s", kind, state)
		}
		finish(id, "tck-complete-task-r1")
		shapes := contiguous(t, st.all(t), g+1)
		if len(shapes) == 0 || shapes[len(shapes)-1] != "statusUpdate:TASK_STATE_COMPLETED" || shapes[0] != "statusUpdate:TASK_STATE_WORKING" {
			t.Fatalf("after the follow-up: %v", shapes)
		}
	})

	t.Run("send-stream-ends-at-input-required", func(t *testing.T) {
		var last a2apb.Event
		for ev, err := range a.SendStreamingMessage(ctx, &a2apb.SendMessageRequest{Message: tckMessage("tck-input-required-x1", "hi")}) {
			if err != nil {
				t.Fatal(err)
			}
			last = ev
		}
		if u, ok := last.(*a2apb.TaskStatusUpdateEvent); !ok || u.Status.State != a2apb.TaskStateInputRequired {
			t.Fatalf("last event %+v", last)
		}
	})
}
