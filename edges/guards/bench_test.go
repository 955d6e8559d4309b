package guards

import (
	"github.com/chio-ledger/chio/schemas/strictjson"

	"context"
	"encoding/json"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// defaultPipeline is the four guards with their default configurations.
func defaultPipeline(tb testing.TB) []Guard {
	tb.Helper()
	p, err := NewPathGuard(PathConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	e, err := NewEgressGuard(EgressConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := NewSecretLeakGuard(SecretLeakConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	return []Guard{NewConstraintGuard(), p, e, s}
}

// BenchmarkDefaultGuards is one decision of the four guards on a small
// argument object with two constraints, decoding included: each op is a
// fresh Call, as in the kernel.
func BenchmarkDefaultGuards(b *testing.B) {
	gs := defaultPipeline(b)
	cs, err := CompileConstraints([]schemas.Constraint{
		{Type: "prefix", Value: json.RawMessage(`{"pointer":"/path","prefix":"docs/"}`)},
		{Type: "max", Value: json.RawMessage(`{"pointer":"/limit","max":100}`)},
	})
	if err != nil {
		b.Fatal(err)
	}
	args := json.RawMessage(`{"path":"docs/readme.md","url":"https://api.example.com/v1","query":"hello world","limit":10}`)
	ctx := context.Background()
	b.Run("run", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := Call{Arguments: args, Constraints: cs}
			if _, denied, reason := Run(ctx, gs, &c); denied != "" {
				b.Fatal(reason)
			}
		}
	})
	b.Run("decoded", func(b *testing.B) {
		// The guards alone, on arguments already decoded.
		c := Call{Arguments: args, Constraints: cs}
		if _, err := c.Args(); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			for _, g := range gs {
				if r, err := g.Check(ctx, &c); err != nil || !r.Allow {
					b.Fatal(r, err)
				}
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := strictjson.Parse(args); err != nil {
				b.Fatal(err)
			}
		}
	})
}
