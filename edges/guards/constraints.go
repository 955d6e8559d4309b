package guards

import (
	"github.com/chio-ledger/chio/schemas/strictjson"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/chio-ledger/chio/schemas"
)

// MaxConstraintPattern bounds a regex constraint's pattern, in bytes.
const MaxConstraintPattern = 1024

// Constraint wire types.
const (
	ConstraintExact     = "exact"
	ConstraintOneOf     = "one_of"
	ConstraintPrefix    = "prefix"
	ConstraintRegex     = "regex"
	ConstraintMax       = "max"
	ConstraintMaxLength = "max_length"
)

// ErrUnsupportedConstraint is the error for a constraint type this kernel
// does not evaluate; a grant carrying one denies every call (fail closed).
var ErrUnsupportedConstraint = errors.New("unsupported constraint type")

type constraintKind uint8

const (
	kindExact constraintKind = iota
	kindOneOf
	kindPrefix
	kindRegex
	kindMax
	kindMaxLength
)

// constraintKindOf maps a wire type to its kind.
func constraintKindOf(typ string) (constraintKind, bool) {
	switch typ {
	case ConstraintExact:
		return kindExact, true
	case ConstraintOneOf:
		return kindOneOf, true
	case ConstraintPrefix:
		return kindPrefix, true
	case ConstraintRegex:
		return kindRegex, true
	case ConstraintMax:
		return kindMax, true
	case ConstraintMaxLength:
		return kindMaxLength, true
	}
	return 0, false
}

// operand is each kind's operand key besides "pointer".
func (k constraintKind) operand() string {
	switch k {
	case kindExact:
		return "equals"
	case kindOneOf:
		return "values"
	case kindPrefix:
		return "prefix"
	case kindRegex:
		return "pattern"
	case kindMax:
		return "max"
	}
	return "max_length"
}

// ConstraintSet is a grant's argument constraints, validated and compiled
// once per verified token. A nil *ConstraintSet has no constraints.
type ConstraintSet struct {
	cs []compiledConstraint
}

type compiledConstraint struct {
	index  int
	typ    string
	kind   constraintKind
	ptr    pointer
	equals any    // exact
	values []any  // one_of
	prefix string // prefix
	re     *regexp.Regexp
	max    decimal // max
	maxLen int     // max_length
}

// CompileConstraints validates and compiles a grant's constraints. An
// unknown type, an unknown or missing operand key, or a bad operand is an
// error, on which the kernel denies: a constraint it cannot evaluate must
// never be skipped.
func CompileConstraints(cs []schemas.Constraint) (*ConstraintSet, error) {
	if len(cs) > schemas.MaxConstraints {
		return nil, fmt.Errorf("compile constraints: more than %d constraints", schemas.MaxConstraints)
	}
	set := &ConstraintSet{cs: make([]compiledConstraint, 0, len(cs))}
	for i, c := range cs {
		cc, err := compileConstraint(c)
		if err != nil {
			return nil, fmt.Errorf("compile constraints: constraints[%d] (%s): %w", i, abbreviate(c.Type, 64), err)
		}
		cc.index = i
		set.cs = append(set.cs, cc)
	}
	return set, nil
}

