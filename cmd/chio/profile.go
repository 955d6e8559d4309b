package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"syscall"
	"time"
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

// traceEnv names a file to write an execution trace to: the last
// traceWindow of the run, kept by the runtime's flight recorder and written
// when the process gets SIGUSR1 (again on every signal) or, if it never
// did, as it exits. scripts/bench signals it right after a load it wants
// to see scheduled (the open loop at half load): where a request waits,
// which a CPU profile cannot show.
const traceEnv = "CHIO_TRACE"

// traceWindow is how much of the run the flight recorder keeps.
const traceWindow = 15 * time.Second

// startTrace starts the flight recorder if $CHIO_TRACE is set; the returned
// function stops it, writing the window first unless a signal already did.
// The recorder's buffers are Go heap, counted against --memory-limit.
func startTrace() (stop func(), err error) {
	path := os.Getenv(traceEnv)
	if path == "" {
		return func() {}, nil
	}
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: traceWindow, MaxBytes: 256 << 20})
	if err := fr.Start(); err != nil {
		return nil, fmt.Errorf("$%s: %w", traceEnv, err)
	}
	written := false
	// write replaces path whole (a temporary file renamed over it), so a
	// reader never sees half a trace. Only the goroutine below and, after
	// it has stopped, stop call it.
	write := func() {
		log := slog.Default() // the command's, once it has set it up
		f, err := os.CreateTemp(filepath.Dir(path), ".chio-trace-*")
		if err == nil {
			_, err = fr.WriteTo(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(f.Name(), path)
			}
			if err != nil {
				os.Remove(f.Name())
			}
		}
		if err != nil {
			log.Error("execution trace not written", "path", path, "err", err)
			return
		}
		written = true
		log.Info("execution trace written", "path", path)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			select {
			case <-sig:
				write()
			case <-done:
				return
			}
		}
	}()
	return func() {
		// Ignored, not just no longer caught: SIGUSR1's default ends the
		// process, which would cut the last write short.
		signal.Ignore(syscall.SIGUSR1)
		close(done)
		<-exited // a write the signal started finishes first
		if !written {
			write()
		}
		fr.Stop()
	}, nil
}
