package natsauth

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// PermissionsConf renders the permission table as nats-server
// configuration: one variable per role (EDGE_PERMISSIONS, …), each the
// permissions block UsersConf gives that role's nkey.
// deploy/nats/permissions.conf is this text: the table for review, and
// for a users block of one's own in the same file (nats-server variables
// do not cross include files, so chio keygen's users block inlines them).
func PermissionsConf() string {
	var b strings.Builder
	b.WriteString("# The permissions of each Chio role on NATS. Generated from internal/natsauth, the one\n")
	b.WriteString("# table chio up's embedded server uses and chio keygen writes into the servers' users\n")
	b.WriteString("# block (auth/users.conf); a test checks that this file equals it.\n")
	for _, r := range Roles() {
		fmt.Fprintf(&b, "\n%s = %s\n", confVar(r), permissionsBlock(r, ""))
	}
	return b.String()
}

// permissionsBlock is a role's permissions in configuration syntax, its
// lines indented by indent.
func permissionsBlock(r Role, indent string) string {
	g := r.Grant()
	var b strings.Builder
	b.WriteString("{\n")
	if len(g.DenyPublish) > 0 {
		fmt.Fprintf(&b, "%s  publish: { allow: %s, deny: %s }\n", indent, confList(g.Publish, indent), confList(g.DenyPublish, indent))
	} else {
		fmt.Fprintf(&b, "%s  publish: { allow: %s }\n", indent, confList(g.Publish, indent))
	}
	fmt.Fprintf(&b, "%s  subscribe: { allow: %s }\n", indent, confList(g.Subscribe, indent))
	if g.Responses {
		fmt.Fprintf(&b, "%s  allow_responses: { max: -1, expires: %q }\n", indent, ResponseWindow.String())
	}
	b.WriteString(indent + "}")
	return b.String()
}

// confVar is the configuration variable of a role's permissions.
func confVar(r Role) string { return strings.ToUpper(string(r)) + "_PERMISSIONS" }

func confList(s []string, indent string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = fmt.Sprintf("%q", v)
	}
	return "[\n" + indent + "    " + strings.Join(q, ",\n"+indent+"    ") + "\n" + indent + "  ]"
}

// UsersConf renders the servers' users block: each role's nkey with its
// role's permissions.
func (c *Credentials) UsersConf() string {
	var b strings.Builder
	b.WriteString("# The NATS users of a Chio deployment, one nkey per role (written by chio keygen; the\n")
	b.WriteString("# seeds are beside this file), each with its role's permissions (deploy/nats/permissions.conf).\n")
	b.WriteString("authorization {\n  users = [\n")
	for _, r := range Roles() {
		fmt.Fprintf(&b, "    # %s\n    { nkey: %s, permissions: %s }\n", r, c.Public(r), permissionsBlock(r, "      "))
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

// UsersConfFile is the name of the users block in a credentials directory.
const UsersConfFile = "users.conf"

// WriteUsersConf writes the users block into the credentials directory.
func (c *Credentials) WriteUsersConf() (string, error) {
	path := filepath.Join(c.Dir, UsersConfFile)
	// Public keys only, but the seeds' directory: the owner and the
	// NATS server read it.
	if err := os.WriteFile(path, []byte(c.UsersConf()), 0o644); err != nil {
		return "", fmt.Errorf("nats credentials: write %s: %w", path, err)
	}
	return path, nil
}
