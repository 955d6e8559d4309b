package a2aadapter

import "regexp"

// Credentials can reach an error's text through a URL (user info, an API
// key in the query) or an echoed Authorization value. These patterns are
// compiled once and never changed.
var (
	urlUserInfo  = regexp.MustCompile(`(?i)\b(https?://)[^/\s@"']*@`)
	urlQuery     = regexp.MustCompile(`(?i)\b(https?://[^\s?#"']*)[?#][^\s"']*`)
	authHeaderLn = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+`)
)

// redactedError keeps err for errors.Is and errors.As but prints its text
// without user info, query strings and Authorization values.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// redactErr wraps err so that its text carries no credentials; nil stays nil.
func redactErr(err error) error {
	if err == nil {
		return nil
	}
	return &redactedError{msg: redactText(err.Error()), err: err}
}

func redactText(s string) string {
	s = urlUserInfo.ReplaceAllString(s, "$1")
	s = urlQuery.ReplaceAllString(s, "$1")
	return authHeaderLn.ReplaceAllString(s, "$1 [redacted]")
}
