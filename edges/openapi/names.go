package openapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/chio-ledger/chio/edges/tools"
)

// MaxToolName is the longest tool name MCP clients and the OpenAI function
// API both accept; names use only [a-zA-Z0-9_-].
const MaxToolName = 64

// nameRule is the tool name rule: ^[a-zA-Z0-9_-]{1,MaxToolName}$.
var nameRule = tools.NameRule{Allowed: tools.WordChar, MaxLen: MaxToolName}

// validToolName reports whether s matches ^[a-zA-Z0-9_-]{1,64}$.
func validToolName(s string) bool { return nameRule.Valid(s) }

// derivedName is the name of an operation whose operationId is absent or
// does not fit: the lower-case method, "_", and the path with every run of
// other characters (slashes, braces, dots) turned into one "_", trimmed.
// GET /pets/{petId} becomes get_pets_petId; GET / becomes get. A name longer
// than MaxToolName is cut and given the digest suffix (see digestName).
func derivedName(method, path string) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(method))
	sep := true // a "_" is due before the next kept byte
	for i := 0; i < len(path); i++ {
		c := path[i]
		if !nameRule.AllowsByte(c) || c == '_' {
			sep = true
			continue
		}
		if sep {
			b.WriteByte('_')
			sep = false
		}
		b.WriteByte(c)
	}
	name := b.String()
	if len(name) > MaxToolName {
		name = digestName(name, method, path, 8)
	}
	return name
}

// digestName makes base unique to its operation: base, cut to fit, then "_"
// and the first n hex digits of sha256("METHOD path"). The digest depends
// only on the operation, so the name is stable across builds.
func digestName(base, method, path string, n int) string {
	sum := sha256.Sum256([]byte(method + " " + path))
	digest := hex.EncodeToString(sum[:])[:n]
	if limit := MaxToolName - 1 - n; len(base) > limit {
		base = base[:limit]
	}
	return base + "_" + digest
}

// assignNames names the operations, in order. An operationId that fits
// (^[a-zA-Z0-9_-]{1,64}$) is the name; every fitting operationId is claimed
// before any derived name, so a derived name never takes an operationId's
// place. Otherwise the name is derivedName; when that is already taken (two
// paths that differ only in punctuation, or an operationId equal to it), the
// name gets the suffix "_" + 8 hex digits of sha256("METHOD path"), then 16
// digits; if even that is taken the build fails, so two operations never
// share a name.
func assignNames(ops []*candidate) error {
	taken := make(map[string]bool, len(ops))
	for _, op := range ops {
		if id := op.op.OperationID; validToolName(id) && !taken[id] {
			op.tool = id
			taken[id] = true
		}
	}
	for _, op := range ops {
		if op.tool != "" {
			continue
		}
		name := derivedName(op.method, op.path)
		for _, n := range []int{8, 16} {
			if !taken[name] {
				break
			}
			name = digestName(derivedName(op.method, op.path), op.method, op.path, n)
		}
		if taken[name] {
			return fmt.Errorf("name %s %s: derived name %q is taken", op.method, op.path, name)
		}
		op.tool = name
		taken[name] = true
	}
	return nil
}
