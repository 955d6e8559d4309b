package a2a

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// answerTask is a task as a blocking send of hello_task leaves it, with
// more of everything a message can carry.
func answerTask(t testing.TB) *taskstore.Task {
	t.Helper()
	must := func(raw json.RawMessage, err error) json.RawMessage {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	task := &taskstore.Task{ID: "0190a0b0-0000-7000-8000-000000000001", TaskHead: schemas.TaskHead{
		ContextID: "0190a0b0-0000-7000-8000-000000000002", State: taskstore.StateCompleted,
		StatusTime: time.Date(2026, 11, 27, 7, 0, 0, 123456789, time.UTC), ReceiptIDs: []string{"0190a0b0-0000-7000-8000-000000000003"},
		Generation: 3,
	}}
	data := json.RawMessage(`{"arguments":{"text":"world"},"message":"hello from a2a","n":1.5,"z":[1,2,{"b":null}]}`)
	task.History = []json.RawMessage{
		must(encodeStored(&wire.Message{MessageID: "m1", ContextID: task.ContextID, Role: wire.RoleUser, Parts: []wire.Part{wire.TextPart("world")}})),
		must(encodeStored(&wire.Message{MessageID: "m2", ContextID: task.ContextID, TaskID: task.ID, Role: wire.RoleUser,
			Parts:    []wire.Part{wire.URLPart("https://example.com/f", "text/plain", "f.txt"), wire.RawPart([]byte("raw"), "application/octet-stream", "")},
			Metadata: map[string]any{"k": "v", "n": 2.0}, Extensions: []string{"https://example.com/ext"}, ReferenceTaskIDs: []string{"t0"}})),
	}
	task.StatusMessage = must(encodeStored(agentMessage(task, []wire.Part{wire.DataPart(data)})))
	task.Artifacts = []taskstore.Artifact{{Data: must(storedDialect.EncodeArtifact(&wire.Artifact{ArtifactID: "a1", Name: "result", Parts: []wire.Part{wire.DataPart(data)}}))}}
	task.Metadata = mustJSON(chioMeta(nil, modeBlocking, true, ""))
	return task
}

// slowAnswer is the answer through the canonical model.
func slowAnswer(t testing.TB, d wire.Dialect, task *taskstore.Task, hl *int, send bool) []byte {
	t.Helper()
	w, err := toWire(task, hl, true)
	if err != nil {
		t.Fatal(err)
	}
	var raw json.RawMessage
	if send {
		raw, err = d.EncodeSendResult(w, nil)
	} else {
		raw, err = d.EncodeTask(w)
	}
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestStoredAnswerMatchesModel: the 1.0 answer spliced from the stored
// JSON is byte for byte the one encoded through the canonical model, for
// a send's result and a task, with and without history limits, metadata
// and generation; where the stored metadata spells a value otherwise (an
// escaped <), it is the same JSON value.
func TestStoredAnswerMatchesModel(t *testing.T) {
	d := wire.DialectOf(wire.V10)
	zero, one := 0, 1
	cases := map[string]func(*taskstore.Task){
		"completed":     func(*taskstore.Task) {},
		"no metadata":   func(t *taskstore.Task) { t.Metadata, t.ReceiptIDs, t.Generation = nil, nil, 0 },
		"null metadata": func(t *taskstore.Task) { t.Metadata, t.Generation = json.RawMessage("null"), 0 },
		"working":       func(t *taskstore.Task) { t.State, t.StatusMessage, t.Artifacts = taskstore.StateWorking, nil, nil },
		"no history":    func(t *taskstore.Task) { t.History = nil },
		"no time":       func(t *taskstore.Task) { t.StatusTime = time.Time{} },
	}
	for name, change := range cases {
		for _, hl := range []*int{nil, &zero, &one} {
			for _, send := range []bool{true, false} {
				task := answerTask(t)
				change(task)
				raw, ok, err := encodeStored10(d, task, hl, send)
				if err != nil || !ok {
					t.Fatalf("%s: encodeStored10 = %v, %v", name, ok, err)
				}
				if want := slowAnswer(t, d, task, hl, send); string(raw) != string(want) {
					t.Errorf("%s (history %v, send %v):\n got %s\nwant %s", name, hl, send, raw, want)
				}
			}
		}
	}

	task := answerTask(t)
	task.Metadata = json.RawMessage(`{"chio":{"denyReason":"a <b> & c"},"x":{"b":1,"a":2}}`)
	raw, ok, err := encodeStored10(d, task, nil, true)
	if err != nil || !ok {
		t.Fatalf("encodeStored10 = %v, %v", ok, err)
	}
	var got, want any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(slowAnswer(t, d, task, nil, true), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("escaped metadata:\n got %v\nwant %v", got, want)
	}
}

// TestStoredAnswerFallsBack: another dialect, chunks to merge and
// metadata that is not an object take the canonical model's path (or
// its error).
func TestStoredAnswerFallsBack(t *testing.T) {
	task := answerTask(t)
	if _, ok, _ := encodeStored10(wire.DialectOf(wire.V03), task, nil, true); ok {
		t.Error("0.3 took the 1.0 path")
	}
	chunked := answerTask(t)
	chunked.Artifacts = append(chunked.Artifacts, taskstore.Artifact{Data: chunked.Artifacts[0].Data, Append: true})
	if _, ok, _ := encodeStored10(wire.DialectOf(wire.V10), chunked, nil, true); ok {
		t.Error("chunks were not merged")
	}
	bad := answerTask(t)
	bad.Metadata = json.RawMessage(`[1]`)
	if _, _, err := encodeStored10(wire.DialectOf(wire.V10), bad, nil, true); err == nil {
		t.Error("metadata that is not an object was served")
	}
}

func BenchmarkAnswerEncoding(b *testing.B) {
	task := answerTask(b)
	d := wire.DialectOf(wire.V10)
	b.Run("model", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			slowAnswer(b, d, task, nil, true)
		}
	})
	b.Run("stored", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := encodeStored10(d, task, nil, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAnswerMarks: the quick read of metadata.chio says deny and reply
// exactly when the full checks could apply, and both when it cannot read
// the metadata.
func TestAnswerMarks(t *testing.T) {
	for _, c := range []struct {
		meta        string
		deny, reply bool
	}{
		{`{"chio":{"decision":"allow"}}`, false, false},
		{`{"chio":{"decision":"deny","denyGuard":"grant"}}`, true, false},
		{`{"chio":{"decision":"allow","reply":"message"}}`, false, true},
		{`{"other":1}`, false, false},
		{`null`, false, false},
		{``, true, true},
		{`[1]`, true, true},
		{`{"chio":{"decision":1}}`, false, false},
	} {
		deny, reply := answerMarks(&taskstore.Task{TaskHead: schemas.TaskHead{Metadata: json.RawMessage(c.meta)}})
		if deny != c.deny || reply != c.reply {
			t.Errorf("answerMarks(%s) = %v, %v; want %v, %v", c.meta, deny, reply, c.deny, c.reply)
		}
	}
}

// TestSkillOfPublished: the registry resolves a published skill to the
// very entry the edge read when it was built, so skillOf serves that
// skill's facts without reading its definition again, and they are what
// reading it gives; an entry the edge never saw is read now.
func TestSkillOfPublished(t *testing.T) {
	cl := startCluster(t, 1, "")
	e := cl.raw[0]
	hits := 0
	for _, s := range e.published {
		en, err := e.registry.ResolveTool(e.cfg.Exposure, s.entry.Tool.Name)
		if err != nil {
			continue // a name several servers offer resolves to none
		}
		if en != s.entry {
			t.Errorf("%s resolves to another entry than the published one", s.entry.Tool.Name)
			continue
		}
		hits++
		got := e.skillOf(en)
		h, _ := tools.ReadHints(en.Tool)
		if !reflect.DeepEqual(got.hints, h) || got.native != isNative(en) || got.fidelity.Publishable() != tools.A2AFidelity(en.Tool, tools.A2AProfile{}).Publishable() {
			t.Errorf("%s: skillOf = %+v", en.Tool.Name, got)
		}
	}
	if hits == 0 {
		t.Fatal("no published skill resolved")
	}
	other := *e.published[0].entry
	if got := e.skillOf(&other); got.entry != &other || !got.fidelity.Publishable() {
		t.Errorf("an unseen entry: %+v", got)
	}
}

// TestServedMetadataLinks: servedMetadata is the JSON value of
// schemas.LinkTaskReceipts' result with the generation added (the path
// toWire takes), for every shape of metadata the rule distinguishes.
func TestServedMetadataLinks(t *testing.T) {
	metas := []string{
		``, `null`, ` {} `, `{"chio":null}`, `{"chio":{}}`, `{"other":{"b":1,"a":[1,2]},"chio":{"decision":"allow","receiptId":"r0"}}`,
		`{"chio":{"receiptPending":true}}`, `{"chio":{"receiptPending":true,"receiptId":null}}`, `{"chio":{"receiptPending":true,"receiptId":"r0"}}`,
		`{"chio":{"receiptPending":false}}`, `{"chio":"not an object"}`, `{"chio":[1]}`, `{"x":"a <b> & c"}`,
		`{"chio":{"receiptIds":["stale"],"receiptBearing":false,"receiptPending": true }}`,
	}
	for _, meta := range metas {
		for _, receipts := range [][]string{nil, {}, {"r1"}, {"r1", "r2"}} {
			for _, g := range []int64{0, 4} {
				got, err := servedMetadata(json.RawMessage(meta), receipts, g)
				if err != nil {
					t.Fatalf("servedMetadata(%s, %v, %d): %v", meta, receipts, g, err)
				}
				wantMap, err := linkedMetadata(json.RawMessage(meta), receipts)
				if err != nil {
					t.Fatal(err)
				}
				wantMap = withGeneration(wantMap, g)
				if raw, err := json.Marshal(wantMap); err != nil || json.Unmarshal(raw, &wantMap) != nil {
					t.Fatal(err) // the generation as a JSON number, as decoded
				}
				var gotMap map[string]any
				if len(got) > 0 {
					if err := json.Unmarshal(got, &gotMap); err != nil {
						t.Fatalf("servedMetadata(%s): %s: %v", meta, got, err)
					}
				}
				if len(gotMap) == 0 && len(wantMap) == 0 {
					continue
				}
				if !reflect.DeepEqual(gotMap, wantMap) {
					t.Errorf("servedMetadata(%s, %v, %d) = %s; want %v", meta, receipts, g, got, wantMap)
				}
			}
		}
	}
	for _, meta := range []string{`[1]`, `"x"`, `1`} {
		if _, err := servedMetadata(json.RawMessage(meta), nil, 0); err == nil {
			t.Errorf("servedMetadata(%s) served metadata that is not an object", meta)
		}
		if _, err := linkedMetadata(json.RawMessage(meta), nil); err == nil {
			t.Errorf("linkedMetadata(%s) served it: the two paths disagree", meta)
		}
	}
}
