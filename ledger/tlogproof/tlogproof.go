// Package tlogproof reads and writes C2SP tlog-proof@v1: a self-contained,
// offline-verifiable text proof of one entry's inclusion, made of the
// entry's index, its RFC 6962 audit path and the signed checkpoint it
// leads to (https://c2sp.org/tlog-proof).
package tlogproof

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Header is the first line of every proof.
const Header = "c2sp.org/tlog-proof@v1"

// Proof is a parsed tlog-proof.
type Proof struct {
	Extra      []byte   // optional, unauthenticated
	Index      uint64   // zero-based entry index
	Path       [][]byte // audit path, leaf sibling first
	Checkpoint []byte   // the signed checkpoint note, verbatim
}

// Marshal encodes p.
func (p *Proof) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(Header + "\n")
	if len(p.Extra) > 0 {
		b.WriteString("extra " + base64.StdEncoding.EncodeToString(p.Extra) + "\n")
	}
	b.WriteString("index " + strconv.FormatUint(p.Index, 10) + "\n")
	for _, h := range p.Path {
		b.WriteString(base64.StdEncoding.EncodeToString(h) + "\n")
	}
	b.WriteString("\n")
	b.Write(p.Checkpoint)
	return b.Bytes()
}

// Is reports whether b starts like a tlog-proof.
func Is(b []byte) bool { return bytes.HasPrefix(b, []byte(Header+"\n")) }

// Parse decodes a proof. It checks the form only; verifying the checkpoint
// and the path is the caller's job.
func Parse(b []byte) (*Proof, error) {
	head, checkpoint, ok := bytes.Cut(b, []byte("\n\n"))
	if !ok || len(checkpoint) == 0 {
		return nil, errors.New("tlog-proof: no blank line before the checkpoint")
	}
	lines := strings.Split(string(head), "\n")
	if lines[0] != Header {
		return nil, fmt.Errorf("tlog-proof: first line is not %q", Header)
	}
	p := &Proof{Checkpoint: checkpoint}
	lines = lines[1:]
	if len(lines) > 0 && strings.HasPrefix(lines[0], "extra ") {
		extra, err := base64.StdEncoding.Strict().DecodeString(lines[0][len("extra "):])
		if err != nil {
			return nil, fmt.Errorf("tlog-proof: extra: %w", err)
		}
		p.Extra, lines = extra, lines[1:]
	}
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "index ") {
		return nil, errors.New("tlog-proof: missing index line")
	}
	idx := lines[0][len("index "):]
	n, err := strconv.ParseUint(idx, 10, 64)
	if err != nil || strconv.FormatUint(n, 10) != idx {
		return nil, fmt.Errorf("tlog-proof: index %q is not a decimal without leading zeroes", idx)
	}
	p.Index = n
	for i, l := range lines[1:] {
		h, err := base64.StdEncoding.Strict().DecodeString(l)
		if err != nil || len(h) != 32 {
			return nil, fmt.Errorf("tlog-proof: audit path line %d is not a base64 SHA-256 hash", i+1)
		}
		p.Path = append(p.Path, h)
	}
	if len(p.Path) > 63 {
		return nil, errors.New("tlog-proof: audit path longer than 63 hashes")
	}
	return p, nil
}
