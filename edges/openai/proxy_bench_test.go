package openai

import (
	"context"
	"testing"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// BenchmarkProxy measures what the proxy adds, with the official client
// and the in-test model (which answers at once, so the figures are the
// proxy's own cost): a request straight to the model, the same request
// through the proxy (no tool call: one round), and one that makes a
// governed call (two rounds, one call through dispatch and the kernel,
// its decision and outcome events durable in JetStream). The added
// latency of one tool round is tool-round − no-tools − direct.
//
//	go test ./edges/openai -run '^$' -bench Proxy -benchtime 2000x
func BenchmarkProxy(b *testing.B) {
	f, m := startProxy(b, 0)
	tok := fullToken(b)
	direct := oa.NewClient(option.WithBaseURL(m.BaseURL()+"/"), option.WithAPIKey(upstreamKey), option.WithMaxRetries(0))
	proxied := oa.NewClient(option.WithBaseURL(f.url+"/openai/v1/"), option.WithAPIKey(tok), option.WithMaxRetries(0))
	cases := []struct {
		name   string
		c      oa.Client
		prompt string
		stream bool
	}{
		{"direct", direct, "hi", false},
		{"no-tools", proxied, "hi", false},
		{"tool-round", proxied, "use hello_task", false},
		{"tool-round-stream", proxied, "use hello_task", true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			p := oa.ChatCompletionNewParams{Model: "bench", Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(tc.prompt)}}
			ctx := context.Background()
			for b.Loop() {
				if tc.stream {
					st := tc.c.Chat.Completions.NewStreaming(ctx, p)
					for st.Next() {
					}
					if err := st.Err(); err != nil {
						b.Fatal(err)
					}
					continue
				}
				if _, err := tc.c.Chat.Completions.New(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
