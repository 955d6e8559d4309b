package guards

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// PathConfig configures NewPathGuard.
type PathConfig struct {
	Keys         []string `json:"keys,omitempty"`          // argument object keys (at any depth) whose string values are paths; default: DefaultPathKeys
	Forbidden    []string `json:"forbidden,omitempty"`     // glob patterns (path.Match syntax per segment plus "**" for any number of segments); nil = DefaultForbiddenPaths
	AllowedRoots []string `json:"allowed_roots,omitempty"` // when non-empty, every path must lie inside one of these roots (after cleaning)
}

// DefaultPathKeys returns the argument keys whose values are taken as paths
// when PathConfig.Keys is empty.
func DefaultPathKeys() []string {
	return []string{"path", "paths", "file", "file_path", "filepath", "filename", "dir", "directory",
		"cwd", "target", "source", "destination"}
}

// DefaultForbiddenPaths returns the patterns PathConfig.Forbidden defaults
// to: credentials, environment files and the system's secret or virtual
// files. It returns a fresh slice, so callers may extend it.
func DefaultForbiddenPaths() []string {
	return []string{
		"**/.ssh/**", "**/.aws/**", "**/.gnupg/**", "**/.kube/config", "**/.docker/config.json",
		"**/.env", "**/.env.*", "**/.git/config", "**/.git-credentials", "**/.netrc",
		"**/id_rsa*", "**/id_ecdsa*", "**/id_ed25519*",
		"/etc/shadow", "/etc/gshadow", "/etc/passwd", "/etc/sudoers", "/etc/sudoers.d/**",
		"/proc/**", "/sys/**", "/root/**",
	}
}

// maxPathKey bounds a normalized path key, so that matching a caller's
// key needs no allocation.
const maxPathKey = 64

// maxPattern bounds a forbidden pattern or root, in bytes.
const maxPattern = 1024

type pathGuard struct {
	keys      map[string]struct{} // normalized, see normalizeKey
	forbidden []globPattern
	// byFirst indexes forbidden patterns by their literal's first byte.
	// A literal starts a path segment, so a path is tried only against
	// patterns whose literal starts one of its segments: far cheaper than
	// a substring search per pattern.
	byFirst   [256][]int
	noLiteral []int    // patterns without a literal, tried on every path
	roots     []string // cleaned, "/"-separated
}

