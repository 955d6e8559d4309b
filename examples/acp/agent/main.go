// Command agent is a scripted ACP agent (internal/acptest.Agent) on
// stdio: each line of a prompt is a step that reads or writes a file,
// runs a command or asks permission through its client. The README's tour
// runs it behind chio edge acp --proxy.
package main

import "github.com/chio-ledger/chio/internal/acptest"

func main() { acptest.RunStdio() }
