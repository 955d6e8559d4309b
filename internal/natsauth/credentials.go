package natsauth

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Credentials are one nkey per role, kept as seed files (<role>.nk, the
// form `nsc` and `nk -gen user` write and --nats-nkey reads) in a
// directory only the owner may read.
type Credentials struct {
	Dir  string
	keys map[Role]nkeys.KeyPair
}

// SeedFile is the name of a role's seed file in a credentials directory.
func SeedFile(r Role) string { return string(r) + ".nk" }

// LoadOrCreate reads every role's seed from dir, generating (mode 0600)
// the ones that are missing, so a first start makes them and every later
// start reuses them. A seed file that others may read is refused.
func LoadOrCreate(dir string) (*Credentials, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("nats credentials: create %s: %w", dir, err)
	}
	c := &Credentials{Dir: dir, keys: map[Role]nkeys.KeyPair{}}
	for _, r := range Roles() {
		kp, err := loadOrCreateSeed(filepath.Join(dir, SeedFile(r)))
		if err != nil {
			return nil, err
		}
		c.keys[r] = kp
	}
	return c, nil
}

func loadOrCreateSeed(path string) (nkeys.KeyPair, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, fmt.Errorf("nats credentials: generate %s: %w", path, err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, err
		}
		// O_EXCL: two processes starting at once never overwrite each
		// other's seed.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("nats credentials: write %s: %w", path, err)
		}
		_, werr := f.Write(append(seed, '\n'))
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return nil, fmt.Errorf("nats credentials: write %s: %w", path, werr)
		}
		return kp, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nats credentials: read %s: %w", path, err)
	}
	return parseSeed(path, raw)
}

// parseSeed reads a seed file, refusing one that group or others may read.
func parseSeed(path string, raw []byte) (nkeys.KeyPair, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("nats credentials: %s is readable by others (mode %v): chmod 600 it", path, fi.Mode().Perm())
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(raw))
	if err != nil {
		return nil, fmt.Errorf("nats credentials: %s is not an nkey seed: %w", path, err)
	}
	if pub, err := kp.PublicKey(); err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return nil, fmt.Errorf("nats credentials: %s is not a user nkey seed", path)
	}
	return kp, nil
}

// Path is role r's nkey seed file.
func (c *Credentials) Path(r Role) string { return filepath.Join(c.Dir, SeedFile(r)) }

// Public is role r's public nkey.
func (c *Credentials) Public(r Role) string {
	pub, _ := c.keys[r].PublicKey()
	return pub
}

// Options are the client options of a connection acting as role r: its
// nkey and its inbox prefix.
func (c *Credentials) Options(r Role) []nats.Option {
	kp := c.keys[r]
	return []nats.Option{nats.Nkey(c.Public(r), kp.Sign), nats.CustomInboxPrefix(r.InboxPrefix())}
}

// Users are the server's users: each role's nkey with its permissions.
func (c *Credentials) Users() []*server.NkeyUser {
	var out []*server.NkeyUser
	for _, r := range Roles() {
		out = append(out, &server.NkeyUser{Nkey: c.Public(r), Permissions: r.Grant().Permissions()})
	}
	return out
}

// Permissions is the grant in nats-server's form.
func (g Grant) Permissions() *server.Permissions {
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: append([]string{}, g.Publish...), Deny: append([]string(nil), g.DenyPublish...)},
		Subscribe: &server.SubjectPermission{Allow: append([]string{}, g.Subscribe...)},
	}
	if g.Responses {
		p.Response = &server.ResponsePermission{MaxMsgs: -1, Expires: ResponseWindow}
	}
	return p
}
