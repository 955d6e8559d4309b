package a2aadapter

import (
	"crypto/tls"

	"github.com/chio-ledger/chio/internal/authtest"
)

// The end-to-end auth tests run the real auth.Credentials.Authorize against
// partners that enforce each scheme. Their components are authtest's: a
// test CA with server and client certificates, and zitadel's example OpenID
// provider with one client-credentials client.

// partnerTLS serves the CA's partner certificate and checks client
// certificates against the CA: always (mtls) or when one is given, so that
// a certificate sent when the card does not ask for one is seen.
func partnerTLS(pk *authtest.PKI, mtls bool) *tls.Config {
	mode := tls.VerifyClientCertIfGiven
	if mtls {
		mode = tls.RequireAndVerifyClientCert
	}
	return pk.ServerTLS(mode)
}