// NewPathGuard returns the guard that checks every string (or array of
// strings) under a path key of the arguments, at any depth. It denies a
// ".." segment (on the raw value, "/" or "\" separated), a NUL byte, a
// path matching a forbidden pattern, and, when roots are set, a path
// outside every root. Percent-encoded and file URL forms ("file:///x",
// "file:/x", "FILE:x", "file:%2Fx") are checked too, since some tools
// decode them.
//
// Keys match case-insensitively and ignoring "_" and "-", so "filePath"
// and "file-path" are path keys like "file_path". Patterns match
// case-insensitively (paths on macOS and Windows are). A pattern starting
// with "/" matches absolute paths; any other pattern matches relative
// paths and absolute ones with the leading "/" dropped, so "**/.ssh/**"
// catches "/home/a/.ssh/id_rsa", "~/.ssh/id_rsa" and ".ssh/id_rsa".
// Relative paths lie inside no root but ".", which takes every relative
// path not starting with "~".
func NewPathGuard(cfg PathConfig) (Guard, error) {
	g := &pathGuard{keys: make(map[string]struct{})}
	keys := cfg.Keys
	if len(keys) == 0 {
		keys = DefaultPathKeys()
	}
	for _, k := range keys {
		var buf [maxPathKey]byte
		n, ok := normalizeKey(k, &buf)
		if !ok || n == 0 {
			return nil, fmt.Errorf("path guard: key %q must have 1 to %d bytes besides \"_\" and \"-\"", abbreviate(k, 64), maxPathKey)
		}
		g.keys[string(buf[:n])] = struct{}{}
	}
	forbidden := cfg.Forbidden
	if forbidden == nil {
		forbidden = DefaultForbiddenPaths()
	}
	for _, p := range forbidden {
		gp, err := compileGlob(p)
		if err != nil {
			return nil, fmt.Errorf("path guard: forbidden pattern %q: %w", abbreviate(p, 64), err)
		}
		if gp.literal == "" {
			g.noLiteral = append(g.noLiteral, len(g.forbidden))
		} else {
			b := gp.literal[0]
			g.byFirst[b] = append(g.byFirst[b], len(g.forbidden))
		}
		g.forbidden = append(g.forbidden, gp)
	}
	for _, r := range cfg.AllowedRoots {
		if r == "" || len(r) > maxPattern || strings.IndexByte(r, 0) >= 0 || hasTraversal(r) {
			return nil, fmt.Errorf("path guard: allowed root %q must be a non-empty path without \"..\"", abbreviate(r, 64))
		}
		g.roots = append(g.roots, path.Clean(strings.ReplaceAll(r, `\`, "/")))
	}
	return g, nil
}

// normalizeKey writes k lowercased (ASCII) without "_" and "-" into buf.
func normalizeKey(k string, buf *[maxPathKey]byte) (int, bool) {
	n := 0
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '_' || c == '-':
			continue
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		}
		if n == len(buf) {
			return 0, false
		}
		buf[n] = c
		n++
	}
	return n, true
}

func (g *pathGuard) isPathKey(k string) bool {
	var buf [maxPathKey]byte
	n, ok := normalizeKey(k, &buf)
	if !ok {
		return false
	}
	_, ok = g.keys[string(buf[:n])]
	return ok
}

func (*pathGuard) Name() string { return "PathGuard" }

func (g *pathGuard) Check(_ context.Context, c *Call) (Result, error) {
	if c == nil {
		return Result{}, errors.New("path guard: no call")
	}
	args, err := c.Args()
	if err != nil {
		return Result{}, fmt.Errorf("path guard: %w", err)
	}
	if !anyViolation(args, false, "", g.visit) {
		return Result{Allow: true}, nil
	}
	return Result{Details: violationDetails(args, false, g.visit)}, nil
}

func (g *pathGuard) visit(s string, _ bool, parentKey string) string {
	if parentKey == "" || !g.isPathKey(parentKey) {
		return ""
	}
	return g.checkPath(s)
}

// checkPath checks a path as given, or a file URL's path, and the forms
// a tool might decode it into: its percent-decodings (which may be file
// URLs themselves).
func (g *pathGuard) checkPath(s string) string {
	if p, withHost, ok := fileURLPath(s); ok {
		return g.checkFileURL(p, withHost, "")
	}
	return g.checkDecoded(s, "")
}

// checkFileURL checks the paths fileURLPath returned, each also without
// a query or fragment ("file:///etc/shadow#x" reads /etc/shadow).
func (g *pathGuard) checkFileURL(p, withHost, suffix string) string {
	for _, f := range [...]string{p, withHost} {
		if f == "" {
			continue
		}
		why := g.checkDecoded(f, " (file URL)")
		if i := strings.IndexAny(f, "?#"); why == "" && i >= 0 {
			why = g.checkDecoded(f[:i], " (file URL)")
		}
		if why != "" {
			return why + suffix
		}
	}
	return ""
}

// checkDecoded checks cur and its percent-decodings; note, if not "",
// says cur is a file URL's path.
func (g *pathGuard) checkDecoded(cur, note string) string {
	if why := g.checkForm(cur); why != "" {
		return why + note
	}
	// Decode up to three times: "%252e%252e" is ".." after two.
	for range 3 {
		if strings.IndexByte(cur, '%') < 0 {
			break
		}
		dec, err := url.PathUnescape(cur)
		if err != nil || dec == cur {
			break
		}
		if note == "" {
			if p, withHost, ok := fileURLPath(dec); ok {
				// "file%3A%2F%2Fx": the decoded form is a file URL.
				return g.checkFileURL(p, withHost, " (percent-encoded)")
			}
		}
		if why := g.checkForm(dec); why != "" {
			return why + note + " (percent-encoded)"
		}
		cur = dec
	}
	return ""
}

// fileURLPath reports whether s is a file URL as a WHATWG parser reads it
// (leading and trailing controls and spaces and every tab or newline
// dropped): "file:" in any case, then any number of "/" or "\", either
// counting as "/". It returns the URL's path, which is absolute even
// after no slash ("file:etc/passwd" is /etc/passwd). After exactly two
// slashes comes a host ("file://host/x" is /x), but a tool that merely
// strips "file:" reads "file://etc/shadow" as //etc/shadow: withHost is
// that path, with the host as its first segment, to be checked too
// (unless the host is "localhost").
func fileURLPath(s string) (path, withHost string, ok bool) {
	if len(s) < 5 || (s[0]|0x20 != 'f' && s[0] > ' ') {
		return "", "", false // a file URL starts with "f" or a control
	}
	s = preprocessURL(s)
	if len(s) < 5 || !strings.EqualFold(s[:5], "file:") {
		return "", "", false
	}
	rest := s[5:]
	n := 0
	for n < len(rest) && isSlash(rest[n]) {
		n++
	}
	switch n {
	case 0:
		return "/" + rest, "", true
	case 2:
		if i := strings.IndexAny(rest[2:], `/\`); i > 0 {
			if strings.EqualFold(rest[2:2+i], "localhost") {
				return rest[2+i:], "", true // the usual host, not a directory
			}
			return rest[2+i:], rest[1:], true
		}
		return rest[1:], "", true // "file://etc": no path but the host
	}
	return rest[n-1:], "", true // from the last slash: an absolute path
}

func (g *pathGuard) checkForm(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "NUL byte"
	}
	if hasTraversal(s) {
		return `".." traversal`
	}
	if strings.IndexByte(s, '\\') >= 0 {
		s = strings.ReplaceAll(s, `\`, "/")
	}
	clean := path.Clean(s)
	if k := g.forbiddenBy(strings.ToLower(clean)); k >= 0 {
		return "forbidden by " + strconv.Quote(abbreviate(g.forbidden[k].raw, 128))
	}
	if len(g.roots) > 0 && !g.inRoots(clean) {
		return "outside the allowed roots"
	}
	return ""
}

// forbiddenBy returns the index of a forbidden pattern matching the
// cleaned, lowercased path p, or -1.
func (g *pathGuard) forbiddenBy(p string) int {
	for _, k := range g.noLiteral {
		if g.forbidden[k].match(p) {
			return k
		}
	}
	// Each pattern is matched at most once, however often its literal
	// recurs: a path of many repeated segments must stay linear.
	var small [1]uint64
	tried := small[:]
	if n := len(g.forbidden); n > 64 {
		tried = make([]uint64, (n+63)/64)
	}
	for i := 0; i < len(p); {
		if p[i] != '/' {
			for _, k := range g.byFirst[p[i]] {
				gp := &g.forbidden[k]
				if tried[k/64]&(1<<(k%64)) != 0 || !strings.HasPrefix(p[i:], gp.literal) {
					continue
				}
				tried[k/64] |= 1 << (k % 64)
				if gp.match(p) {
					return k
				}
			}
		}
		j := strings.IndexByte(p[i:], '/')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return -1
}

func (g *pathGuard) inRoots(p string) bool {
	for _, r := range g.roots {
		switch {
		case r == ".":
			if !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "~") {
				return true
			}
		case r == "/":
			if strings.HasPrefix(p, "/") {
				return true
			}
		case p == r, strings.HasPrefix(p, r) && p[len(r)] == '/':
			return true
		}
	}
	return false
}

// hasTraversal reports whether s has a ".." segment, with "/" or "\" as
// separators.
func hasTraversal(s string) bool {
	if !strings.Contains(s, "..") {
		return false
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '/' || s[i] == '\\' {
			if s[start:i] == ".." {
				return true
			}
			start = i + 1
		}
	}
	return false
}

type segKind uint8

const (
	segLiteral segKind = iota
	segGlob            // path.Match pattern
	segAny             // "**": any number of segments
)

type globSeg struct {
	pat  string
	kind segKind
}

// globPattern is a compiled forbidden pattern (lowercase).
type globPattern struct {
	raw      string
	anchored bool // starts with "/": matches absolute paths only
	segs     []globSeg
	literal  string // the longest literal start of a segment: every matching path has a segment starting with it
}

func compileGlob(p string) (globPattern, error) {
	if p == "" || len(p) > maxPattern || strings.IndexByte(p, 0) >= 0 {
		return globPattern{}, fmt.Errorf("a pattern must have 1 to %d bytes and no NUL", maxPattern)
	}
	if hasTraversal(p) {
		return globPattern{}, errors.New(`a pattern may not contain ".."`)
	}
	g := globPattern{raw: p}
	lp := path.Clean(strings.ToLower(p))
	if lp == "." {
		return globPattern{}, errors.New("the pattern names no path")
	}
	if body, ok := strings.CutPrefix(lp, "/"); ok {
		g.anchored = true
		lp = body
	}
	if lp == "" {
		return g, nil // "/": the root itself
	}
	for _, seg := range strings.Split(lp, "/") {
		var gs globSeg
		switch {
		case seg == "**":
			if n := len(g.segs); n > 0 && g.segs[n-1].kind == segAny {
				continue
			}
			gs = globSeg{kind: segAny}
		case strings.ContainsAny(seg, `*?[\`):
			if _, err := path.Match(seg, ""); err != nil {
				return globPattern{}, fmt.Errorf("segment %q: %w", abbreviate(seg, 64), err)
			}
			gs = globSeg{pat: seg, kind: segGlob}
			if lit := seg[:strings.IndexAny(seg, `*?[\`)]; len(lit) > len(g.literal) {
				g.literal = lit
			}
		default:
			gs = globSeg{pat: seg, kind: segLiteral}
			if len(seg) > len(g.literal) {
				g.literal = seg
			}
		}
		g.segs = append(g.segs, gs)
	}
	return g, nil
}

// match reports whether the cleaned, lowercased path p matches.
func (g *globPattern) match(p string) bool {
	if g.anchored {
		var ok bool
		if p, ok = strings.CutPrefix(p, "/"); !ok {
			return false
		}
	} else {
		p = strings.TrimPrefix(p, "/")
	}
	return matchSegments(g.segs, p)
}

// matchSegments matches p's "/"-separated segments against segs, where
// "**" takes any number of segments. It is the classic wildcard matcher
// with segments for characters: backtracking only to the last "**" keeps
// it linear in the number of pattern and path segments.
func matchSegments(segs []globSeg, p string) bool {
	end := len(p) + 1 // position past the last segment
	i, j := 0, 0
	if p == "" {
		i = end
	}
	starJ, starI := -1, 0
	for i < end {
		if j < len(segs) && segs[j].kind == segAny {
			starJ, starI = j, i
			j++
			continue
		}
		seg, next := nextSegment(p, i)
		if j < len(segs) && segs[j].matches(seg) {
			i, j = next, j+1
			continue
		}
		if starJ < 0 {
			return false
		}
		_, starI = nextSegment(p, starI) // the "**" takes one more segment
		i, j = starI, starJ+1
	}
	for j < len(segs) && segs[j].kind == segAny {
		j++
	}
	return j == len(segs)
}

func nextSegment(p string, i int) (seg string, next int) {
	if k := strings.IndexByte(p[i:], '/'); k >= 0 {
		return p[i : i+k], i + k + 1
	}
	return p[i:], len(p) + 1
}

func (s *globSeg) matches(seg string) bool {
	if s.kind == segLiteral {
		return s.pat == seg
	}
	ok, err := path.Match(s.pat, seg)
	return ok && err == nil
}
