package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// obj is a JSON object with its members kept raw. Members are matched by
// exact name (encoding/json structs would match case-insensitively), and a
// JSON null counts as absent, as in ProtoJSON.
type obj struct {
	m    map[string]json.RawMessage
	path string // field path of the object itself, "" for params
}

// object decodes raw as a JSON object at path.
func object(raw json.RawMessage, path string) (obj, *Error) {
	if jsonKind(raw) != 'o' {
		return obj{}, fieldError(pathOr(path), "must be a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return obj{}, fieldError(pathOr(path), "must be a JSON object")
	}
	o := obj{m: m, path: path}
	// get reads a member by its JSON name or its proto name: both at once
	// is one field given twice, which of the two wins must not matter.
	for k := range m {
		if c := jsonName(k); c != k {
			if _, twice := m[c]; twice {
				return obj{}, fieldError(o.field(c), "is given twice (as %s too)", k)
			}
		}
	}
	return o, nil
}

// jsonName is the lowerCamelCase JSON name of a proto field name
// (task_id → taskId); other names come back as they are.
func jsonName(name string) string {
	if !strings.Contains(name, "_") {
		return name
	}
	var b strings.Builder
	up := false
	for _, r := range name {
		switch {
		case r == '_':
			up = true
		case up:
			b.WriteRune(unicode.ToUpper(r))
			up = false
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func pathOr(p string) string {
	if p == "" {
		return "params"
	}
	return p
}

func (o obj) field(name string) string {
	if o.path == "" {
		return name
	}
	return o.path + "." + name
}

// get returns the member, treating null as absent. A member may also go
// by its proto field name (task_id for taskId): ProtoJSON parsers accept
// both, and A2A 1.0 clients (the conformance kit among them) send either.
func (o obj) get(name string) (json.RawMessage, bool) {
	raw, ok := o.m[name]
	if !ok {
		raw, ok = o.m[protoName(name)]
	}
	if !ok || jsonKind(raw) == '0' {
		return nil, false
	}
	return raw, true
}

// protoName is the proto field name of a lowerCamelCase JSON name.
func protoName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (o obj) has(name string) bool {
	_, ok := o.get(name)
	return ok
}

func (o obj) str(name string) (string, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return "", nil
	}
	var s string
	if jsonKind(raw) != 's' || json.Unmarshal(raw, &s) != nil {
		return "", fieldError(o.field(name), "must be a string")
	}
	return s, nil
}

func (o obj) boolean(name string) (bool, bool, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return false, false, nil
	}
	var b bool
	if jsonKind(raw) != 'b' || json.Unmarshal(raw, &b) != nil {
		return false, false, fieldError(o.field(name), "must be a boolean")
	}
	return b, true, nil
}

// integer reads an int32 given as a JSON number or, as ProtoJSON allows, a
// decimal string.
func (o obj) integer(name string) (*int, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return nil, nil
	}
	var text string
	switch jsonKind(raw) {
	case 'n':
		text = string(bytes.TrimSpace(raw))
	case 's':
		if json.Unmarshal(raw, &text) != nil {
			return nil, fieldError(o.field(name), "must be an integer")
		}
	default:
		return nil, fieldError(o.field(name), "must be an integer")
	}
	n, err := strconv.ParseInt(text, 10, 32)
	if err != nil {
		f, ferr := strconv.ParseFloat(text, 64)
		if ferr != nil || f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxInt32 {
			return nil, fieldError(o.field(name), "must be a 32-bit integer")
		}
		n = int64(f)
	}
	v := int(n)
	return &v, nil
}

func (o obj) strings(name string) ([]string, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return nil, nil
	}
	var items []json.RawMessage
	if jsonKind(raw) != 'a' || json.Unmarshal(raw, &items) != nil {
		return nil, fieldError(o.field(name), "must be an array of strings")
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		var s string
		if jsonKind(it) != 's' || json.Unmarshal(it, &s) != nil {
			return nil, fieldError(o.field(name)+"["+strconv.Itoa(i)+"]", "must be a string")
		}
		out = append(out, s)
	}
	return out, nil
}

