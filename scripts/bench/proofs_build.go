package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// proofsLog is the log the proofs section grows and serves: a real
// logstore with real signed receipts and checkpoints, and the receipt ids
// by leaf index so requests can name any leaf.
type proofsLog struct {
	store    *logstore.Store
	kernel   ed25519.PrivateKey
	signer   note.Signer
	vkey     string
	ids      []uuid.UUID
	batch    int
	issuedAt uint64
}

func openProofsLog(dir string, batch int) (*proofsLog, error) {
	_, kernel, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("proofs: generate kernel key: %w", err)
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, "bench.chio.local/proofs")
	if err != nil {
		return nil, fmt.Errorf("proofs: generate checkpoint key: %w", err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("proofs: checkpoint signer: %w", err)
	}
	store, err := logstore.Open(dir, logstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, fmt.Errorf("proofs: %w", err)
	}
	return &proofsLog{store: store, kernel: kernel, signer: signer, vkey: vkey, batch: batch, issuedAt: uint64(time.Now().Unix())}, nil
}

func (l *proofsLog) close() error { return l.store.Close() }

func (l *proofsLog) size() uint64 { return l.store.State().Size }

// proofsBatch is one ledger batch ready to append: signed leaves and the
// summaries the store indexes them under.
type proofsBatch struct {
	leaves [][]byte
	sums   []logstore.Summary
	ids    []uuid.UUID
}

// grow appends receipts until the log holds target leaves. Batches are
// signed on every core (as ledger.signAll does) one batch ahead of the
// writer, which appends and commits the previous one with its signed
// checkpoint, so signing overlaps the synced commit.
func (l *proofsLog) grow(ctx context.Context, target uint64) error {
	start := l.size()
	if target <= start {
		return nil
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan proofsBatch, 1)
	var signErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(ready)
		for at := start; at < target; {
			n := min(uint64(l.batch), target-at)
			b, err := l.sign(int(at), int(n))
			if err != nil {
				signErr = err
				return
			}
			select {
			case ready <- b:
			case <-sctx.Done():
				return
			}
			at += n
		}
	})
	err := l.appendAll(ready)
	cancel()
	for range ready { // unblock the signer if appending stopped early
	}
	wg.Wait()
	if err == nil {
		err = signErr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err == nil && l.size() != target {
		err = fmt.Errorf("proofs: log holds %d leaves after growing to %d", l.size(), target)
	}
	return err
}

func (l *proofsLog) appendAll(ready <-chan proofsBatch) error {
	for b := range ready {
		tx := l.store.Begin()
		for i, leaf := range b.leaves {
			if _, err := tx.Append(leaf, b.sums[i]); err != nil {
				tx.Discard()
				return fmt.Errorf("proofs: append: %w", err)
			}
		}
		if err := tx.Commit(l.signCheckpoint); err != nil {
			return fmt.Errorf("proofs: commit batch: %w", err)
		}
		l.ids = append(l.ids, b.ids...)
	}
	return nil
}

// sign builds and signs receipts first..first+n-1 on GOMAXPROCS goroutines.
func (l *proofsLog) sign(first, n int) (proofsBatch, error) {
	b := proofsBatch{leaves: make([][]byte, n), sums: make([]logstore.Summary, n), ids: make([]uuid.UUID, n)}
	for i := range b.ids {
		id, err := uuid.NewV7()
		if err != nil {
			return b, fmt.Errorf("proofs: receipt id: %w", err)
		}
		b.ids[i] = id
	}
	workers := runtime.GOMAXPROCS(0)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				body := limitsReceiptBody(b.ids[i].String(), first+i, l.issuedAt)
				leaf, err := schemas.SignReceiptLeaf(l.kernel, body)
				if err != nil {
					errs[w] = fmt.Errorf("proofs: %w", err)
					return
				}
				b.leaves[i] = leaf
				b.sums[i] = logstore.Summary{ReceiptID: body.ID, Timestamp: body.Timestamp, CapabilityID: body.CapabilityID,
					ToolServer: body.ToolServer, ToolName: body.ToolName, Verdict: string(body.Decision.Verdict)}
			}
		})
	}
	wg.Wait()
	return b, errors.Join(errs...)
}

// signCheckpoint signs what the ledger signs for each batch (ledger.go
// signCheckpoint): the C2SP checkpoint note and, for a non-empty tree, the
// chio.checkpoint_statement.v1 over the batch.
func (l *proofsLog) signCheckpoint(from, to uint64, root []byte, seq uint64) ([]byte, []byte, error) {
	cp := log.Checkpoint{Origin: l.signer.Name(), Size: to, Hash: root}
	signed, err := note.Sign(&note.Note{Text: string(cp.Marshal())}, l.signer)
	if err != nil {
		return nil, nil, fmt.Errorf("sign checkpoint note: %w", err)
	}
	if to == 0 {
		return signed, nil, nil
	}
	stmt, err := schemas.SignCheckpointStatement(l.kernel, schemas.CheckpointBody{
		CheckpointSeq: seq, BatchStartSeq: from + 1, BatchEndSeq: to, TreeSize: to,
		MerkleRoot: schemas.EncodeHash(root), IssuedAt: uint64(time.Now().Unix()),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("sign checkpoint statement: %w", err)
	}
	raw, err := json.Marshal(stmt)
	if err != nil {
		return nil, nil, fmt.Errorf("encode checkpoint statement: %w", err)
	}
	return signed, raw, nil
}
