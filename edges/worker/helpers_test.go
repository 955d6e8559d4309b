package worker

import (
	"bytes"
	"crypto/ed25519"
	"io"
	"log/slog"
	"math/rand/v2"

	"github.com/chio-ledger/chio/schemas"
)

// quiet is a logger that drops everything: a test's expected warnings
// (a killed worker's unsent answers) are not news.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// randID distinguishes the goroutines of a parallel benchmark.
func randID() uint64 { return rand.Uint64() }

// workerKey is the tests' manifest key; rogueKey is another.
func workerKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
}

func rogueKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, ed25519.SeedSize))
}

// trusted pins workerKey on the edge side.
func trusted() Option {
	return WithWorkerKey(schemas.EncodePublicKey(workerKey().Public().(ed25519.PublicKey)))
}
