package schemas

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// MaxReceiptDepth is the deepest nesting of arrays and objects a stored
// receipt may have and still be served, parsed and projected as JSON. The
// edges refuse input nested deeper than strictjson.MaxDepth and a receipt
// wraps it in a few levels, so no receipt of accepted input comes near
// it; it is far below the 10,000 levels at which encoding/json (and the
// JCS library) stop, so a response that embeds a receipt stays readable
// by its clients. A deeper receipt is still a signed record of the log:
// readers serve it as one item marked unreadable, with its bytes where
// the item is asked for by id, and never fail a list or a report on it.
const MaxReceiptDepth = 256

// Everything the edges accept fits, with room for the receipt's levels.
const _ = uint(MaxReceiptDepth - strictjson.MaxDepth - 16)

// The reasons a stored receipt is unreadable. Each error's text is the
// reason alone, as an item marked unreadable gives it; each is
// ErrUnreadableReceipt (errors.Is).
var (
	ErrUnreadableReceipt = errors.New("unreadable receipt")
	ErrReceiptTooDeep    = &unreadableError{fmt.Sprintf("nested deeper than %d levels", MaxReceiptDepth)}
	ErrReceiptNotJSON    = &unreadableError{"not valid JSON"}
)

type unreadableError struct{ why string }

func (e *unreadableError) Error() string { return e.why }
func (e *unreadableError) Unwrap() error { return ErrUnreadableReceipt }

// CheckReceiptReadable reports why a stored receipt cannot be read as JSON
// by every reader: ErrReceiptTooDeep, or ErrReceiptNotJSON; nil when it
// can. It decodes nothing, so a list can afford it for every item;
// whether the bytes are a valid receipt is ParseReceipt's question.
func CheckReceiptReadable(raw []byte) error {
	if !nestingWithin(raw, MaxReceiptDepth) {
		return ErrReceiptTooDeep
	}
	if !json.Valid(raw) {
		return ErrReceiptNotJSON
	}
	return nil
}

// nestingWithin reports whether the arrays and objects of raw nest at
// most max deep, counting brackets outside strings (raw need not be
// valid: json.Valid decides that).
func nestingWithin(raw []byte, max int) bool {
	depth, inString := 0, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString && c == '\\':
			i++
		case inString:
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > max {
				return false
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return true
}

// TopMember is one top-level member of a JSON object as it is written:
// raw[KeyStart:ValueStart] is its name, the colon and any space around
// it, raw[ValueStart:ValueEnd] its value.
type TopMember struct {
	Name                           string
	KeyStart, ValueStart, ValueEnd int
	// Canonical is the value's RFC 8785 form.
	Canonical []byte
}

// TopMembers splits one JSON object into its top-level members without a
// reader's nesting limit on the object itself: it walks the top level
// iteratively and checks each member's value on its own (RFC 8785's
// reader, which stops at 10,000 levels below the member, as it did when
// the kernel signed it). So a receipt that nests one level too deep for
// every reader can still be told apart from bytes that are not JSON, and
// its members read. Repeated names are refused, as JCS refuses them.
func TopMembers(raw []byte) ([]TopMember, error) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, errors.New("not a JSON object")
	}
	var out []TopMember
	seen := map[string]bool{}
	for i = skipSpace(raw, i+1); ; {
		if i < len(raw) && raw[i] == '}' && len(out) == 0 {
			i++
			break
		}
		if i >= len(raw) || raw[i] != '"' {
			return nil, fmt.Errorf("offset %d: expected a member name", i)
		}
		m := TopMember{KeyStart: i}
		end, err := skipValue(raw, i)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw[i:end], &m.Name); err != nil {
			return nil, fmt.Errorf("offset %d: member name: %w", i, err)
		}
		if seen[m.Name] {
			return nil, fmt.Errorf("member %q is repeated", clipName(m.Name))
		}
		seen[m.Name] = true
		if i = skipSpace(raw, end); i >= len(raw) || raw[i] != ':' {
			return nil, fmt.Errorf("offset %d: expected ':'", i)
		}
		m.ValueStart = skipSpace(raw, i+1)
		if m.ValueEnd, err = skipValue(raw, m.ValueStart); err != nil {
			return nil, err
		}
		if m.Canonical, err = CanonicalizeJSON(raw[m.ValueStart:m.ValueEnd]); err != nil {
			return nil, fmt.Errorf("member %q: %w", clipName(m.Name), err)
		}
		out = append(out, m)
		if i = skipSpace(raw, m.ValueEnd); i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
			continue
		}
		if i >= len(raw) || raw[i] != '}' {
			return nil, fmt.Errorf("offset %d: expected ',' or '}'", i)
		}
		i++
		break
	}
	if skipSpace(raw, i) != len(raw) {
		return nil, fmt.Errorf("offset %d: data after the object", i)
	}
	return out, nil
}

