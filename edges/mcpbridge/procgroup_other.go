//go:build !unix

package mcpbridge

import "os/exec"

// ownGroup does nothing where there are no process groups to start in.
func ownGroup(*exec.Cmd) {}

// killGroup kills the command alone.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
