package auth

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsatisfiable is wrapped by Authorize's error when no security
// requirement set of the card can be met with the configured credentials.
var ErrUnsatisfiable = errors.New("no security requirement set of the agent card can be satisfied")

// Failure says why one scheme of one requirement set could not be satisfied.
type Failure struct {
	// Set is the index of the requirement set in the card's securityRequirements.
	Set int
	// Scheme is the scheme name the requirement set references.
	Scheme string
	// Err is the reason; it never carries a secret.
	Err error
}

// UnsatisfiableError lists, per requirement set, the schemes that failed.
type UnsatisfiableError struct {
	Failures []Failure
}

func (e *UnsatisfiableError) Error() string {
	var b strings.Builder
	b.WriteString("auth: ")
	b.WriteString(ErrUnsatisfiable.Error())
	for _, f := range e.Failures {
		fmt.Fprintf(&b, "; securityRequirements[%d] scheme %q: %v", f.Set, f.Scheme, f.Err)
	}
	return b.String()
}

// Unwrap exposes ErrUnsatisfiable and each reason, so callers can test for
// causes such as a cancelled context during discovery.
func (e *UnsatisfiableError) Unwrap() []error {
	errs := make([]error, 0, len(e.Failures)+1)
	errs = append(errs, ErrUnsatisfiable)
	for _, f := range e.Failures {
		errs = append(errs, f.Err)
	}
	return errs
}
