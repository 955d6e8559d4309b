package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode"
)

// referenceDecode is what Parse promises to match: json.Decoder with
// UseNumber, plus an error for trailing data.
func referenceDecode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if len(bytes.TrimLeft(raw[dec.InputOffset():], " \t\r\n")) != 0 {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func TestParseMatchesEncodingJSON(t *testing.T) {
	docs := []string{
		`null`, `true`, `false`, `0`, `-0`, `1.5e+10`, `-12.0E-3`, `"x"`, `""`, `[]`, `{}`,
		` {"a" : [1, "two", {"three": null}] , "b":false} `,
		`{"esc":"a\"b\\c\/d\b\f\n\r\t\u00e9\u20ac\ud83d\ude00"}`,
		"{\"raw\":\"h\xc3\xa9llo ok\"}",
		`[[[[[]]]]]`,
		`{"a":{"b":{"c":[1,2,{"d":"e"}]}}}`,
		`{"":""}`,
		"[1,\n2\t,\r3]",
		`9007199254740993`, `1e400`,
		`{"a":{"A":1},"b":{"a":1}}`, // case variants in different objects
		`{"ß":1,"ss":2}`,
	}
	for _, doc := range docs {
		got, err := Parse([]byte(doc))
		if err != nil {
			t.Errorf("Parse(%q): %v", doc, err)
			continue
		}
		if err := Valid([]byte(doc)); err != nil {
			t.Errorf("Valid(%q): %v", doc, err)
		}
		want, err := referenceDecode([]byte(doc))
		if err != nil {
			t.Fatalf("reference(%q): %v", doc, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Parse(%q) = %#v, want %#v", doc, got, want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	tests := []struct {
		doc  string
		want error
	}{
		{` `, ErrSyntax}, {`{`, ErrSyntax}, {`[`, ErrSyntax}, {`[1,]`, ErrSyntax}, {`{"a":1,}`, ErrSyntax},
		{`{"a"}`, ErrSyntax}, {`{a:1}`, ErrSyntax}, {`{"a":1 "b":2}`, ErrSyntax}, {`01`, ErrSyntax},
		{`1.`, ErrSyntax}, {`.5`, ErrSyntax}, {`1e`, ErrSyntax}, {`-`, ErrSyntax}, {`+1`, ErrSyntax},
		{`tru`, ErrSyntax}, {`nul`, ErrSyntax}, {`"abc`, ErrSyntax}, {"\"a\x01b\"", ErrSyntax},
		{`"\x"`, ErrSyntax}, {`"\u12"`, ErrSyntax}, {`"\uzzzz"`, ErrSyntax}, {`{} {}`, ErrSyntax},
		{`[] x`, ErrSyntax}, {`NaN`, ErrSyntax}, {"\xef\xbb\xbf{}", ErrSyntax},

		{`{"a":1,"a":2}`, ErrDuplicateMember},
		{`{"x":{"k":1,"k":1}}`, ErrDuplicateMember},
		{`{"a\u0062":1,"ab":2}`, ErrDuplicateMember},
		{`{"name":"ok","Name":"evil"}`, ErrDuplicateMember},
		{`{"tool_calls":[],"Tool_Calls":[]}`, ErrDuplicateMember},
		{`{"_meta":{},"_META":{}}`, ErrDuplicateMember},
		{"{\"k\":1,\"\u212a\":2}", ErrDuplicateMember}, // Kelvin sign folds to k
		{"{\"s\":1,\"\u017f\":2}", ErrDuplicateMember}, // long s folds to s
		{`{"\u004eame":1,"name":2}`, ErrDuplicateMember},
		{`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"E":11}`, ErrDuplicateMember},

		{`"\ud800"`, ErrEncoding},
		{`"\udc00\ud800"`, ErrEncoding},
		{`"\ud800x"`, ErrEncoding},
		{`"\ud800\u0041"`, ErrEncoding},
		{`{"lone":"\ud800x\udc00"}`, ErrEncoding},
		{"\"\xff\"", ErrEncoding},
		{"{\"bad-utf8-key-\xff\":1}", ErrEncoding},
		{"\"\xed\xa0\x80\"", ErrEncoding}, // a surrogate in UTF-8

		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), ErrDepth},
		{`{"x":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}`, ErrDepth},
	}
	for _, tt := range tests {
		for name, f := range map[string]func([]byte) error{
			"Parse": func(b []byte) error { _, err := Parse(b); return err },
			"Valid": Valid,
		} {
			err := f([]byte(tt.doc))
			if !errors.Is(err, tt.want) {
				t.Errorf("%s(%.40q) = %v, want %v", name, tt.doc, err, tt.want)
				continue
			}
			// Errors must not echo input: a secret could be in it.
			if len(tt.doc) > 2 && strings.Contains(err.Error(), tt.doc) {
				t.Errorf("%s(%q) error echoes the input: %v", name, tt.doc, err)
			}
		}
	}
}

func TestLimits(t *testing.T) {
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if err := Valid([]byte(ok)); err != nil {
		t.Errorf("depth %d: %v", MaxDepth, err)
	}
	big := make([]byte, MaxBytes+1)
	big[0] = '"'
	for i := 1; i < len(big)-1; i++ {
		big[i] = 'a'
	}
	big[len(big)-1] = '"'
	if err := Valid(big); !errors.Is(err, ErrTooLarge) {
		t.Errorf("%d bytes: %v, want ErrTooLarge", len(big), err)
	}
	if _, err := ReadAll(bytes.NewReader(big), 100); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadAll past its limit: %v, want ErrTooLarge", err)
	}
	if b, err := ReadAll(strings.NewReader("[1]"), 3); err != nil || string(b) != "[1]" {
		t.Errorf("ReadAll at its limit = %q, %v", b, err)
	}
	if err := Valid(nil); !errors.Is(err, ErrSyntax) {
		t.Errorf("Valid(empty) = %v, want ErrSyntax", err)
	}
	if v, err := Parse(nil); v != nil || err != nil {
		t.Errorf("Parse(empty) = %v, %v; want null", v, err)
	}
}

