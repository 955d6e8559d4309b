package openai

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// awaitConfig is the optional wait for each call's signed receipt.
type awaitConfig struct {
	js  jetstream.JetStream
	max time.Duration
}

// WithAwaitReceipt makes each call that has a receipt wait (at most max)
// until the ledger has integrated it, and embeds the signed receipt under
// chio.receipt; js reads CHIO_RECEIPTS. A receipt not integrated in time
// is left out: the call's receipt_ref still names it.
func WithAwaitReceipt(js jetstream.JetStream, max time.Duration) Option {
	return func(a *Adapter) { a.await = awaitConfig{js: js, max: max} }
}
