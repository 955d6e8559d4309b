package push

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"
)

// Errors returned by the package. They are wrapped with the operation that
// failed; test them with errors.Is.
var (
	// ErrNotFound means the config does not exist or belongs to another
	// owner: the two are indistinguishable by design.
	ErrNotFound = errors.New("push config not found")
	// ErrTooMany means a task already has the maximum number of configs;
	// nothing was written.
	ErrTooMany = errors.New("too many push configs for the task")
	// ErrOwnerQuota means the owner already holds the maximum number of
	// configs over all its tasks; nothing was written.
	ErrOwnerQuota = errors.New("push config quota exceeded")
	// ErrInvalidArgument means a caller-supplied argument is malformed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidPageToken means a List page token was not issued by List.
	ErrInvalidPageToken = errors.New("invalid page token")
	// ErrTooLarge means a notification does not fit in one outbox
	// message; nothing was written.
	ErrTooLarge = errors.New("push notification too large")
	// ErrForbiddenURL means a webhook URL, or an address it resolves or
	// connects to, is not allowed by the Policy. The wrapping error says
	// why.
	ErrForbiddenURL = errors.New("webhook URL not allowed")
)

// Size limits of a Config's fields, in bytes.
const (
	MaxIDBytes          = 256
	MaxOwnerBytes       = 2048
	MaxURLBytes         = 2048
	MaxTokenBytes       = 4096
	MaxAuthSchemeBytes  = 64
	MaxCredentialsBytes = 8192
	MaxVersionBytes     = 32
)

// Config is one push notification config of a task.
type Config struct {
	// ID names the config within its task and owner; Store.Put assigns a
	// UUIDv7 when it is empty.
	ID string `json:"id"`
	// TaskID is the task the config belongs to.
	TaskID string `json:"task_id"`
	// Owner is an opaque owner key chosen by the edge (the caller's
	// principal and tenant). Every read and write is scoped to it.
	Owner string `json:"owner"`
	// URL is the webhook; Token is echoed as X-A2A-Notification-Token
	// when not empty.
	URL   string `json:"url"`
	Token string `json:"token,omitempty"`
	// AuthScheme and AuthCredentials make the header
	// "Authorization: <scheme> <credentials>" when AuthScheme is not
	// empty ("Authorization: <scheme>" without credentials).
	AuthScheme      string `json:"auth_scheme,omitempty"`
	AuthCredentials string `json:"auth_credentials,omitempty"`
	// Version is the payload dialect chosen by the edge ("1.0" or "0.3");
	// stored, not interpreted here.
	Version string `json:"version,omitempty"`
	// Created is set by Store.Put to the time of the Put when zero.
	Created time.Time `json:"created"`
}

// validate checks every field of a config that is about to be stored or
// enqueued (ID included: Put assigns one first).
func (c *Config) validate() error {
	switch {
	case c.TaskID == "" || len(c.TaskID) > MaxIDBytes:
		return fmt.Errorf("%w: task id empty or longer than %d bytes", ErrInvalidArgument, MaxIDBytes)
	case c.ID == "" || len(c.ID) > MaxIDBytes:
		return fmt.Errorf("%w: config id empty or longer than %d bytes", ErrInvalidArgument, MaxIDBytes)
	case c.Owner == "" || len(c.Owner) > MaxOwnerBytes:
		return fmt.Errorf("%w: owner empty or longer than %d bytes", ErrInvalidArgument, MaxOwnerBytes)
	case len(c.Token) > MaxTokenBytes || !headerValue(c.Token):
		return fmt.Errorf("%w: token longer than %d bytes or not a valid header value", ErrInvalidArgument, MaxTokenBytes)
	case len(c.AuthScheme) > MaxAuthSchemeBytes || (c.AuthScheme != "" && !httpToken(c.AuthScheme)):
		return fmt.Errorf("%w: authentication scheme longer than %d bytes or not an HTTP token", ErrInvalidArgument, MaxAuthSchemeBytes)
	case len(c.AuthCredentials) > MaxCredentialsBytes || !headerValue(c.AuthCredentials):
		return fmt.Errorf("%w: credentials longer than %d bytes or not a valid header value", ErrInvalidArgument, MaxCredentialsBytes)
	case c.AuthCredentials != "" && c.AuthScheme == "":
		return fmt.Errorf("%w: credentials without an authentication scheme", ErrInvalidArgument)
	case len(c.Version) > MaxVersionBytes || !headerValue(c.Version):
		return fmt.Errorf("%w: version longer than %d bytes", ErrInvalidArgument, MaxVersionBytes)
	}
	if _, err := parseURL(c.URL); err != nil {
		return fmt.Errorf("%w: url: %w", ErrInvalidArgument, err)
	}
	return nil
}

// headerValue reports whether s can be sent as an HTTP header value as is:
// no control characters except tab, no leading or trailing white space
// (a receiver would trim it).
func headerValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return s == "" || (s[0] != ' ' && s[0] != '\t' && s[len(s)-1] != ' ' && s[len(s)-1] != '\t')
}

// httpToken reports whether s is an RFC 9110 token (an auth scheme).
func httpToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '!', c == '#', c == '$', c == '%', c == '&', c == '\'', c == '*', c == '+',
			c == '-', c == '.', c == '^', c == '_', c == '`', c == '|', c == '~':
		default:
			return false
		}
	}
	return s != ""
}

// Key layout of the config bucket: <task>.<owner>.<config>, where <task>
// and <config> are the base64url encodings of the ids (as schemas.KVKey
// does: injective, and always a valid key token whatever the id holds)
// and <owner> is the base64url of the first 16 bytes of the SHA-256 of
// the owner key. Keys of one task share the prefix "<task>.", keys of one
// owner's configs of a task the prefix "<task>.<owner>.", so List,
// ForTask and DeleteTask select keys with a subject filter instead of
// scanning the bucket, and a config id is a name within its owner's
// configs: another owner can neither read nor replace it.

func encodeID(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

func ownerToken(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return base64.RawURLEncoding.EncodeToString(sum[:16])
}

func taskPrefix(taskID string) string { return encodeID(taskID) + "." }

func ownerPrefix(owner, taskID string) string { return taskPrefix(taskID) + ownerToken(owner) + "." }

// ownerFilter matches every config key of owner, of any task.
func ownerFilter(owner string) string { return "*." + ownerToken(owner) + ".*" }

func configKey(owner, taskID, id string) string { return ownerPrefix(owner, taskID) + encodeID(id) }
