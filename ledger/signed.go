package ledger

import "github.com/chio-ledger/chio/internal/leafset"

// WithSignedLeaves calls f with the RFC 6962 leaf hashes of each batch's
// new receipts once the batch is durable (its synced commit returned), on
// the ledger's goroutine, before the receipts are republished. A reader in
// the same process that hashes the bytes it receives and finds them among
// these knows this ledger signed exactly those bytes, so it need not check
// their signature again; f must return quickly.
func WithSignedLeaves(f func(hashes [][32]byte)) Option {
	return func(c *config) { c.signedLeaves = f }
}

// reportSigned hands the leaf hashes of a committed batch to
// WithSignedLeaves' function: the hashes the signer pool computed for the
// log, or, for a leaf without one, its hash computed again.
func (l *Ledger) reportSigned(leaves []pubLeaf) {
	if l.cfg.signedLeaves == nil || len(leaves) == 0 {
		return
	}
	hashes := make([][32]byte, len(leaves))
	for i, p := range leaves {
		if len(p.hash) == len(hashes[i]) {
			copy(hashes[i][:], p.hash)
		} else {
			hashes[i] = leafset.LeafHash(p.leaf)
		}
	}
	l.cfg.signedLeaves(hashes)
}
