package guards

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MaxExtraPattern bounds an extra secret pattern, in bytes.
const MaxExtraPattern = 1024

// Secret kinds as named in details.
const (
	kindAWS       = "aws access key id"
	kindGitHub    = "github token"
	kindSlack     = "slack token"
	kindStripe    = "stripe live key"
	kindAnthropic = "anthropic api key"
	kindSKKey     = "openai-style api key"
	kindGoogle    = "google api key"
	kindPEM       = "private key"
	kindJWT       = "jwt"
)

// The built-in secret shapes. They are compiled once and never changed;
// each only runs on a string its literal trigger was found in.
var (
	reAWS       = regexp.MustCompile(`(?:^|[^A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?:[^A-Za-z0-9]|$)`)
	reGitHub    = regexp.MustCompile(`(?:^|[^A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,}`)
	reGitHubPAT = regexp.MustCompile(`github_pat_[A-Za-z0-9_]{22,}`)
	reSlack     = regexp.MustCompile(`xox[abprs]-[A-Za-z0-9-]{10,}`)
	reStripe    = regexp.MustCompile(`[sr]k_live_[A-Za-z0-9]{16,}`)
	reSKKey     = regexp.MustCompile(`(?:^|[^A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}`)
	reGoogle    = regexp.MustCompile(`AIza[0-9A-Za-z_-]{35}`)
	rePEM       = regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)
	reJWT       = regexp.MustCompile(`eyJ[A-Za-z0-9_-]{2,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]*`)
)

// Trigger bits: which shapes a string might hold, from a cheap byte scan.
const (
	trigAWS = 1 << iota
	trigGitHub
	trigGitHubPAT
	trigSlack
	trigStripe
	trigSK
	trigGoogle
	trigPEM
	trigJWT
)

// triggerBytes has bit c-64 set for each byte c that starts a trigger
// (all lie in 64..127): a single test skips the other bytes.
const triggerBytes uint64 = 1<<('A'-64) | 1<<('g'-64) | 1<<('x'-64) | 1<<('s'-64) |
	1<<('r'-64) | 1<<('P'-64) | 1<<('e'-64)

// secretTriggers scans s once for the literal start of every built-in
// shape. It replaces a dozen strings.Contains calls per string, which
// mattered on the hot path: most strings start no trigger at all.
func secretTriggers(s string) (t uint) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 64 || c >= 128 || triggerBytes>>(c-64)&1 == 0 {
			continue
		}
		switch s[i] {
		case 'A':
			r := s[i:]
			if strings.HasPrefix(r, "AKIA") || strings.HasPrefix(r, "ASIA") {
				t |= trigAWS
			} else if strings.HasPrefix(r, "AIza") {
				t |= trigGoogle
			}
		case 'g':
			r := s[i:]
			if len(r) >= 4 && r[1] == 'h' && r[3] == '_' && strings.IndexByte("pousr", r[2]) >= 0 {
				t |= trigGitHub
			} else if strings.HasPrefix(r, "github_pat_") {
				t |= trigGitHubPAT
			}
		case 'x':
			if strings.HasPrefix(s[i:], "xox") {
				t |= trigSlack
			}
		case 's', 'r':
			r := s[i:]
			if len(r) >= 3 && r[1] == 'k' {
				if r[2] == '_' && strings.HasPrefix(r[3:], "live_") {
					t |= trigStripe
				} else if r[0] == 's' && r[2] == '-' {
					t |= trigSK
				}
			}
		case 'P':
			if strings.HasPrefix(s[i:], "PRIVATE KEY") {
				t |= trigPEM
			}
		case 'e':
			if strings.HasPrefix(s[i:], "eyJ") {
				t |= trigJWT
			}
		}
	}
	return t
}

