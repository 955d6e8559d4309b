// Command oidc-provider is a development OpenID provider for the README
// tour and quick starts: zitadel's example provider over plain HTTP on a
// loopback address, with one client whose client-credentials access tokens
// are JWTs (their sub and aud are the client id). chio trusts it with
// --oidc-issuer; an agent gets a token with
//
//	curl -d grant_type=client_credentials -d client_id=agent-7 -d client_secret=secret-7 \
//	  http://127.0.0.1:9998/oauth/token
//
// Its signing key and users are the example's, known to everyone: never
// trust it beyond a development machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/chio-ledger/chio/internal/devop"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9998", "loopback address to serve on (the issuer is http://ADDRESS)")
	clientID := flag.String("client-id", "agent-7", "the registered client's id")
	secret := flag.String("client-secret", "secret-7", "the registered client's secret")
	flag.Parse()
	if err := run(*listen, *clientID, *secret); err != nil {
		fmt.Fprintln(os.Stderr, "oidc-provider:", err)
		os.Exit(1)
	}
}

func run(listen, clientID, secret string) error {
	host, _, err := net.SplitHostPort(listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %q: a development provider serves plain HTTP, on a loopback address only", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	issuer := "http://" + ln.Addr().String()
	p, err := devop.New(issuer, clientID, secret, issuer+"/callback", true)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	log.Printf("issuer %s (client %s; token endpoint %s/oauth/token)", issuer, clientID, issuer)
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
