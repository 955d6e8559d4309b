package projections

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/schemas"
)

// CodeUnavailable answers a status that cannot be read now (NATS away, or
// the service not consuming yet).
const CodeUnavailable = "unavailable"

// statusTimeout bounds the JetStream lookups of one status request.
const statusTimeout = 2 * time.Second

// statusFresh is how long one reading of the status answers every reader:
// a burst of requests (a console per operator, polling) costs a handful
// of JetStream requests a second, not a handful per request.
const statusFresh = time.Second

// statusCache is the last status read and when.
type statusCache struct {
	mu sync.Mutex
	at time.Time
	st *Status
}

// Status is the body of GET /v1/status.
type Status struct {
	// Projections is each projection consumer's lag (Service.Lag).
	Projections []Lag `json:"projections"`
	// Ledger is the ledger's lag behind CHIO_EVENTS, read from its durable
	// consumer (schemas.LedgerConsumer); null when there is none (the
	// ledger has not run, or runs under another consumer name).
	Ledger *LedgerStatus `json:"ledger"`
}

// LedgerStatus is how far the ledger is behind the event stream.
type LedgerStatus struct {
	Consumer string `json:"consumer"`
	// Behind is the events not yet integrated: not delivered yet plus
	// delivered and not acknowledged (the ledger acknowledges a batch once
	// it is durable in the log).
	Behind uint64 `json:"behind"`
	// IntegratedSeq is the CHIO_EVENTS sequence up to which every event
	// is acknowledged: in the log.
	IntegratedSeq uint64 `json:"integrated_seq"`
}

// ScopedStatus is GET /v1/status for a reader of less than every
// receipt: how far behind each consumer is, and nothing else. Stream
// positions would let a tenant count every tenant's calls over time,
// which the call statistics keep to readers of every receipt.
type ScopedStatus struct {
	Projections []ScopedLag `json:"projections"`
	Ledger      *ScopedLag  `json:"ledger"`
}

// ScopedLag is one consumer's lag, without positions.
type ScopedLag struct {
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	Behind   uint64 `json:"behind"`
}

// getStatus serves GET /v1/status: the projections' and the ledger's lag,
// in full to readers of every receipt, as a ScopedStatus to others.
func (s *Service) getStatus(c echo.Context) error {
	if _, ok, err := query(c); !ok {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), statusTimeout)
	defer cancel()
	st, err := s.cachedStatus(ctx)
	if err != nil {
		s.log.Warn("read status", "err", err)
		c.Response().Header().Set("Retry-After", "1")
		return reply(c, http.StatusServiceUnavailable, Error{Error: "status unavailable: the event streams cannot be read now", Code: CodeUnavailable})
	}
	if readauth.From(c).AllReceipts() {
		return c.JSON(http.StatusOK, st)
	}
	scoped := ScopedStatus{Projections: make([]ScopedLag, 0, len(st.Projections))}
	for _, l := range st.Projections {
		scoped.Projections = append(scoped.Projections, ScopedLag{Stream: l.Stream, Consumer: l.Consumer, Behind: l.Behind})
	}
	if st.Ledger != nil {
		scoped.Ledger = &ScopedLag{Stream: schemas.EventsStream, Consumer: st.Ledger.Consumer, Behind: st.Ledger.Behind}
	}
	return c.JSON(http.StatusOK, scoped)
}

// cachedStatus is status, read at most once per statusFresh.
func (s *Service) cachedStatus(ctx context.Context) (*Status, error) {
	c := &s.statusC
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st != nil && time.Since(c.at) < statusFresh {
		return c.st, nil
	}
	st, err := s.status(ctx)
	if err != nil {
		return nil, err
	}
	c.st, c.at = st, time.Now()
	return st, nil
}

// status reads the lags from JetStream.
func (s *Service) status(ctx context.Context) (*Status, error) {
	lags, err := s.Lag(ctx)
	if err != nil {
		return nil, fmt.Errorf("projection lag: %w", err)
	}
	js, err := s.waitRunning(ctx)
	if err != nil {
		return nil, err
	}
	st := &Status{Projections: lags}
	if st.Ledger, err = ledgerStatus(ctx, js, schemas.LedgerConsumer); err != nil {
		return nil, err
	}
	return st, nil
}

// ledgerStatus reads the ledger's durable consumer on the event stream;
// nil when it does not exist.
func ledgerStatus(ctx context.Context, js jetstream.JetStream, name string) (*LedgerStatus, error) {
	cons, err := js.Consumer(ctx, schemas.EventsStream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ledger consumer %s: %w", name, err)
	}
	info, err := cons.Info(ctx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, nil // deleted meanwhile: the ledger recreates it on start
	}
	if err != nil {
		return nil, fmt.Errorf("ledger consumer %s info: %w", name, err)
	}
	return &LedgerStatus{Consumer: name, Behind: info.NumPending + uint64(info.NumAckPending),
		IntegratedSeq: info.AckFloor.Stream}, nil
}
