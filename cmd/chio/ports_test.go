package main

import (
	"net"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// No two commands listen on the same port by default, so that any of
// them can run beside chio up, and beside each other, as they are. chio
// up's gRPC binding takes its --listen port plus one.
func TestDefaultPortsDistinct(t *testing.T) {
	owner := map[string]string{"8081": "up --grpc-listen auto"}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name != "listen" && !strings.HasSuffix(f.Name, "-listen") {
				return
			}
			_, port, err := net.SplitHostPort(f.DefValue)
			if err != nil || port == "0" {
				return // off by default, "auto", "none", or any port
			}
			name := strings.TrimPrefix(c.CommandPath(), "chio ") + " --" + f.Name
			if other, ok := owner[port]; ok {
				t.Errorf("port %s is the default of both %s and %s", port, other, name)
			}
			owner[port] = name
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRoot())
	var ports []string
	for p, n := range owner {
		ports = append(ports, p+" "+n)
	}
	sort.Strings(ports)
	if len(ports) < 10 {
		t.Fatalf("found only %v", ports)
	}
	t.Logf("default ports:\n%s", strings.Join(ports, "\n"))
}
