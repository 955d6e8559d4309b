package kernel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/schemas"
)

// ErrStateUnavailable means the shared state in JetStream could not be
// read or written; the kernel denies (fail closed).
var ErrStateUnavailable = errors.New("governance state unavailable")

// Revoke records the revocation of a capability id in JetStream KV. Every
// watching kernel denies the id, and every token delegated from it, as soon
// as the update reaches it.
func Revoke(ctx context.Context, js jetstream.JetStream, replicas int, id, reason string, now time.Time) error {
	if !schemas.ValidID(id) {
		return fmt.Errorf("revoke: %q is not a capability id", id)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, schemas.RevocationsConfig(replicas))
	if err != nil {
		return fmt.Errorf("revoke %s: open bucket: %w", id, err)
	}
	val, err := json.Marshal(schemas.Revocation{CapabilityID: id, RevokedAt: uint64(now.Unix()), Reason: reason})
	if err != nil {
		return fmt.Errorf("revoke %s: %w", id, err)
	}
	if _, err := kv.Put(ctx, schemas.KVKey(id), val); err != nil {
		return fmt.Errorf("revoke %s: %w", id, err)
	}
	return nil
}

// usage is the value of one grant's budget key.
type usage struct {
	Invocations uint64 `json:"invocations"`
	CostUnits   uint64 `json:"cost_units"`
}

// charge is one grant's share of a call: the budget key and the limits.
type charge struct {
	capabilityID string
	grantIndex   int
	grant        *schemas.ToolGrant
}

func (c charge) key() string { return schemas.KVKey(c.capabilityID) + "." + strconv.Itoa(c.grantIndex) }

func (c charge) limited() bool { return c.grant.MaxInvocations != nil || c.grant.MaxTotalCost != nil }

// errBudget is a deny: the grant's budget would be exceeded.
type errBudget struct{ msg string }

func (e *errBudget) Error() string { return e.msg }

// budgets charges grant budgets in BudgetsBucket by compare-and-set: a
// charge reads the usage, checks the limits, and writes the new usage only
// if nobody wrote since. Concurrent charges from any number of replicas
// therefore serialize on the key and never overspend.
type budgets struct {
	kv jetstream.KeyValue
}

// chargeOne adds one invocation and cost units to c's usage.
func (b *budgets) chargeOne(ctx context.Context, c charge, cost uint64) error {
	g := c.grant
	return casUpdate(ctx, b.kv, c.key(), func(u *usage) error {
		if g.MaxInvocations != nil && u.Invocations+1 > uint64(*g.MaxInvocations) {
			return &errBudget{fmt.Sprintf("max_invocations %d of grant %d of %s reached", *g.MaxInvocations, c.grantIndex, c.capabilityID)}
		}
		if g.MaxTotalCost != nil && (u.CostUnits > g.MaxTotalCost.Units || cost > g.MaxTotalCost.Units-u.CostUnits) {
			return &errBudget{fmt.Sprintf("max_total_cost %d %s of grant %d of %s would be exceeded (charged %d, this call %d)",
				g.MaxTotalCost.Units, g.MaxTotalCost.Currency, c.grantIndex, c.capabilityID, u.CostUnits, cost)}
		}
		u.Invocations++
		u.CostUnits += cost
		return nil
	})
}

// casUpdate applies change to the usage under key and writes it only if
// the key is unchanged since it was read, retrying on conflict. An error
// from change aborts without writing.
func casUpdate(ctx context.Context, kv jetstream.KeyValue, key string, change func(*usage) error) error {
	for attempt := 0; ; attempt++ {
		var (
			u   usage
			rev uint64
		)
		e, err := kv.Get(ctx, key)
		switch {
		case err == nil:
			if err := json.Unmarshal(e.Value(), &u); err != nil {
				return fmt.Errorf("%w: %s: corrupt usage record: %v", ErrStateUnavailable, key, err)
			}
			rev = e.Revision()
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			return fmt.Errorf("%w: read %s: %v", ErrStateUnavailable, key, err)
		}
		if err := change(&u); err != nil {
			return err
		}
		next, _ := json.Marshal(u)
		if rev == 0 {
			_, err = kv.Create(ctx, key, next)
		} else {
			_, err = kv.Update(ctx, key, next, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("%w: write %s: %v", ErrStateUnavailable, key, err)
		}
		// Lost the race: someone wrote in between. Back off a little, with
		// jitter, so contending replicas do not retry in lockstep.
		if err := casRetry.Wait(ctx, attempt+1); err != nil {
			return fmt.Errorf("%w: %s: %v", ErrStateUnavailable, key, err)
		}
	}
}

// refund takes back a charge made earlier in this call, when a later
// charge (an ancestor's) was refused. It can only under-count briefly,
// which denies, never overspends.
func (b *budgets) refund(ctx context.Context, c charge, cost uint64) error {
	return casUpdate(ctx, b.kv, c.key(), func(u *usage) error {
		u.Invocations = max(u.Invocations, 1) - 1
		u.CostUnits -= min(u.CostUnits, cost)
		return nil
	})
}

// refundAll gives back every charge of a call that will not run.
func (b *budgets) refundAll(ctx context.Context, cs []charge, cost uint64, log *slog.Logger) {
	for _, c := range cs {
		if err := b.refund(context.WithoutCancel(ctx), c, cost); err != nil {
			log.Error("kernel: refund failed; the budget stays charged", "key", c.key(), "err", err)
		}
	}
}

// chargeAll charges the call's grant and each ancestor grant that has a
// limit, leaf first; if one refuses, the earlier charges are refunded.
func (b *budgets) chargeAll(ctx context.Context, cs []charge, cost uint64, log *slog.Logger) error {
	for i, c := range cs {
		if err := b.chargeOne(ctx, c, cost); err != nil {
			b.refundAll(ctx, cs[:i], cost, log)
			return err
		}
	}
	return nil
}

// casRetry paces a lost compare-and-set: short, because the winner's
// write is already there to read.
var casRetry = backoff.Policy{Base: 250 * time.Microsecond, Cap: 2 * time.Millisecond}
