package worker

import (
	"io"
	"log/slog"
	"math/rand/v2"
)

// quiet is a logger that drops everything: a test's expected warnings
// (a killed worker's unsent answers) are not news.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// randID distinguishes the goroutines of a parallel benchmark.
func randID() uint64 { return rand.Uint64() }