func compileConstraint(c schemas.Constraint) (compiledConstraint, error) {
	kind, ok := constraintKindOf(c.Type)
	if !ok {
		return compiledConstraint{}, ErrUnsupportedConstraint
	}
	cc := compiledConstraint{typ: c.Type, kind: kind}
	v, err := strictjson.Parse(c.Value)
	if err != nil {
		return cc, fmt.Errorf("value: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return cc, errors.New("value must be an object")
	}
	opKey := kind.operand()
	for k := range m {
		if k != "pointer" && k != opKey {
			return cc, fmt.Errorf("value has unknown key %q", abbreviate(k, 64))
		}
	}
	ptr, ok := m["pointer"].(string)
	if !ok {
		return cc, errors.New(`value.pointer must be a string`)
	}
	if cc.ptr, err = parsePointer(ptr); err != nil {
		return cc, fmt.Errorf("value.pointer: %w", err)
	}
	op, ok := m[opKey]
	if !ok {
		return cc, fmt.Errorf("value.%s is required", opKey)
	}
	switch kind {
	case kindExact:
		cc.equals = op
	case kindOneOf:
		vs, ok := op.([]any)
		if !ok || len(vs) == 0 {
			return cc, errors.New("value.values must be a non-empty array")
		}
		cc.values = vs
	case kindPrefix:
		if cc.prefix, ok = op.(string); !ok {
			return cc, errors.New("value.prefix must be a string")
		}
	case kindRegex:
		p, ok := op.(string)
		if !ok {
			return cc, errors.New("value.pattern must be a string")
		}
		if len(p) > MaxConstraintPattern {
			return cc, fmt.Errorf("value.pattern is longer than %d bytes", MaxConstraintPattern)
		}
		// Anchored: the pattern must match the whole string, not a part.
		if cc.re, err = regexp.Compile(`^(?:` + p + `)$`); err != nil {
			return cc, fmt.Errorf("value.pattern: %w", err)
		}
	case kindMax:
		n, ok := op.(json.Number)
		if !ok {
			return cc, errors.New("value.max must be a number")
		}
		if cc.max, ok = parseDecimal(string(n)); !ok {
			return cc, errors.New("value.max is out of range")
		}
	case kindMaxLength:
		n, ok := op.(json.Number)
		if !ok {
			return cc, errors.New("value.max_length must be a non-negative integer")
		}
		l, err := strconv.ParseInt(string(n), 10, 64)
		if err != nil || l < 0 || l > math.MaxInt32 {
			return cc, errors.New("value.max_length must be a non-negative integer")
		}
		cc.maxLen = int(l)
	}
	return cc, nil
}

// Len is the number of constraints in the set.
func (s *ConstraintSet) Len() int {
	if s == nil {
		return 0
	}
	return len(s.cs)
}

// Check evaluates every constraint against decoded arguments (as Call.Args
// returns them); the first failure denies. Details name the constraint's
// index, type and pointer, never the argument's value.
func (s *ConstraintSet) Check(args any) Result {
	if s == nil {
		return Result{Allow: true}
	}
	for i := range s.cs {
		c := &s.cs[i]
		v, ok := c.ptr.resolve(args)
		why := "target is missing"
		if ok {
			why = c.eval(v)
		}
		if why != "" {
			return Result{Details: fmt.Sprintf("constraint[%d] %s at %q: %s",
				c.index, c.typ, abbreviate(c.ptr.raw, 128), why)}
		}
	}
	return Result{Allow: true}
}

// eval returns why v fails the constraint, or "".
func (c *compiledConstraint) eval(v any) string {
	switch c.kind {
	case kindExact:
		if !jsonEqual(v, c.equals) {
			return "value differs from the required value"
		}
	case kindOneOf:
		for _, want := range c.values {
			if jsonEqual(v, want) {
				return ""
			}
		}
		return "value is not one of the allowed values"
	case kindPrefix:
		s, ok := v.(string)
		if !ok {
			return "target is not a string"
		}
		if !strings.HasPrefix(s, c.prefix) {
			return "value lacks the required prefix"
		}
	case kindRegex:
		s, ok := v.(string)
		if !ok {
			return "target is not a string"
		}
		if !c.re.MatchString(s) {
			return "value does not match the pattern"
		}
	case kindMax:
		n, ok := v.(json.Number)
		if !ok {
			return "target is not a number"
		}
		d, ok := parseDecimal(string(n))
		if !ok || compareDecimal(&d, &c.max) > 0 {
			return "value is above the maximum"
		}
	case kindMaxLength:
		switch x := v.(type) {
		case string:
			// len(x) bounds the rune count: skip counting short strings.
			if len(x) > c.maxLen && utf8.RuneCountInString(x) > c.maxLen {
				return "value is longer than the maximum length"
			}
		case []any:
			if len(x) > c.maxLen {
				return "array is longer than the maximum length"
			}
		default:
			return "target is not a string or an array"
		}
	default:
		return "unknown constraint kind"
	}
	return ""
}

// constraintGuard applies the matched grant's compiled constraints.
type constraintGuard struct{}

// NewConstraintGuard returns the guard that enforces Call.Constraints.
func NewConstraintGuard() Guard { return constraintGuard{} }

func (constraintGuard) Name() string { return "ConstraintGuard" }

func (constraintGuard) Check(_ context.Context, c *Call) (Result, error) {
	if c == nil {
		return Result{}, errors.New("constraint guard: no call")
	}
	if c.Constraints == nil {
		// A grant with constraints but no compiled set is a kernel bug;
		// allowing would silently drop the grant's restrictions.
		if c.Grant != nil && len(c.Grant.Constraints) > 0 {
			return Result{}, errors.New("constraint guard: the grant's constraints were not compiled")
		}
		return Result{Allow: true}, nil
	}
	if c.Constraints.Len() == 0 {
		return Result{Allow: true}, nil
	}
	args, err := c.Args()
	if err != nil {
		return Result{}, fmt.Errorf("constraint guard: %w", err)
	}
	return c.Constraints.Check(args), nil
}