// builtinSecretKind names the first built-in secret shape found in s, or
// returns "".
func builtinSecretKind(s string) string {
	t := secretTriggers(s)
	if t == 0 {
		return ""
	}
	switch {
	case t&trigPEM != 0 && rePEM.MatchString(s):
		return kindPEM
	case t&trigAWS != 0 && reAWS.MatchString(s):
		return kindAWS
	case t&trigGitHub != 0 && reGitHub.MatchString(s),
		t&trigGitHubPAT != 0 && reGitHubPAT.MatchString(s):
		return kindGitHub
	case t&trigSlack != 0 && reSlack.MatchString(s):
		return kindSlack
	case t&trigStripe != 0 && reStripe.MatchString(s):
		return kindStripe
	case t&trigGoogle != 0 && reGoogle.MatchString(s):
		return kindGoogle
	case t&trigJWT != 0 && reJWT.MatchString(s):
		return kindJWT
	}
	if t&trigSK != 0 {
		return skKeyKind(s)
	}
	return ""
}

// skKeyKind finds an "sk-" key. The shape alone also fits hyphenated
// words ("sk-learn-tutorial-for-beginners"), so a candidate must look
// random: a run of 20 letters and digits, or all of upper case, lower case
// and digits.
func skKeyKind(s string) string {
	for _, loc := range reSKKey.FindAllStringIndex(s, 16) {
		m := s[loc[0]:loc[1]]
		body := m[strings.Index(m, "sk-")+3:]
		if !looksRandom(body) {
			continue
		}
		if strings.HasPrefix(body, "ant-") {
			return kindAnthropic
		}
		return kindSKKey
	}
	return ""
}

func looksRandom(s string) bool {
	var upper, lower, digit bool
	run := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			upper = true
		case c >= 'a' && c <= 'z':
			lower = true
		case c >= '0' && c <= '9':
			digit = true
		default:
			run = -1
		}
		if run++; run >= 20 {
			return true
		}
	}
	return upper && lower && digit
}

// SecretLeakConfig configures NewSecretLeakGuard.
type SecretLeakConfig struct {
	ExtraPatterns []string `json:"extra_patterns,omitempty"` // additional RE2 patterns (named in details as extra[i])
}

type extraPattern struct {
	name   string
	re     *regexp.Regexp
	prefix string // a literal every match starts with, used as a prefilter
}

type secretLeakGuard struct {
	extra []extraPattern
}

// NewSecretLeakGuard returns the guard that denies a call whose arguments
// (string values and object keys, at any depth) carry a credential: AWS
// access key ids, GitHub, Slack and Stripe live tokens, sk- API keys,
// Google API keys, PEM private keys and JWTs, plus cfg.ExtraPatterns.
// Details name the kind and the JSON pointer, never any part of the secret.
func NewSecretLeakGuard(cfg SecretLeakConfig) (Guard, error) {
	g := &secretLeakGuard{}
	for i, p := range cfg.ExtraPatterns {
		name := fmt.Sprintf("extra[%d]", i)
		if p == "" || len(p) > MaxExtraPattern {
			return nil, fmt.Errorf("secret leak guard: %s: a pattern must have 1 to %d bytes", name, MaxExtraPattern)
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("secret leak guard: %s: %w", name, err)
		}
		if re.MatchString("") {
			// It would match every string and so deny every call.
			return nil, fmt.Errorf("secret leak guard: %s matches the empty string", name)
		}
		prefix, _ := re.LiteralPrefix()
		g.extra = append(g.extra, extraPattern{name: name, re: re, prefix: prefix})
	}
	return g, nil
}

func (*secretLeakGuard) Name() string { return "SecretLeakGuard" }

func (g *secretLeakGuard) Check(_ context.Context, c *Call) (Result, error) {
	if c == nil {
		return Result{}, errors.New("secret leak guard: no call")
	}
	args, err := c.Args()
	if err != nil {
		return Result{}, fmt.Errorf("secret leak guard: %w", err)
	}
	if !anyViolation(args, true, "", g.visit) {
		return Result{Allow: true}, nil
	}
	return Result{Details: violationDetails(args, true, g.visit)}, nil
}

func (g *secretLeakGuard) visit(s string, _ bool, _ string) string {
	if k := builtinSecretKind(s); k != "" {
		return k
	}
	for i := range g.extra {
		x := &g.extra[i]
		if x.prefix != "" && !strings.Contains(s, x.prefix) {
			continue
		}
		if x.re.MatchString(s) {
			return x.name
		}
	}
	return ""
}
