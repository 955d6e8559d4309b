package dispatch

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricsTimePublishes(t *testing.T) {
	reg := prometheus.NewRegistry()
	f := setup(t, WithMetrics(reg))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name  string
		ctx   context.Context
		token string
		want  map[string]uint64 // event/result → publishes so far
	}{
		{"allowed: decision and outcome", context.Background(), f.token, map[string]uint64{"decision/ok": 1, "outcome/ok": 1}},
		{"denied: decision only", context.Background(), "not-a-token", map[string]uint64{"decision/ok": 2, "outcome/ok": 1}},
		// The writer drops an event whose caller left before its write.
		{"caller gone: nothing written", cancelled, f.token, map[string]uint64{"decision/ok": 2, "outcome/ok": 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _ = f.d.Do(c.ctx, Call{Token: c.token, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{"text":"x"}`)})
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]uint64{}
			for _, mf := range mfs {
				if mf.GetName() != "chio_edge_publish_duration_seconds" {
					continue
				}
				for _, m := range mf.GetMetric() {
					l := map[string]string{}
					for _, p := range m.GetLabel() {
						l[p.GetName()] = p.GetValue()
					}
					got[l["event"]+"/"+l["result"]] = m.GetHistogram().GetSampleCount()
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("publishes %v, want %v", got, c.want)
			}
			for k, v := range c.want {
				if got[k] != v {
					t.Fatalf("publishes %v, want %v", got, c.want)
				}
			}
		})
	}
}