func clipName(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the value starting at raw[i]: a string,
// an array or object (brackets paired outside strings, at any depth,
// without recursion) or a scalar. It checks only that much; the caller
// checks the value's syntax.
func skipValue(raw []byte, i int) (int, error) {
	if i >= len(raw) {
		return 0, fmt.Errorf("offset %d: expected a value", i)
	}
	var stack []byte
	for j := i; j < len(raw); j++ {
		switch c := raw[j]; c {
		case '"':
			for j++; j < len(raw) && raw[j] != '"'; j++ {
				if raw[j] == '\\' {
					j++
				}
			}
			if j >= len(raw) {
				return 0, fmt.Errorf("offset %d: unterminated string", i)
			}
		case '[', '{':
			stack = append(stack, c+2) // ']' and '}' are two past their openers
		case ']', '}':
			if len(stack) == 0 {
				if j == i {
					return 0, fmt.Errorf("offset %d: expected a value", i)
				}
				return j, nil // the end of a scalar
			}
			if stack[len(stack)-1] != c {
				return 0, fmt.Errorf("offset %d: mismatched %q", j, c)
			}
			stack = stack[:len(stack)-1]
		case ',', ' ', '\t', '\n', '\r', ':':
			if len(stack) == 0 {
				if j == i {
					return 0, fmt.Errorf("offset %d: expected a value", i)
				}
				return j, nil
			}
			continue
		default:
			continue
		}
		if len(stack) == 0 {
			return j + 1, nil
		}
	}
	if len(stack) > 0 {
		return 0, fmt.Errorf("offset %d: unterminated %s", i, map[byte]string{']': "array", '}': "object"}[stack[0]])
	}
	return len(raw), nil
}

// ReceiptHead is what can be read of a stored receipt from its top-level
// members alone: the fields a reader selects, scopes and names it by.
// A member that is missing, or whose value has another type, is left
// zero; Decision is as written (check it with Decision.Validate).
type ReceiptHead struct {
	ID, CapabilityID, ToolServer, ToolName, TenantID, KernelKey string
	Timestamp                                                   uint64
	Decision                                                    Decision
}

// ReadReceiptHead reads the head of a stored receipt of at most
// MaxEncodedReceipt bytes that is one JSON object, however deep its
// other members nest (TopMembers): what lets a reader name, select and
// scope a receipt it cannot decode whole, and skip one that records a
// kernel denial.
func ReadReceiptHead(raw []byte) (*ReceiptHead, error) {
	if len(raw) > MaxEncodedReceipt {
		return nil, fmt.Errorf("read receipt head: %d bytes, more than a receipt may have", len(raw))
	}
	members, err := TopMembers(raw)
	if err != nil {
		return nil, fmt.Errorf("read receipt head: %w", err)
	}
	h := &ReceiptHead{}
	fields := map[string]any{
		"id": &h.ID, "capability_id": &h.CapabilityID, "tool_server": &h.ToolServer, "tool_name": &h.ToolName,
		"tenant_id": &h.TenantID, "kernel_key": &h.KernelKey, "timestamp": &h.Timestamp, "decision": &h.Decision,
	}
	for _, m := range members {
		if dst, ok := fields[m.Name]; ok {
			_ = json.Unmarshal(m.Canonical, dst) // another type: left zero, as documented
		}
	}
	return h, nil
}