func TestUnmarshal(t *testing.T) {
	var v struct {
		ID   json.RawMessage `json:"id"`
		Name string          `json:"name"`
		Any  any             `json:"any"`
	}
	if err := Unmarshal([]byte(`{"id":9007199254740993,"name":"x","any":12345678901234567890}`), &v); err != nil {
		t.Fatal(err)
	}
	if string(v.ID) != "9007199254740993" || v.Any != json.Number("12345678901234567890") {
		t.Errorf("numbers not kept exactly: id %s, any %#v", v.ID, v.Any)
	}
	if err := Unmarshal([]byte(`{"name":"ok","Name":"evil"}`), &v); !errors.Is(err, ErrDuplicateMember) {
		t.Errorf("case variant: %v", err)
	}
	if err := UnmarshalKnown([]byte(`{"name":"x","other":1}`), &v); err == nil {
		t.Error("UnmarshalKnown took an unknown member")
	}
}

// FuzzParse checks Parse and Valid against encoding/json: no document only
// they accept, and the same value for every document they accept.
func FuzzParse(f *testing.F) {
	for _, s := range []string{`{"a":[1,"b",{"c":null}]}`, `"\ud83d\ude00"`, "\"\xff\"", `{"a":1,"A":2}`, `-0.0e-0`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 {
			return
		}
		got, err := Parse(raw)
		verr := Valid(raw)
		if (err == nil) != (verr == nil) {
			t.Fatalf("Parse and Valid disagree on %q: %v, %v", raw, err, verr)
		}
		want, werr := referenceDecode(raw)
		switch {
		case err == nil && werr != nil:
			t.Fatalf("Parse accepts %q, encoding/json: %v", raw, werr)
		case err != nil && werr == nil && errors.Is(err, ErrSyntax):
			t.Fatalf("Parse calls %q a syntax error (%v), encoding/json accepts it", raw, err)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("Parse(%q) = %#v, encoding/json %#v", raw, got, want)
		case err == nil:
			if a, b, ok := foldEqualNames(got); ok {
				t.Fatalf("Parse accepts %q with members %q and %q, alike without case", raw, a, b)
			}
		}
	})
}

// foldEqualNames finds two member names of one object in v that
// bytes.EqualFold (encoding/json's matching) holds alike.
func foldEqualNames(v any) (string, string, bool) {
	switch v := v.(type) {
	case map[string]any:
		for a, av := range v {
			for b := range v {
				if a < b && bytes.EqualFold([]byte(a), []byte(b)) {
					return a, b, true
				}
			}
			if x, y, ok := foldEqualNames(av); ok {
				return x, y, true
			}
		}
	case []any:
		for _, e := range v {
			if x, y, ok := foldEqualNames(e); ok {
				return x, y, true
			}
		}
	}
	return "", "", false
}

// TestFoldingMatchesEqualFold checks appendFolded against bytes.EqualFold
// over every rune paired with its orbit and its ASCII neighbours.
func TestFoldingMatchesEqualFold(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		others := []rune{'i', 'I', 'k', 'K', 's', 'S'}
		for o := unicode.SimpleFold(r); o != r; o = unicode.SimpleFold(o) {
			others = append(others, o)
		}
		for _, o := range others {
			a, b := string(r), string(o)
			same := string(appendFolded(nil, a)) == string(appendFolded(nil, b))
			if same != bytes.EqualFold([]byte(a), []byte(b)) {
				t.Fatalf("%U and %U: folded alike %v, bytes.EqualFold %v", r, o, same, !same)
			}
		}
	}
}

// BenchmarkParse compares Parse and Valid with encoding/json on a typical
// request, to scale the figures to the machine they ran on.
func BenchmarkParse(b *testing.B) {
	doc := []byte(`{"messageId":"9b1f","contextId":"c-1","role":"ROLE_USER","parts":[{"text":"hello there, a longer text part"}],"metadata":{"chio":{"capability":"abc","n":12}}}`)
	for name, f := range map[string]func([]byte) error{
		"parse":                  func(d []byte) error { _, err := Parse(d); return err },
		"valid":                  Valid,
		"reference_json_decoder": func(d []byte) error { _, err := referenceDecode(d); return err },
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			b.ReportAllocs()
			for b.Loop() {
				if err := f(doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
