package a2a

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkSendMessage is one blocking message/send over HTTP on loopback,
// end to end: kernel decision, durable decision event, task stream writes,
// the hello tool, durable outcome event. The embedded server syncs every
// write (SyncAlways), as `chio up` does.
func BenchmarkSendMessage(b *testing.B) {
	cl := startCluster(b, 1, "")
	tok := token(b, agentKey, "cap-bench")
	body := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"m1","parts":[{"text":"world"}]},"metadata":{"chio":{"targetSkillId":"hello_task"}}}}`
	url := cl.edges[0].URL + "/a2a"
	b.ResetTimer()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("A2A-Version", "1.0")
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(out), "TASK_STATE_COMPLETED") {
			b.Fatalf("%s", out)
		}
	}
}
