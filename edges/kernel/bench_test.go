package kernel

import (
	"context"
	"encoding/json"
	"testing"
)

// BenchmarkDecide measures one decision with a cached token: the static
// checks are cached, the per-call steps (time, revocation, grant, guards)
// all run. "cached" has no budget, so it touches no shared state;
// "kv_budget" adds the compare-and-set charge on JetStream KV, the cost
// of an exact budget across replicas.
func BenchmarkDecide(b *testing.B) {
	e := startNATS(b)
	k := newKernel(b, e, testPolicy(b, nil))
	args := json.RawMessage(`{"path":"docs/readme.md","url":"https://api.example.com/v1","query":"hello world","limit":10}`)
	free := header(b, issue(b, issuerKey, body("bench-free", grant("srv", "tool"))))
	g := grant("srv", "tool")
	g.MaxInvocations = u32(1 << 31)
	budgeted := header(b, issue(b, issuerKey, body("bench-budget", g)))
	for _, c := range []struct{ name, token string }{{"cached", free}, {"kv_budget", budgeted}} {
		b.Run(c.name, func(b *testing.B) {
			r := &Request{Token: c.token, ServerID: "srv", ToolName: "tool", Arguments: args}
			if d := k.Decide(context.Background(), r); !d.Allow {
				b.Fatalf("denied: %s %s", d.Guard, d.Reason)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if d := k.Decide(context.Background(), r); !d.Allow {
					b.Fatalf("denied: %s %s", d.Guard, d.Reason)
				}
			}
		})
	}
}

// BenchmarkDecideParallel is the cached decision path on every core.
func BenchmarkDecideParallel(b *testing.B) {
	e := startNATS(b)
	k := newKernel(b, e, testPolicy(b, nil))
	args := json.RawMessage(`{"path":"docs/readme.md","url":"https://api.example.com/v1","query":"hello world","limit":10}`)
	r := &Request{Token: header(b, issue(b, issuerKey, body("bench-par", grant("srv", "tool")))), ServerID: "srv", ToolName: "tool", Arguments: args}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d := k.Decide(context.Background(), r); !d.Allow {
				b.Errorf("denied: %s %s", d.Guard, d.Reason)
				return
			}
		}
	})
}

// BenchmarkVerifyUncached is the cost the cache saves: parsing and
// verifying a token with a one-link delegation chain.
func BenchmarkVerifyUncached(b *testing.B) {
	p := testPolicy(b, nil)
	tok := header(b, issue(b, issuerKey, body("bench-verify", grant("srv", "tool"))))
	for b.Loop() {
		if _, err := verify(p, tok); err != nil {
			b.Fatal(err)
		}
	}
}
