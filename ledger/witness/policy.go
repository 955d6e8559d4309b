// Package witness holds the building blocks for having the ledger's C2SP
// checkpoints cosigned by witnesses: a trust policy naming the witnesses
// and the quorum of them a checkpoint needs, a verifier for Ed25519
// cosignatures (https://c2sp.org/tlog-cosignature, cosignature/v1), and a
// client for the add-checkpoint call of https://c2sp.org/tlog-witness.
//
// A policy file is a sequence of lines, each a keyword and its fields
// separated by spaces or tabs:
//
//	witness NAME VKEY URL
//	group NAME K|all|any MEMBER...
//	quorum NAME
//
// NAME is local to the file and, like a note key name, non-empty without
// spaces or '+'; witnesses and groups share one namespace. VKEY is the witness's cosignature verifier
// key, name+hash+base64(0x04 || Ed25519 public key). URL is the witness's
// submission prefix (http or https): add-checkpoint is posted to
// URL/add-checkpoint. A group is satisfied when at least K of its members
// are; all means every member and any means one. Members are witnesses or
// groups defined on earlier lines, so a policy has no cycles, and no two
// members of a group hold the same witness, however groups nest, so each
// witness's cosignature counts once. Exactly one
// quorum line names the earlier-defined witness or group that a checkpoint
// must satisfy.
// Blank lines are ignored, and a field that begins with # starts a comment
// running to the end of its line.
package witness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Witness is one witness of a policy.
type Witness struct {
	Name string // the policy's name for it, not the key's name
	VKey string // cosignature verifier key, as written in the policy
	URL  string // submission prefix

	verifier note.Verifier
}

