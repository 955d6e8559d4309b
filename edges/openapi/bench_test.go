package openapi

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// syntheticSpec is an OpenAPI 3.0 document with ops GET and POST operations
// whose schemas reach a chain of depth components, each referring to the
// next and to itself.
func syntheticSpec(ops, depth int) []byte {
	var b strings.Builder
	b.WriteString(`{"openapi":"3.0.3","info":{"title":"synthetic","version":"1"},"paths":{`)
	for i := range ops {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"/r%d/{id}":{"parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],`+
			`"get":{"operationId":"get%d","responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"$ref":"#/components/schemas/S0"}}}}}},`+
			`"post":{"requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/S0"}}}},"responses":{"200":{"description":"ok"}}}}`, i, i)
	}
	b.WriteString(`},"components":{"schemas":{`)
	for j := range depth {
		if j > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"S%d":{"type":"object","properties":{"name":{"type":"string","nullable":true},"self":{"$ref":"#/components/schemas/S%d"}`, j, j)
		if j+1 < depth {
			fmt.Fprintf(&b, `,"next":{"$ref":"#/components/schemas/S%d"}`, j+1)
		}
		b.WriteString(`}}`)
	}
	b.WriteString(`}}}`)
	return []byte(b.String())
}

func BenchmarkBuild(b *testing.B) {
	for _, size := range []struct{ ops, depth int }{{10, 5}, {30, 6}} {
		b.Run(fmt.Sprintf("ops=%d/depth=%d", size.ops, size.depth), func(b *testing.B) {
			s, err := Parse(context.Background(), syntheticSpec(size.ops, size.depth), "synthetic")
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				br, err := Build(s, Config{ServerID: "synthetic", OutputSchemas: true})
				if err != nil {
					b.Fatal(err)
				}
				if len(br.Routes()) != 2*size.ops {
					b.Fatalf("%d tools, want %d", len(br.Routes()), 2*size.ops)
				}
			}
		})
	}
}
