package a2aadapter

import (
	"errors"
	"fmt"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/natstest"
)

// TestTaskRegistry runs the registry on a real embedded JetStream: a task is
// followed up only through the tool, server, binding, interface and tenant
// that observed it, by the caller whose call started it, and the records outlive the registry that wrote them.
func TestTaskRegistry(t *testing.T) {
	ns, _, js := natstest.Start(t)
	reg, err := OpenTaskRegistry(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := startPartner(t, partnerOpts{bindings: []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON}})
	a := discover(t, p, Config{Tasks: reg, Policy: Policy{Partner: "partner-a"}})
	id := startSlow(t, a)

	rec, err := reg.Lookup(t.Context(), a.ServerID(), string(id))
	want := TaskBinding{Tool: "slow", ServerID: a.ServerID(), InterfaceURL: p.srv.URL + "/jsonrpc", Binding: "JSONRPC"}
	if err != nil || rec.TaskBinding != want || rec.Partner != "partner-a" || rec.Source != SourceSendMessage ||
		rec.State == "" || rec.Updated.IsZero() {
		t.Fatalf("record %+v, %v; want binding %+v", rec, err, want)
	}

	t.Run("another caller's task is refused before any call", func(t *testing.T) {
		before := p.requests.Load()
		for _, args := range []string{fmt.Sprintf(`{"get_task":{"id":%q}}`, id), fmt.Sprintf(`{"cancel_task":{"id":%q}}`, id)} {
			inv := call(a, "slow", args)
			inv.Governance = &tools.Governance{RequestID: "r", ReceiptID: "r", Subject: "mallory"}
			if _, err := a.Invoke(t.Context(), inv); !errors.Is(err, ErrFollowUpRefused) {
				t.Fatalf("%s by another caller: err = %v, want ErrFollowUpRefused", args, err)
			}
		}
		if p.requests.Load() != before {
			t.Fatal("another caller's follow-up reached the partner")
		}
	})

	t.Run("foreign task ids are refused before any call", func(t *testing.T) {
		other := startPartner(t, partnerOpts{})
		elsewhere := discover(t, other, Config{Tasks: reg})
		for _, tc := range []struct {
			name string
			a    *Adapter
			tool string
			args string
		}{
			{"another tool's task", a, "echo", fmt.Sprintf(`{"get_task":{"id":%q}}`, id)},
			{"an unknown task", a, "slow", `{"get_task":{"id":"never-seen"}}`},
			{"cancel through another tool", a, "echo", fmt.Sprintf(`{"cancel_task":{"id":%q}}`, id)},
			{"subscribe through another tool", a, "stream", fmt.Sprintf(`{"subscribe_task":{"id":%q}}`, id)},
			{"push config through another tool", a, "echo", fmt.Sprintf(`{"list_push_configs":{"task_id":%q}}`, id)},
			{"continue another tool's task", a, "echo", fmt.Sprintf(`{"message":"more","task_id":%q}`, id)},
			{"reference an unknown task", a, "slow", `{"message":"more","reference_task_ids":["never-seen"]}`},
			{"the same task id on another server", elsewhere, "slow", fmt.Sprintf(`{"get_task":{"id":%q}}`, id)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := p.requests.Load() + other.requests.Load()
				_, err := tc.a.Invoke(t.Context(), call(tc.a, tc.tool, tc.args))
				if !errors.Is(err, ErrFollowUpRefused) {
					t.Fatalf("err = %v, want ErrFollowUpRefused", err)
				}
				if after := p.requests.Load() + other.requests.Load(); after != before {
					t.Fatalf("a refused follow-up reached a partner")
				}
			})
		}
	})

	t.Run("a follow-up must match every field of the binding", func(t *testing.T) {
		if err := reg.check(t.Context(), want, string(id)); err != nil {
			t.Fatalf("the recording binding is refused: %v", err)
		}
		for _, change := range []func(*TaskBinding){
			func(b *TaskBinding) { b.Tool = "echo" },
			func(b *TaskBinding) { b.ServerID = "a2a:other.example" },
			func(b *TaskBinding) { b.InterfaceURL = p.srv.URL + "/rest" },
			func(b *TaskBinding) { b.Binding = "HTTP+JSON" },
			func(b *TaskBinding) { b.Tenant = "tenant-alpha" },
			func(b *TaskBinding) { b.Caller = "mallory" },
		} {
			b := want
			change(&b)
			if err := reg.check(t.Context(), b, string(id)); !errors.Is(err, ErrFollowUpRefused) {
				t.Errorf("binding %+v: err = %v, want ErrFollowUpRefused", b, err)
			}
		}
	})

	t.Run("survives a restart", func(t *testing.T) {
		_, js2 := natstest.Connect(t, ns)
		reg2, err := OpenTaskRegistry(t.Context(), js2, 1)
		if err != nil {
			t.Fatal(err)
		}
		b := discover(t, p, Config{Tasks: reg2, Policy: Policy{Partner: "partner-a"}})
		task := taskOf(t, invoke(t, b, "slow", fmt.Sprintf(`{"get_task":{"id":%q}}`, id)))
		if task.ID != id {
			t.Fatalf("get_task answered %s", task.ID)
		}
		rec, err := reg2.Lookup(t.Context(), b.ServerID(), string(id))
		if err != nil || rec.Source != SourceGetTask {
			t.Fatalf("record %+v, %v", rec, err)
		}
	})

	t.Run("a task reported for another binding is refused", func(t *testing.T) {
		rec := TaskRecord{TaskID: string(id), TaskBinding: want, Partner: "partner-a", State: "TASK_STATE_WORKING", Source: SourceGetTask}
		rec.Tool = "echo"
		if err := reg.observe(t.Context(), rec); !errors.Is(err, ErrTaskRebound) {
			t.Fatalf("err = %v, want ErrTaskRebound", err)
		}
		if got, _ := reg.Lookup(t.Context(), a.ServerID(), string(id)); got.Tool != "slow" {
			t.Fatalf("the record was rebound to %s", got.Tool)
		}
	})

	t.Run("an observation without a state keeps the last one", func(t *testing.T) {
		before, _ := reg.Lookup(t.Context(), a.ServerID(), string(id))
		rec := TaskRecord{TaskID: string(id), TaskBinding: want, Partner: "partner-a", Source: SourceSubscribeTask}
		if err := reg.observe(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
		after, _ := reg.Lookup(t.Context(), a.ServerID(), string(id))
		if after.State != before.State || after.Source != SourceSubscribeTask {
			t.Fatalf("record %+v after %+v", after, before)
		}
	})

	t.Run("replicas out of range", func(t *testing.T) {
		for _, n := range []int{0, 6} {
			if _, err := OpenTaskRegistry(t.Context(), js, n); err == nil {
				t.Errorf("replicas %d accepted", n)
			}
		}
	})
}