// NewWitness checks a witness's fields and parses its key.
func NewWitness(name, vkey, rawURL string) (Witness, error) {
	if !isValidName(name) {
		return Witness{}, fmt.Errorf("witness name %q: must be non-empty, without spaces or '+'", name)
	}
	v, err := NewCosignatureVerifier(vkey)
	if err != nil {
		return Witness{}, fmt.Errorf("witness %s: %w", name, err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return Witness{}, fmt.Errorf("witness %s: url: %w", name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || strings.ContainsAny(rawURL, "?#") {
		return Witness{}, fmt.Errorf("witness %s: url %q: want http(s)://host[/prefix] with no query or fragment", name, rawURL)
	}
	return Witness{Name: name, VKey: vkey, URL: rawURL, verifier: v}, nil
}

// Verifier is the note verifier of the witness's cosignatures.
func (w Witness) Verifier() note.Verifier { return w.verifier }

// Policy is a parsed policy file. It is immutable.
type Policy struct {
	witnesses []Witness
	// nodes holds witnesses and groups in file order; a group's members
	// are indexes of earlier nodes, which makes one forward pass enough
	// to evaluate every node.
	nodes  []node
	byName map[string]int
	quorum int
}

type node struct {
	name      string
	witness   int // index into witnesses, or -1 for a group
	threshold int
	members   []int
	// under are the witnesses (indexes into witnesses) at or below the
	// node: a group's members have disjoint ones.
	under []int
}

// maxPolicyLine bounds a line so that a wrong file fails fast instead of
// being buffered whole.
const maxPolicyLine = 64 << 10

// ParsePolicy reads a policy file.
func ParsePolicy(r io.Reader) (*Policy, error) {
	p := &Policy{byName: make(map[string]int), quorum: -1}
	quorumLine := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxPolicyLine)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		for i, f := range fields {
			if strings.HasPrefix(f, "#") {
				fields = fields[:i]
				break
			}
		}
		if len(fields) == 0 {
			continue
		}
		var err error
		switch kw, args := fields[0], fields[1:]; kw {
		case "witness":
			err = p.addWitness(args)
		case "group":
			err = p.addGroup(args)
		case "quorum":
			switch {
			case len(args) != 1:
				err = fmt.Errorf("quorum takes 1 field (NAME), got %d", len(args))
			case quorumLine != 0:
				err = fmt.Errorf("quorum repeated (first on line %d)", quorumLine)
			default:
				i, ok := p.byName[args[0]]
				if !ok {
					err = fmt.Errorf("quorum names %q, which no earlier line defines", args[0])
					break
				}
				p.quorum, quorumLine = i, n
			}
		default:
			err = fmt.Errorf("unknown keyword %q", kw)
		}
		if err != nil {
			return nil, fmt.Errorf("parse policy: line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse policy: %w", err)
	}
	if quorumLine == 0 {
		return nil, errors.New("parse policy: no quorum line")
	}
	return p, nil
}

func (p *Policy) define(name string) error {
	if !isValidName(name) {
		return fmt.Errorf("name %q: must be non-empty, without spaces or '+'", name)
	}
	if _, dup := p.byName[name]; dup {
		return fmt.Errorf("name %q defined twice", name)
	}
	return nil
}

func (p *Policy) addWitness(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("witness takes 3 fields (NAME VKEY URL), got %d", len(args))
	}
	if err := p.define(args[0]); err != nil {
		return err
	}
	w, err := NewWitness(args[0], args[1], args[2])
	if err != nil {
		return err
	}
	// Two entries with one key name and hash would make note.Open report
	// an ambiguous verifier for every checkpoint.
	for _, o := range p.witnesses {
		if o.verifier.Name() == w.verifier.Name() && o.verifier.KeyHash() == w.verifier.KeyHash() {
			return fmt.Errorf("witness %s: same key as witness %s", w.Name, o.Name)
		}
	}
	p.byName[w.Name] = len(p.nodes)
	p.nodes = append(p.nodes, node{name: w.Name, witness: len(p.witnesses), under: []int{len(p.witnesses)}})
	p.witnesses = append(p.witnesses, w)
	return nil
}

func (p *Policy) addGroup(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("group takes NAME, K|all|any and at least one MEMBER, got %d fields", len(args))
	}
	name, k, members := args[0], args[1], args[2:]
	if err := p.define(name); err != nil {
		return err
	}
	g := node{name: name, witness: -1}
	seen := make(map[int]bool, len(members))
	via := map[int]string{} // witness → the member it was reached through
	for _, m := range members {
		i, ok := p.byName[m]
		if !ok {
			return fmt.Errorf("group %s: member %q is not defined on an earlier line", name, m)
		}
		if seen[i] {
			return fmt.Errorf("group %s: member %q listed twice", name, m)
		}
		seen[i] = true
		// Each witness counts once in a group, however groups nest: two
		// members that share a witness would let its one cosignature
		// count for both.
		for _, w := range p.nodes[i].under {
			if other, dup := via[w]; dup {
				return fmt.Errorf("group %s: members %s and %s both hold witness %s, which would count twice; a witness may be under one member only",
					name, other, m, p.witnesses[w].Name)
			}
			via[w] = m
			g.under = append(g.under, w)
		}
		g.members = append(g.members, i)
	}
	switch k {
	case "all":
		g.threshold = len(members)
	case "any":
		g.threshold = 1
	default:
		t, err := strconv.Atoi(k)
		if err != nil || t < 1 || t > len(members) || k != strconv.Itoa(t) {
			return fmt.Errorf("group %s: threshold %q: want all, any or a number from 1 to %d", name, k, len(members))
		}
		g.threshold = t
	}
	p.byName[name] = len(p.nodes)
	p.nodes = append(p.nodes, g)
	return nil
}

// Witnesses returns the policy's witnesses in file order.
func (p *Policy) Witnesses() []Witness {
	return append([]Witness(nil), p.witnesses...)
}

// Quorum is the name of the witness or group that a checkpoint must satisfy.
func (p *Policy) Quorum() string { return p.nodes[p.quorum].name }

// Satisfied reports whether the quorum is met when exactly the witnesses
// named true in verified (by their policy names) cosigned.
func (p *Policy) Satisfied(verified map[string]bool) bool {
	ok := make([]bool, len(p.nodes))
	for i, n := range p.nodes {
		if n.witness >= 0 {
			ok[i] = verified[n.name]
			continue
		}
		c := 0
		for _, m := range n.members {
			if ok[m] {
				c++
			}
		}
		ok[i] = c >= n.threshold
	}
	return ok[p.quorum]
}

// LoadPolicy reads the policy file at path.
func LoadPolicy(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("witness policy: %w", err)
	}
	defer f.Close()
	p, err := ParsePolicy(f)
	if err != nil {
		return nil, fmt.Errorf("witness policy %s: %w", path, err)
	}
	return p, nil
}
