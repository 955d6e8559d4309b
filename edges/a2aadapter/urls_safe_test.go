package a2aadapter

import "testing"

func TestSafeRawURL(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{"https://agent.example/a2a?key=secret#x", "https://agent.example/a2a"},
		{"https://user:pw@agent.example/a2a", "https://agent.example/a2a"},
		{"127.0.0.1:8081", "127.0.0.1:8081"}, // a gRPC interface: host:port
		{"[::1]:8081", "[::1]:8081"},
		{"agent.example:443", "agent.example:443"},
		{"%zz", "(unparsable URL)"},
		{"a b:1/x?y", "(unparsable URL)"},
		{"evil\n\x1b[2J:1", "(unparsable URL)"}, // control bytes from a remote card never reach a terminal
	} {
		if got := safeRawURL(c.raw); got != c.want {
			t.Errorf("safeRawURL(%q) = %q, want %q", c.raw, got, c.want)
		}
	}
}
