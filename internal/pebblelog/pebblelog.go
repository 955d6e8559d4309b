// Package pebblelog routes Pebble's own logging into log/slog.
package pebblelog

import (
	"fmt"
	"log/slog"
)

// Logger is a pebble.Logger over slog: Pebble's info lines at debug level,
// its errors at error level, tagged component=pebble.
type Logger struct{ L *slog.Logger }

func (p Logger) Infof(format string, args ...any) {
	p.L.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p Logger) Errorf(format string, args ...any) {
	p.L.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf logs and panics, as Pebble expects a fatal logger not to return.
func (p Logger) Fatalf(format string, args ...any) {
	p.L.Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf(format, args...))
}
