package natsembed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/tmpfs"
)

// TestStoreFullRefusesWritesUntilSpaceIsBack fills the filesystem of an
// embedded server's store to the last byte: once the watchdog has seen
// it, publishes must fail at once (not hang until their timeout) while
// reads go on, StoreErr must say why, and once space is back writes must
// be accepted again, with the stream and its durable consumer as they
// were (the stream that met ENOSPC reloaded), without a restart.
func TestStoreFullRefusesWritesUntilSpaceIsBack(t *testing.T) {
	dir := tmpfs.Mount(t, 48)
	ns, err := natsembed.Start(natsembed.Config{StoreDir: dir, DontListen: true, MinFree: 4 << 20, WatchEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	publish := func(i int) error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, "s.x", []byte(fmt.Sprint(i)))
		return err
	}
	for i := range 10 {
		if err := publish(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := ns.StoreErr(); err != nil {
		t.Fatalf("store error before the fill: %v", err)
	}

	filler := tmpfs.Fill(t, dir)
	full := time.Now()
	flagged := make(chan time.Duration, 1)
	go func() {
		for ns.StoreErr() == nil && time.Since(full) < 10*time.Second {
			time.Sleep(5 * time.Millisecond)
		}
		flagged <- time.Since(full)
	}()
	var failed time.Duration
	for i := 10; ; i++ {
		start := time.Now()
		err := publish(i)
		if err != nil {
			failed = time.Since(full)
			t.Logf("first failed publish %v after the fill (the publish took %v): %v", failed, time.Since(start), err)
			break
		}
		if time.Since(full) > 10*time.Second {
			t.Fatal("publishes still succeed 10s after the filesystem filled")
		}
	}
	// The watchdog refuses writes (within a tick of the fill): from
	// then on a publish fails at once, with JetStream's own answer.
	t.Logf("store error %v after the fill: %v", <-flagged, ns.StoreErr())
	if ns.StoreErr() == nil {
		t.Fatal("StoreErr is still nil 10s after the filesystem filled")
	}
	start := time.Now()
	if err := publish(99); err == nil {
		t.Fatal("a publish succeeded with writes refused")
	} else if took := time.Since(start); took > time.Second {
		t.Errorf("a publish with writes refused took %v to fail: %v", took, err)
	} else {
		t.Logf("publish with writes refused failed in %v: %v", took, err)
	}

	// Reads go on while writes are refused.
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("account info while writes are refused: %v", err)
	}
	if _, err := js.Stream(ctx, "S"); err != nil {
		t.Fatalf("stream info while writes are refused: %v", err)
	}
	filler.Remove(t)
	back := time.Now()
	for i := 100; ; i++ {
		if err := publish(i); err == nil {
			break
		}
		if time.Since(back) > 20*time.Second {
			t.Fatalf("no publish succeeded within 20s of space coming back: %v", ns.StoreErr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("first publish succeeded %v after space came back", time.Since(back))
	// The watchdog lifts the limit (or reloads JetStream), and then says
	// so: a publish can succeed a moment before the error is cleared.
	for cleared := time.Now(); ns.StoreErr() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Since(cleared) > 5*time.Second {
			t.Fatalf("store error after recovery: %v", ns.StoreErr())
		}
	}
	st, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.FirstSeq != 1 || info.State.Msgs < 11 {
		t.Fatalf("stream after recovery: %+v", info.State)
	}
	c, err := st.Consumer(ctx, "C")
	if err != nil {
		t.Fatalf("durable consumer after recovery: %v", err)
	}
	b, err := c.Fetch(int(info.State.Msgs), jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range b.Messages() {
		n++
	}
	if uint64(n) != info.State.Msgs {
		t.Fatalf("consumer delivered %d of the stream's %d messages after recovery", n, info.State.Msgs)
	}
}
