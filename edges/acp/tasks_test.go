package acp

import (
	"sync"
	"testing"

	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

type taskResult struct {
	Task   Task           `json:"task"`
	Result map[string]any `json:"result"`
}

// newTask makes a deferred task of capability under tok.
func (f *fixture) newTask(t testing.TB, tok, capability string) Task {
	t.Helper()
	var got taskResult
	ok(t, f.call(t, tok, MethodStream, map[string]any{"capabilityId": capability, "arguments": map[string]any{"path": "/x"}}), &got)
	if got.Task.ID == "" || got.Task.State != TaskPending || got.Task.CapabilityID != capability {
		t.Fatalf("task %+v", got.Task)
	}
	return got.Task
}

// decisionsOf counts the decision events of a task.
func decisionsOf(t testing.TB, f *fixture, taskID string) []schemas.DecisionEvent {
	t.Helper()
	var out []schemas.DecisionEvent
	for _, d := range natstest.Decisions(t, f.js) {
		if d.TaskID == taskID {
			out = append(out, d)
		}
	}
	return out
}

func TestStreamThenResume(t *testing.T) {
	f := start(t)
	tok := wildcard(t)
	task := f.newTask(t, tok, "read_file")
	if n := len(decisionsOf(t, f, task.ID)); n != 0 {
		t.Fatalf("tool/stream dispatched %d calls; it must defer", n)
	}
	var got taskResult
	ok(t, f.call(t, tok, MethodResume, map[string]any{"taskId": task.ID}), &got)
	if got.Task.State != TaskCompleted || got.Task.ReceiptID == "" || got.Result["tool"] != "read_file" {
		t.Fatalf("resume: %+v", got)
	}
	ds := decisionsOf(t, f, task.ID)
	if len(ds) != 1 || ds[0].ReceiptID != got.Task.ReceiptID || metaOf(t, ds[0]).ACP.Method != MethodResume ||
		metaOf(t, ds[0]).ACP.TaskID != task.ID {
		t.Fatalf("decisions %+v", ds)
	}
	// A second resume answers the stored result and runs nothing.
	var again taskResult
	ok(t, f.call(t, tok, ExtensionPrefix+MethodResume, map[string]any{"taskId": task.ID}), &again)
	if again.Task.ReceiptID != got.Task.ReceiptID || again.Result["tool"] != "read_file" {
		t.Fatalf("second resume: %+v", again)
	}
	if n := len(decisionsOf(t, f, task.ID)); n != 1 {
		t.Fatalf("%d dispatches after two resumes", n)
	}
	// A finished task cannot be canceled.
	if a := f.call(t, tok, MethodCancel, map[string]any{"taskId": task.ID}); a.code() != CodeTaskState {
		t.Fatalf("cancel of a completed task: code %d", a.code())
	}
}

func TestConcurrentResumesDispatchOnce(t *testing.T) {
	f := start(t)
	tok := wildcard(t)
	for range 5 {
		task := f.newTask(t, tok, "search")
		var wg sync.WaitGroup
		answers := make([]answer, 2)
		errs := make([]error, 2)
		for i := range answers {
			wg.Go(func() { answers[i], errs[i] = f.try(tok, MethodResume, map[string]any{"taskId": task.ID}) })
		}
		wg.Wait()
		succeeded := 0
		for i, a := range answers {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			switch a.code() {
			case 0:
				succeeded++
			case CodeTaskState: // the other resume was still running it
			default:
				t.Fatalf("resume: %+v", a.Error)
			}
		}
		if succeeded == 0 {
			t.Fatal("no resume succeeded")
		}
		if n := len(decisionsOf(t, f, task.ID)); n != 1 {
			t.Fatalf("%d dispatches for one task", n)
		}
	}
}

// A task is stored only for a tool the caller may invoke; one that needs
// permission is resumed only under an explicit grant: under a wildcard the
// resume is denied with a receipt, and the task stays pending.
func TestStreamAndResumeEnforcePermission(t *testing.T) {
	f := start(t)
	ro := token(t, "cap-ro", agentKey, grant("read_file"))
	if a := f.call(t, ro, MethodStream, map[string]any{"capabilityId": "search"}); a.code() != CodeInvalidParams {
		t.Fatalf("stream of a tool the caller may not invoke: %d", a.code())
	}
	task := f.newTask(t, wildcard(t), "exec_command")
	a := f.call(t, wildcard(t), MethodResume, map[string]any{"taskId": task.ID})
	if v := verdict(t, a); a.code() != CodeDenied || v.ReceiptID == "" {
		t.Fatalf("resume under a wildcard: %d %+v", a.code(), v)
	}
	if a := f.call(t, wildcard(t), MethodInvoke, map[string]any{"capabilityId": "exec_command", "arguments": map[string]any{"path": "ls"}}); a.code() != CodeDenied {
		t.Fatalf("invoke under a wildcard: %d", a.code())
	}
}

func TestResumeDeniedAndFailed(t *testing.T) {
	f := start(t)
	cases := []struct {
		name, tok, capability string
		code                  int
		state                 TaskState
	}{
		{"tool error", wildcard(t), "explode", CodeToolFailed, TaskFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task := f.newTask(t, c.tok, c.capability)
			for range 2 { // the second answers the stored outcome
				a := f.call(t, c.tok, MethodResume, map[string]any{"taskId": task.ID})
				v := verdict(t, a)
				if a.code() != c.code || v.ReceiptID == "" || v.Task == nil || v.Task.State != c.state {
					t.Fatalf("code %d verdict %+v", a.code(), v)
				}
			}
			if n := len(decisionsOf(t, f, task.ID)); n != 1 {
				t.Fatalf("%d dispatches", n)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	f := start(t)
	tok := wildcard(t)
	task := f.newTask(t, tok, "read_file")
	var got taskResult
	ok(t, f.call(t, tok, MethodCancel, map[string]any{"taskId": task.ID}), &got)
	if got.Task.State != TaskCanceled {
		t.Fatalf("cancel: %+v", got.Task)
	}
	ok(t, f.call(t, tok, MethodCancel, map[string]any{"taskId": task.ID}), &got) // idempotent
	if a := f.call(t, tok, MethodResume, map[string]any{"taskId": task.ID}); a.code() != CodeTaskState {
		t.Fatalf("resume of a canceled task: code %d", a.code())
	}
	if n := len(decisionsOf(t, f, task.ID)); n != 0 {
		t.Fatalf("a canceled task dispatched %d calls", n)
	}
}

func TestTasksAreBoundToTheirCaller(t *testing.T) {
	f := start(t)
	mine := wildcard(t)
	theirs := token(t, "cap-other", otherKey, grant("*"))
	task := f.newTask(t, mine, "read_file")
	cases := []struct {
		name, method string
		params       map[string]any
		code         int
	}{
		{"resume by another", MethodResume, map[string]any{"taskId": task.ID}, CodeTaskNotFound},
		{"cancel by another", MethodCancel, map[string]any{"taskId": task.ID}, CodeTaskNotFound},
		{"unknown id", MethodResume, map[string]any{"taskId": "0190d5b6-0000-7000-8000-000000000000"}, CodeTaskNotFound},
		{"not an id", MethodCancel, map[string]any{"taskId": "../x"}, CodeTaskNotFound},
		{"no id", MethodResume, map[string]any{}, CodeInvalidParams},
		{"stream unknown", MethodStream, map[string]any{"capabilityId": "browser_click"}, CodeInvalidParams},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if a := f.call(t, theirs, c.method, c.params); a.code() != c.code {
				t.Fatalf("code %d (%v), want %d", a.code(), a.Error, c.code)
			}
		})
	}
	var got taskResult
	ok(t, f.call(t, mine, MethodResume, map[string]any{"taskId": task.ID}), &got)
	if got.Task.State != TaskCompleted {
		t.Fatalf("owner's resume: %+v", got.Task)
	}
}

// A streaming tool's deferred task runs with InvokeStream; its chunks are
// returned together by tool/resume.
func TestResumeCollectsStream(t *testing.T) {
	f := start(t)
	tok := wildcard(t)
	task := f.newTask(t, tok, "tail_terminal")
	var got struct {
		Task   Task
		Result struct{ Chunks []string }
	}
	ok(t, f.call(t, tok, MethodResume, map[string]any{"taskId": task.ID}), &got)
	if got.Task.State != TaskCompleted || len(got.Result.Chunks) != 2 || got.Result.Chunks[1] != "line 2" {
		t.Fatalf("resume: %+v", got)
	}
}
