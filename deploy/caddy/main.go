// Command caddy is the standard Caddy v2 binary (the documented custom-build
// main: the caddy command plus the standard modules), built from this module
// so the cluster's reverse-proxy image can be produced offline from the Go
// module proxy alone. scripts/images.sh builds it with -trimpath.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() {
	caddycmd.Main()
}
