package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors a cluster electing leaders answers with make a writer stand by;
// anything else ends the process.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"deadline", fmt.Errorf("create consumer: %w", context.DeadlineExceeded), true},
		{"no responders", fmt.Errorf("publish: %w", nats.ErrNoResponders), true},
		{"temporarily unavailable", fmt.Errorf("ensure stream CHIO_EVENTS: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{"bad request", fmt.Errorf("ensure stream CHIO_EVENTS: %w", &jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"}), false},
		{"storage", errors.New("pebble: disk full"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s: transient = %v, want %v", tc.name, got, tc.want)
		}
	}
}
