package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names a file to write a CPU profile of the whole run to:
// how scripts/bench finds where a request's time goes in a shipped build,
// without an HTTP pprof endpoint open on any address.
const cpuProfileEnv = "CHIO_CPUPROFILE"

// startCPUProfile starts profiling if $CHIO_CPUPROFILE is set; the returned
// function stops it and flushes the file (call it before exiting).
func startCPUProfile() (stop func(), err error) {
	path := os.Getenv(cpuProfileEnv)
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", cpuProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("$%s: %w", cpuProfileEnv, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
