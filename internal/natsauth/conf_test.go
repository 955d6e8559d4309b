package natsauth_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/chio-ledger/chio/internal/natsauth"
)

// shipped is the permission table of the compose deployment's servers.
const shipped = "../../deploy/nats/permissions.conf"

// TestShippedPermissionsAreTheTable: deploy/nats/permissions.conf is the
// table rendered (CHIO_UPDATE_CONF=1 rewrites it).
func TestShippedPermissionsAreTheTable(t *testing.T) {
	want := natsauth.PermissionsConf()
	if os.Getenv("CHIO_UPDATE_CONF") == "1" {
		if err := os.WriteFile(shipped, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("%s differs from the permission table in internal/natsauth: run CHIO_UPDATE_CONF=1 go test ./internal/natsauth", shipped)
	}
}

// TestShippedServerConfig: each compose node's configuration, with the
// users block chio keygen writes, gives nats-server exactly the table's
// permissions for each role's nkey, and turns TLS on for clients and
// routes.
func TestShippedServerConfig(t *testing.T) {
	root := t.TempDir()
	dir, authDir := filepath.Join(root, "nats"), filepath.Join(root, "nats-auth")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"nats-1.conf", "nats-2.conf", "nats-3.conf", "permissions.conf"} {
		raw, err := os.ReadFile(filepath.Join("../../deploy/nats", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The compose file mounts the configuration at /etc/nats and
	// keygen's DIR/nats beside it at /etc/nats-auth.
	creds, err := natsauth.LoadOrCreate(authDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := creds.WriteUsersConf(); err != nil {
		t.Fatal(err)
	}
	if err := natsauth.WriteServerTLS(authDir, []string{"nats-1", "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"nats-1.conf", "nats-2.conf", "nats-3.conf"} {
		t.Run(node, func(t *testing.T) {
			// The TLS files are named by absolute path; read them from here.
			raw, _ := os.ReadFile(filepath.Join(dir, node))
			local := filepath.Join(dir, "local-"+node)
			if err := os.WriteFile(local, []byte(strings.ReplaceAll(string(raw), "/etc/nats-auth/", authDir+"/")), 0o644); err != nil {
				t.Fatal(err)
			}
			opts, err := server.ProcessConfigFile(local)
			if err != nil {
				t.Fatal(err)
			}
			if opts.TLSConfig == nil || opts.Cluster.TLSConfig == nil {
				t.Fatalf("TLS for clients %v, for routes %v: want both", opts.TLSConfig != nil, opts.Cluster.TLSConfig != nil)
			}
			byKey := map[string]*server.Permissions{}
			for _, u := range opts.Nkeys {
				byKey[u.Nkey] = u.Permissions
			}
			if len(byKey) != len(natsauth.Roles()) || len(opts.Users) != 0 {
				t.Fatalf("%d nkey users and %d other users, want one nkey per role", len(byKey), len(opts.Users))
			}
			for _, r := range natsauth.Roles() {
				got, want := byKey[creds.Public(r)], r.Grant().Permissions()
				if got == nil {
					t.Fatalf("no user for role %s", r)
				}
				if !reflect.DeepEqual(got.Publish.Allow, want.Publish.Allow) || !reflect.DeepEqual(got.Publish.Deny, want.Publish.Deny) ||
					!reflect.DeepEqual(got.Subscribe.Allow, want.Subscribe.Allow) ||
					(got.Response == nil) != (want.Response == nil) || (want.Response != nil && *got.Response != *want.Response) {
					t.Errorf("role %s: the server's permissions differ from the table", r)
				}
			}
		})
	}
}
