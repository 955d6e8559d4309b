package guards

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// referenceDecode is what Args promises to match: json.Decoder with
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

func TestDecodeJSONMatchesEncodingJSON(t *testing.T) {
	docs := []string{
		`null`, `true`, `false`, `0`, `-0`, `1.5e+10`, `-12.0E-3`, `"x"`, `""`, `[]`, `{}`,
		` {"a" : [1, "two", {"three": null}] , "b":false} `,
		`{"esc":"a\"b\\c\/d\b\f\n\r\t\u00e9\u20ac\ud83d\ude00"}`,
		`{"lone":"\ud800x\udc00\ud800\u0041"}`,
		"{\"raw\":\"h\xc3\xa9llo \xff\xfe ok\"}",
		"{\"bad-utf8-key-\xff\":1}",
		`[[[[[]]]]]`,
		`{"a":{"b":{"c":[1,2,{"d":"e"}]}}}`,
		`{"":""}`,
		"[1,\n2\t,\r3]",
	}
	for _, doc := range docs {
		got, err := decodeJSON([]byte(doc))
		if err != nil {
			t.Errorf("decodeJSON(%q): %v", doc, err)
			continue
		}
		want, err := referenceDecode([]byte(doc))
		if err != nil {
			t.Fatalf("reference(%q): %v", doc, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decodeJSON(%q) = %#v, want %#v", doc, got, want)
		}
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	bad := []string{
		` `, `{`, `[`, `[1,]`, `{"a":1,}`, `{"a"}`, `{a:1}`, `{"a":1 "b":2}`, `01`, `1.`, `.5`, `1e`, `-`, `+1`,
		`tru`, `nul`, `"abc`, "\"a\x01b\"", `"\x"`, `"\u12"`, `"\uzzzz"`, `{} {}`, `[] x`, `NaN`,
		`{"a":1,"a":2}`, `{"x":{"k":1,"k":1}}`, `{"a\u0062":1,"ab":2}`, "\xef\xbb\xbf{}",
	}
	for _, doc := range bad {
		v, err := decodeJSON([]byte(doc))
		if err == nil {
			t.Errorf("decodeJSON(%q) = %#v, want an error", doc, v)
			continue
		}
		// Errors must not echo input: a secret could be in it.
		if strings.Contains(err.Error(), doc) && len(doc) > 2 {
			t.Errorf("decodeJSON(%q) error echoes the input: %v", doc, err)
		}
	}
	if _, err := decodeJSON([]byte(`{"a":1,"a":1}`)); !errors.Is(err, errDuplicateKey) {
		t.Errorf("duplicate key error = %v, want errDuplicateKey", err)
	}
}

func TestDecodeJSONDepth(t *testing.T) {
	ok := strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth)
	if _, err := decodeJSON([]byte(ok)); err != nil {
		t.Errorf("depth %d: %v", maxDepth, err)
	}
	deep := strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1)
	if _, err := decodeJSON([]byte(deep)); err == nil {
		t.Errorf("depth %d: no error", maxDepth+1)
	}
}

func TestCallArgs(t *testing.T) {
	c := &Call{Arguments: json.RawMessage(`{"a":[1]}`)}
	v1, err := c.Args()
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := c.Args()
	if reflect.ValueOf(v1).Pointer() != reflect.ValueOf(v2).Pointer() {
		t.Error("Args decoded twice")
	}
	if v, err := (&Call{}).Args(); v != nil || err != nil {
		t.Errorf("empty arguments = %v, %v; want null", v, err)
	}
	_, err = (&Call{Arguments: json.RawMessage(`{"a":`)}).Args()
	if err == nil || !strings.Contains(err.Error(), "decode arguments") {
		t.Errorf("invalid arguments error = %v", err)
	}
	var nilCall *Call
	if _, err := nilCall.Args(); err == nil {
		t.Error("nil call: no error")
	}
}

// FuzzDecodeJSON checks decodeJSON against encoding/json: the same values
// for every document both accept, and no document only decodeJSON accepts.
// encoding/json alone accepts duplicate keys.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,"b",{"c":null}]}`, `"\ud83d\ude00"`, "\"\xff\"", `{"a":1,"a":2}`, `-0.0e-0`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 {
			return
		}
		got, err := decodeJSON(raw)
		want, werr := referenceDecode(raw)
		switch {
		case err == nil && werr != nil:
			t.Fatalf("decodeJSON accepts %q, encoding/json: %v", raw, werr)
		case err != nil && werr == nil && !errors.Is(err, errDuplicateKey):
			t.Fatalf("decodeJSON refuses %q (%v), encoding/json accepts it", raw, err)
		case err == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("decodeJSON(%q) = %#v, encoding/json %#v", raw, got, want)
		}
	})
}
