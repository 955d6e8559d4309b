package schemas

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gowebpki/jcs"
)

func TestAlreadyCanonical(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{`{}`, true},
		{`[]`, true},
		{`{"a":1,"b":[true,false,null],"c":{"d":"x y"}}`, true},
		{`{"edge":{"credential_id":"c1","edge_id":"e","key":"ab"},"trace_id":"0af7"}`, true},
		{`-12`, true},
		{`0`, true},
		{`123456789012345`, true},
		{`1234567890123456`, false}, // past 15 digits JCS may write it otherwise
		{`-0`, false},
		{`01`, false},
		{`1.0`, false},
		{`1e2`, false},
		{`0.5`, false},
		{`{"b":1,"a":2}`, false},
		{`{"a":1,"a":2}`, false},
		{`{"a": 1}`, false},
		{` {}`, false},
		{`"\u0041"`, false},
		{`"é"`, false},
		{`"<>&"`, true},
		{`{"a":1}x`, false},
		{`{"a":1`, false},
		{`[1,]`, false},
		{`{,}`, false},
		{`tru`, false},
		{``, false},
	} {
		if got := alreadyCanonical([]byte(tc.in)); got != tc.want {
			t.Errorf("alreadyCanonical(%s) = %v, want %v", tc.in, got, tc.want)
		}
		if tc.want {
			out, err := jcs.Transform([]byte(tc.in))
			if err != nil || !bytes.Equal(out, []byte(tc.in)) {
				t.Errorf("JCS of %s is %s (%v): the table is wrong", tc.in, out, err)
			}
		}
	}
}

func TestAlreadyCanonicalDepth(t *testing.T) {
	deep := bytes.Repeat([]byte("["), maxCanonDepth+2)
	deep = append(deep, bytes.Repeat([]byte("]"), maxCanonDepth+2)...)
	if alreadyCanonical(deep) {
		t.Fatal("nesting past the bound taken as canonical")
	}
}

// Whatever the fast path takes as canonical, the JCS library leaves as it
// is: the fast path never changes what is signed.
func FuzzAlreadyCanonical(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null]}`, `{"b":1,"a":2}`, `"x"`, `-0`, `1e2`, `{"a":{"b":{}}}`, `[0,-1,"\\"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !alreadyCanonical(raw) {
			return
		}
		out, err := jcs.Transform(raw)
		if err != nil {
			t.Fatalf("taken as canonical, refused by JCS: %s: %v", raw, err)
		}
		if !bytes.Equal(out, raw) {
			t.Fatalf("taken as canonical, JCS writes %s for %s", out, raw)
		}
	})
}

func TestSetCanonicalMember(t *testing.T) {
	for _, tc := range []struct{ obj, key, value, want string }{
		{`{}`, "edge", `1`, `{"edge":1}`},
		{`{"a":1}`, "b", `2`, `{"a":1,"b":2}`},
		{`{"b":1}`, "a", `2`, `{"a":2,"b":1}`},
		{`{"a":1,"c":3}`, "b", `2`, `{"a":1,"b":2,"c":3}`},
		{`{"a":1,"b":{"x":[1]},"c":3}`, "b", `"y"`, `{"a":1,"b":"y","c":3}`},
		{`{"a":1,"b":2}`, "b", `[]`, `{"a":1,"b":[]}`},
		{`{"b":2}`, "b", `null`, `{"b":null}`},
		{`{"a":1,"b":2}`, "a", `0`, `{"a":0,"b":2}`},
	} {
		got, ok := SetCanonicalMember([]byte(tc.obj), tc.key, []byte(tc.value))
		if !ok || string(got) != tc.want {
			t.Errorf("SetCanonicalMember(%s, %s, %s) = %s %v, want %s", tc.obj, tc.key, tc.value, got, ok, tc.want)
		}
	}
	for _, obj := range []string{`[]`, `{"b":1,"a":2}`, `{"a": 1}`, `"x"`, ``} {
		if _, ok := SetCanonicalMember([]byte(obj), "k", []byte(`1`)); ok {
			t.Errorf("SetCanonicalMember took %q", obj)
		}
	}
}

// The splice gives what decoding, setting the key and canonicalizing would.
func FuzzSetCanonicalMember(f *testing.F) {
	f.Add([]byte(`{"a":1,"c":{"d":[]}}`), "b", []byte(`"v"`))
	f.Add([]byte(`{}`), "edge", []byte(`{"k":1}`))
	f.Add([]byte(`{"edge":1,"z":2}`), "edge", []byte(`null`))
	f.Fuzz(func(t *testing.T, obj []byte, key string, value []byte) {
		if !alreadyCanonical(value) || !alreadyCanonical([]byte(`"`+key+`"`)) {
			return
		}
		got, ok := SetCanonicalMember(obj, key, value)
		if !ok {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(obj, &m); err != nil {
			t.Fatalf("spliced into %s, which does not decode: %v", obj, err)
		}
		m[key] = value
		raw, _ := json.Marshal(m)
		want, err := jcs.Transform(raw)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("SetCanonicalMember(%s, %q, %s) = %s, want %s", obj, key, value, got, want)
		}
	})
}
