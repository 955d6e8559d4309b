package schemas

// alreadyCanonical reports whether raw is JSON text that RFC 8785 leaves
// as it is, for the shapes Chio's own writers produce: objects with
// strictly increasing keys, strings of printable ASCII that need no
// escape, integers of at most 15 digits, true, false and null, with no
// whitespace. It answers false for anything else (an escape, a non-ASCII
// byte, a fraction or exponent, -0, whitespace, duplicate keys, nesting
// past 64), which the JCS library then rewrites, so it never admits text
// the library would change: FuzzAlreadyCanonical holds it to that.
//
// Why: the ledger canonicalizes each receipt's metadata and each event's
// parameters, nearly always already canonical, and one pass over them
// costs a fraction of a parse and re-serialization.
func alreadyCanonical(raw []byte) bool {
	s := canonScanner{b: raw}
	return s.value(0) && s.i == len(s.b)
}

type canonScanner struct {
	b []byte
	i int
}

const maxCanonDepth = 64

func (s *canonScanner) value(depth int) bool {
	if s.i >= len(s.b) || depth > maxCanonDepth {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth)
	case c == '[':
		return s.array(depth)
	case c == '"':
		_, ok := s.str()
		return ok
	case c == '-' || c >= '0' && c <= '9':
		return s.integer()
	default:
		for _, lit := range [...]string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
				s.i += len(lit)
				return true
			}
		}
		return false
	}
}

func (s *canonScanner) object(depth int) bool {
	s.i++ // '{'
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	var prev []byte
	for first := true; ; first = false {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		key, ok := s.str()
		// ASCII keys: byte order is the UTF-16 order JCS sorts by.
		if !ok || !first && string(key) <= string(prev) {
			return false
		}
		prev = key
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		if !s.value(depth + 1) {
			return false
		}
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

func (s *canonScanner) array(depth int) bool {
	s.i++ // '['
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for {
		if !s.value(depth+1) || s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			return true
		default:
			return false
		}
	}
}

// str reads a string needing no escape, returning its content.
func (s *canonScanner) str() ([]byte, bool) {
	s.i++ // '"'
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// integer reads 0 or a nonzero integer of at most 15 digits, which JCS
// (ECMAScript's number to string) writes back digit for digit.
func (s *canonScanner) integer() bool {
	neg := s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n := s.i - start
	if n == 0 || n > 15 || s.b[start] == '0' && (n > 1 || neg) { // not "", "01" or "-0"
		return false
	}
	return s.i == len(s.b) || s.b[s.i] != '.' && s.b[s.i] != 'e' && s.b[s.i] != 'E'
}

// SetCanonicalMember returns the canonical JSON object obj with member key
// set to value (both already canonical, key printable ASCII needing no
// escape), spliced in at its sorted place, and true; or false when obj is
// not an object alreadyCanonical admits, leaving the caller to decode it.
func SetCanonicalMember(obj []byte, key string, value []byte) ([]byte, bool) {
	if len(obj) < 2 || obj[0] != '{' || !alreadyCanonical(obj) {
		return nil, false
	}
	// Walk the members: the object is canonical, so each is "k":v and the
	// scanner cannot fail.
	s := canonScanner{b: obj, i: 1}
	at, end := len(obj)-1, len(obj)-1 // the bytes key's member replaces
	for s.i < len(obj)-1 {
		start := s.i
		k, _ := s.str()
		s.i++ // ':'
		s.value(1)
		if string(k) >= key {
			at, end = start, start
			if string(k) == key {
				end = s.i
				if end < len(obj)-1 {
					end++ // its ','
				}
			}
			break
		}
		if obj[s.i] == ',' {
			s.i++
		}
	}
	member := make([]byte, 0, len(key)+len(value)+4)
	member = append(append(append(member, '"'), key...), `":`...)
	member = append(member, value...)
	out := make([]byte, 0, len(obj)+len(member)+1)
	out = append(out, obj[:at]...)
	if at > 1 && obj[at-1] != ',' {
		out = append(out, ',') // after the last member
	}
	out = append(out, member...)
	if end < len(obj)-1 || (at == end && at < len(obj)-1) {
		out = append(out, ',') // before the members that follow
	}
	return append(out, obj[end:]...), true
}