// metadata reads a free-form object. Numbers stay json.Number so they
// re-encode exactly.
func (o obj) metadata(name string) (map[string]any, *Error) {
	raw, ok := o.get(name)
	if !ok {
		return nil, nil
	}
	if jsonKind(raw) != 'o' {
		return nil, fieldError(o.field(name), "must be a JSON object")
	}
	// strictjson, not encoding/json: metadata is free-form and recorded,
	// so a repeated name or a deep nest is refused here as in the body.
	v, err := strictjson.Parse(raw)
	if err != nil {
		return nil, fieldError(o.field(name), "must be a JSON object: %v", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fieldError(o.field(name), "must be a JSON object")
	}
	return m, nil
}

// data reads a data part's value: any JSON value, kept raw, checked with
// strictjson as the metadata is.
func (o obj) data(raw json.RawMessage) (json.RawMessage, *Error) {
	raw = bytes.TrimSpace(raw)
	if err := strictjson.Valid(raw); err != nil {
		return nil, fieldError(o.field("data"), "must be JSON: %v", err)
	}
	return append(json.RawMessage(nil), raw...), nil
}

func (o obj) timestamp(name string) (*time.Time, *Error) {
	s, e := o.str(name)
	if e != nil || s == "" {
		return nil, e
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, fieldError(o.field(name), "must be an RFC 3339 timestamp")
	}
	return &t, nil
}

func (o obj) state(name string) (*TaskState, *Error) {
	s, e := o.str(name)
	if e != nil || s == "" {
		return nil, e
	}
	st, ok := ParseTaskState(s)
	if !ok {
		return nil, fieldError(o.field(name), "unknown task state %q", s)
	}
	return &st, nil
}

// ParseTaskState accepts either dialect's spelling ("completed" or
// "TASK_STATE_COMPLETED"); TASK_STATE_UNSPECIFIED reads as StateUnknown.
func ParseTaskState(s string) (TaskState, bool) {
	if st := TaskState(s); st.Valid() {
		return st, true
	}
	for st, w := range stateTo10 {
		if w == s {
			return st, true
		}
	}
	return "", false
}

// DecodeMessage decodes a Message in any dialect: 1.0 (ROLE_USER, member-name
// parts), 0.3 ("kind":"message", user, kind parts) or hello-a2a ("type"
// parts). role and a non-empty parts array are required; messageId is not
// (the hello-a2a profile omits it). Field paths in errors start at "message".
func DecodeMessage(raw json.RawMessage) (*Message, *Error) {
	return decodeMessage(raw, "message")
}

func decodeMessage(raw json.RawMessage, path string) (*Message, *Error) {
	o, e := object(raw, path)
	if e != nil {
		return nil, e
	}
	if kind, e := o.str("kind"); e != nil {
		return nil, e
	} else if kind != "" && kind != "message" {
		return nil, fieldError(o.field("kind"), "must be \"message\", not %q", kind)
	}
	m := &Message{}
	if m.MessageID, e = o.str("messageId"); e != nil {
		return nil, e
	}
	if m.ContextID, e = o.str("contextId"); e != nil {
		return nil, e
	}
	if m.TaskID, e = o.str("taskId"); e != nil {
		return nil, e
	}
	role, e := o.str("role")
	if e != nil {
		return nil, e
	}
	switch role {
	case "ROLE_USER", "user":
		m.Role = RoleUser
	case "ROLE_AGENT", "agent":
		m.Role = RoleAgent
	case "", "ROLE_UNSPECIFIED":
		return nil, fieldError(o.field("role"), "is required (ROLE_USER or user)")
	default:
		return nil, fieldError(o.field("role"), "unknown role %q", role)
	}
	if m.Parts, e = decodeParts(o, "parts", true); e != nil {
		return nil, e
	}
	if m.Metadata, e = o.metadata("metadata"); e != nil {
		return nil, e
	}
	if m.Extensions, e = o.strings("extensions"); e != nil {
		return nil, e
	}
	if m.ReferenceTaskIDs, e = o.strings("referenceTaskIds"); e != nil {
		return nil, e
	}
	return m, nil
}

func decodeParts(o obj, name string, required bool) ([]Part, *Error) {
	raw, ok := o.get(name)
	if !ok {
		if required {
			return nil, fieldError(o.field(name), "is required")
		}
		return []Part{}, nil
	}
	var items []json.RawMessage
	if jsonKind(raw) != 'a' || json.Unmarshal(raw, &items) != nil {
		return nil, fieldError(o.field(name), "must be an array of parts")
	}
	if len(items) == 0 && required {
		return nil, fieldError(o.field(name), "must hold at least one part")
	}
	parts := make([]Part, 0, len(items))
	for i, it := range items {
		p, e := decodePart(it, o.field(name)+"["+strconv.Itoa(i)+"]")
		if e != nil {
			return nil, e
		}
		parts = append(parts, p)
	}
	return parts, nil
}

// DecodePart decodes one part in any dialect: 1.0 member-name parts
// ({"text"}, {"data"}, {"raw"}, {"url"} with mediaType, filename, metadata),
// 0.3 kind parts ({"kind":"text"|"data"|"file",…}) or hello-a2a type parts
// ({"type":"text","text":…}). path prefixes field names in errors.
func DecodePart(raw json.RawMessage, path string) (Part, *Error) {
	return decodePart(raw, path)
}

func decodePart(raw json.RawMessage, path string) (Part, *Error) {
	o, e := object(raw, path)
	if e != nil {
		return Part{}, e
	}
	var p Part
	if p.Metadata, e = o.metadata("metadata"); e != nil {
		return Part{}, e
	}
	if p.MediaType, e = o.str("mediaType"); e != nil {
		return Part{}, e
	}
	if p.Filename, e = o.str("filename"); e != nil {
		return Part{}, e
	}
	kind, e := o.str("kind")
	if e != nil {
		return Part{}, e
	}
	typ, e := o.str("type")
	if e != nil {
		return Part{}, e
	}
	switch {
	case kind != "" && typ != "" && kind != typ:
		return Part{}, fieldError(o.field("kind"), "conflicts with type %q", typ)
	case kind != "":
		return discriminatedPart(o, p, kind, "kind")
	case typ != "":
		return discriminatedPart(o, p, typ, "type")
	}

	// 1.0: the member name is the discriminator.
	n := 0
	if raw, ok := o.get("text"); ok {
		n++
		var s string
		if jsonKind(raw) != 's' || json.Unmarshal(raw, &s) != nil {
			return Part{}, fieldError(o.field("text"), "must be a string")
		}
		p.Text = &s
	}
	if raw, ok := o.get("data"); ok {
		n++
		if p.Data, e = o.data(raw); e != nil {
			return Part{}, e
		}
	}
	if _, ok := o.get("raw"); ok {
		n++
		s, e := o.str("raw")
		if e != nil {
			return Part{}, e
		}
		if p.Raw, e = decodeBase64(s, o.field("raw")); e != nil {
			return Part{}, e
		}
	}
	if _, ok := o.get("url"); ok {
		n++
		if p.URL, e = o.str("url"); e != nil {
			return Part{}, e
		}
		if p.URL == "" {
			return Part{}, fieldError(o.field("url"), "must not be empty")
		}
	}
	if _, isNull := o.m["data"]; n == 0 && isNull {
		// A lone "data": null is a data part holding JSON null (protobuf Value).
		p.Data, n = json.RawMessage("null"), 1
	}
	switch n {
	case 0:
		return Part{}, fieldError(pathOr(o.path), "a part needs one of text, data, raw, url (or a kind)")
	case 1:
		return p, nil
	}
	return Part{}, fieldError(pathOr(o.path), "a part may hold only one of text, data, raw and url")
}

// discriminatedPart decodes a 0.3 kind part or a hello-a2a type part.
func discriminatedPart(o obj, p Part, disc, discField string) (Part, *Error) {
	switch disc {
	case "text":
		raw, ok := o.get("text")
		var s string
		if !ok || jsonKind(raw) != 's' || json.Unmarshal(raw, &s) != nil {
			return Part{}, fieldError(o.field("text"), "must be a string")
		}
		p.Text = &s
	case "data":
		raw, ok := o.m["data"]
		if !ok {
			return Part{}, fieldError(o.field("data"), "is required")
		}
		var e *Error
		if p.Data, e = o.data(raw); e != nil {
			return Part{}, e
		}
		if compat, _ := p.Metadata[dataPartCompatKey].(bool); compat {
			if inner, e := object(p.Data, ""); e == nil {
				if v, ok := inner.m["value"]; ok {
					p.Data = append(json.RawMessage(nil), bytes.TrimSpace(v)...)
					delete(p.Metadata, dataPartCompatKey)
					if len(p.Metadata) == 0 {
						p.Metadata = nil
					}
				}
			}
		}
	case "file":
		raw, ok := o.get("file")
		if !ok {
			return Part{}, fieldError(o.field("file"), "is required")
		}
		f, e := object(raw, o.field("file"))
		if e != nil {
			return Part{}, e
		}
		mime, e := f.str("mimeType")
		if e != nil {
			return Part{}, e
		}
		name, e := f.str("name")
		if e != nil {
			return Part{}, e
		}
		if mime != "" {
			p.MediaType = mime
		}
		if name != "" {
			p.Filename = name
		}
		switch hasB, hasU := f.has("bytes"), f.has("uri"); {
		case hasB && hasU:
			return Part{}, fieldError(o.field("file"), "may hold only one of bytes and uri")
		case hasB:
			s, e := f.str("bytes")
			if e != nil {
				return Part{}, e
			}
			if p.Raw, e = decodeBase64(s, f.field("bytes")); e != nil {
				return Part{}, e
			}
		case hasU:
			if p.URL, e = f.str("uri"); e != nil {
				return Part{}, e
			}
			if p.URL == "" {
				return Part{}, fieldError(f.field("uri"), "must not be empty")
			}
		default:
			return Part{}, fieldError(o.field("file"), "needs bytes or uri")
		}
	default:
		return Part{}, fieldError(o.field(discField), "unknown part %s %q (want text, data or file)", discField, disc)
	}
	return p, nil
}

// decodeBase64 accepts standard and URL-safe alphabets, padded or not, as
// ProtoJSON bytes do.
func decodeBase64(s, field string) ([]byte, *Error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, fieldError(field, "must be base64")
}

// DecodeTask decodes a Task in any dialect, including the hello-a2a plain
// string status. It exists for round trips and for clients of other edges;
// the server itself never reads tasks from peers.
func DecodeTask(raw json.RawMessage) (*Task, *Error) {
	o, e := object(raw, "task")
	if e != nil {
		return nil, e
	}
	if kind, e := o.str("kind"); e != nil {
		return nil, e
	} else if kind != "" && kind != "task" {
		return nil, fieldError(o.field("kind"), "must be \"task\", not %q", kind)
	}
	t := &Task{}
	if t.ID, e = o.str("id"); e != nil {
		return nil, e
	}
	if t.ContextID, e = o.str("contextId"); e != nil {
		return nil, e
	}
	statusRaw, ok := o.get("status")
	if !ok {
		return nil, fieldError(o.field("status"), "is required")
	}
	if jsonKind(statusRaw) == 's' {
		st, e := o.state("status")
		if e != nil {
			return nil, e
		}
		t.Status.State = *st
		if mraw, ok := o.get("message"); ok {
			if t.Status.Message, e = decodeMessage(mraw, o.field("message")); e != nil {
				return nil, e
			}
		} else if text, e := o.str("statusMessage"); e != nil {
			return nil, e
		} else if text != "" {
			t.Status.Message = &Message{Role: RoleAgent, Parts: []Part{TextPart(text)}}
		}
		if ts, e := o.timestamp("timestamp"); e != nil {
			return nil, e
		} else if ts != nil {
			t.Status.Timestamp = *ts
		}
	} else {
		so, e := object(statusRaw, o.field("status"))
		if e != nil {
			return nil, e
		}
		st, e := so.state("state")
		if e != nil {
			return nil, e
		}
		if st == nil {
			return nil, fieldError(so.field("state"), "is required")
		}
		t.Status.State = *st
		if mraw, ok := so.get("message"); ok {
			if t.Status.Message, e = decodeMessage(mraw, so.field("message")); e != nil {
				return nil, e
			}
		}
		if ts, e := so.timestamp("timestamp"); e != nil {
			return nil, e
		} else if ts != nil {
			t.Status.Timestamp = *ts
		}
	}
	if raw, ok := o.get("artifacts"); ok {
		var items []json.RawMessage
		if jsonKind(raw) != 'a' || json.Unmarshal(raw, &items) != nil {
			return nil, fieldError(o.field("artifacts"), "must be an array")
		}
		for i, it := range items {
			a, e := decodeArtifact(it, o.field("artifacts")+"["+strconv.Itoa(i)+"]")
			if e != nil {
				return nil, e
			}
			t.Artifacts = append(t.Artifacts, *a)
		}
	}
	if raw, ok := o.get("history"); ok {
		var items []json.RawMessage
		if jsonKind(raw) != 'a' || json.Unmarshal(raw, &items) != nil {
			return nil, fieldError(o.field("history"), "must be an array")
		}
		for i, it := range items {
			m, e := decodeMessage(it, o.field("history")+"["+strconv.Itoa(i)+"]")
			if e != nil {
				return nil, e
			}
			t.History = append(t.History, *m)
		}
	}
	if t.Metadata, e = o.metadata("metadata"); e != nil {
		return nil, e
	}
	return t, nil
}
