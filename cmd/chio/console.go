package main

import (
	"log/slog"

	"github.com/labstack/echo/v4"
	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/projections/console"
)

// consoleFlags configures the web console a command serves at /console/.
type consoleFlags struct {
	ledgerURL string
}

func (f *consoleFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.ledgerURL, "console-ledger-url", "",
		"origin of the ledger's read API for the web console at /console/ (e.g. https://ledger.example:8081), when it is not this server; the ledger must then allow this origin (CORS), e.g. behind one reverse proxy")
}

// mount returns what serves the console, or a usage error for a bad URL,
// so that a mistake fails the start rather than the page.
func (f *consoleFlags) mount() (func(*echo.Echo), error) {
	if _, err := console.LedgerOrigin(f.ledgerURL); err != nil {
		return nil, usageError(err)
	}
	return func(e *echo.Echo) { mountConsole(e, console.WithLedgerURL(f.ledgerURL)) }, nil
}

// mountConsole serves the web console on e: the page, its modules and
// /console/config.json. With no options the ledger is e's own origin.
func mountConsole(e *echo.Echo, opts ...console.Option) {
	if err := console.Register(e, opts...); err != nil {
		slog.Error("web console not served", "err", err)
	}
}
