package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"
)

// ResultToParts converts a tool result to A2A parts per Chio's
// result-conversion table:
//   - a JSON string → one text part with the string;
//   - an object with a "content" array → one part per entry: a text part for
//     an entry with a string "text", a data part holding any other entry (an
//     image or resource block is kept rather than dropped); an empty content
//     array falls through to the data rule;
//   - an object {"type":"text","text":…} (an MCP text block, which is how
//     the hello-a2a stream chunks arrive) → one text part;
//   - any other object or array → one data part;
//   - any other scalar (number, boolean, null) → a text part with its JSON text.
//
// It never returns an empty slice for valid JSON; invalid JSON is an error.
func ResultToParts(result json.RawMessage) ([]Part, error) {
	result = bytes.TrimSpace(result)
	if len(result) == 0 || !json.Valid(result) {
		return nil, fmt.Errorf("tool result: %w", invalid("not valid JSON"))
	}
	switch jsonKind(result) {
	case 's':
		var s string
		if err := json.Unmarshal(result, &s); err != nil {
			return nil, fmt.Errorf("tool result: %w", err)
		}
		return []Part{TextPart(s)}, nil
	case 'a':
		return []Part{DataPart(append(json.RawMessage(nil), result...))}, nil
	case 'o':
		var o map[string]json.RawMessage
		if err := json.Unmarshal(result, &o); err != nil {
			return nil, fmt.Errorf("tool result: %w", err)
		}
		var content []json.RawMessage
		if raw, ok := o["content"]; ok && jsonKind(raw) == 'a' && json.Unmarshal(raw, &content) == nil && len(content) > 0 {
			parts := make([]Part, 0, len(content))
			for _, entry := range content {
				if text, ok := textMember(entry); ok {
					parts = append(parts, TextPart(text))
				} else {
					parts = append(parts, DataPart(append(json.RawMessage(nil), bytes.TrimSpace(entry)...)))
				}
			}
			return parts, nil
		}
		if typ, ok := o["type"]; ok && string(bytes.TrimSpace(typ)) == `"text"` {
			if text, ok := textMember(result); ok {
				return []Part{TextPart(text)}, nil
			}
		}
		return []Part{DataPart(append(json.RawMessage(nil), result...))}, nil
	}
	return []Part{TextPart(string(result))}, nil
}

// textMember returns the string member "text" of a JSON object.
func textMember(raw json.RawMessage) (string, bool) {
	if jsonKind(raw) != 'o' {
		return "", false
	}
	var o map[string]json.RawMessage
	if json.Unmarshal(raw, &o) != nil {
		return "", false
	}
	t, ok := o["text"]
	var s string
	if !ok || jsonKind(t) != 's' || json.Unmarshal(t, &s) != nil {
		return "", false
	}
	return s, true
}

// PartsToArguments reads a skill choice and tool arguments from a message's
// parts, for the skill-resolution steps that look at content (the server
// first checks metadata.chio.targetSkillId and the single-skill case):
//
//  1. a data part that is an object with a string "skill" or "function_id":
//     skill is that name, known or not (so the server can name an unknown
//     skill in its error), and args is its "payload" or "arguments" member,
//     or {} when neither is present;
//  2. a text part that starts with one of the known skill ids followed by
//     nothing, whitespace or a JSON object, e.g. `hello_task {"text":"x"}`:
//     skill is that id and args the object, or {} (the longest id wins);
//  3. otherwise ok is false, skill is "", and args is the first data part
//     holding an object, else {"text": <the text parts joined by "\n">}.
//
// ok reports whether the parts named a skill. args is never nil, so a skill
// resolved by metadata can use it as is.
func PartsToArguments(parts []Part, skills []string) (skill string, args json.RawMessage, ok bool) {
	for _, p := range parts {
		if p.Kind() != PartData || jsonKind(p.Data) != 'o' {
			continue
		}
		var o map[string]json.RawMessage
		if json.Unmarshal(p.Data, &o) != nil {
			continue
		}
		name := stringMember(o, "skill")
		if name == "" {
			name = stringMember(o, "function_id")
		}
		if name == "" {
			continue
		}
		for _, key := range []string{"payload", "arguments"} {
			if raw, ok := o[key]; ok && jsonKind(raw) != '0' {
				return name, append(json.RawMessage(nil), bytes.TrimSpace(raw)...), true
			}
		}
		return name, json.RawMessage(`{}`), true
	}

	known := append([]string(nil), skills...)
	sort.SliceStable(known, func(i, j int) bool { return len(known[i]) > len(known[j]) })
	for _, p := range parts {
		if p.Kind() != PartText {
			continue
		}
		text := strings.TrimLeftFunc(*p.Text, unicode.IsSpace)
		for _, id := range known {
			if id == "" || !strings.HasPrefix(text, id) {
				continue
			}
			rest := strings.TrimSpace(text[len(id):])
			if rest == "" && (len(text) == len(id) || unicode.IsSpace(rune(text[len(id)]))) {
				return id, json.RawMessage(`{}`), true
			}
			if jsonKind([]byte(rest)) == 'o' && json.Valid([]byte(rest)) {
				return id, json.RawMessage(rest), true
			}
		}
	}

	for _, p := range parts {
		if p.Kind() == PartData && jsonKind(p.Data) == 'o' {
			return "", append(json.RawMessage(nil), bytes.TrimSpace(p.Data)...), false
		}
	}
	b, err := marshal(map[string]string{"text": joinText(parts, "\n")})
	if err != nil {
		return "", json.RawMessage(`{"text":""}`), false
	}
	return "", b, false
}

func stringMember(o map[string]json.RawMessage, key string) string {
	raw, ok := o[key]
	var s string
	if !ok || jsonKind(raw) != 's' || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
