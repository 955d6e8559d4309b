package strictjson

import (
	"encoding/json"
	"errors"
	"testing"
)

type inner struct {
	Text string `json:"text"`
}

type embedded struct {
	Kind string `json:"kind"`
}

type outer struct {
	embedded
	ID    json.RawMessage  `json:"id"`
	Name  string           `json:"name"`
	Inner *inner           `json:"inner"`
	List  []inner          `json:"list"`
	ByKey map[string]inner `json:"byKey"`
	Any   any              `json:"any"`
	Plain int
}

func TestUnmarshalExact(t *testing.T) {
	ok := []string{
		`{"name":"a","inner":{"text":"b"},"list":[{"text":"c"}],"byKey":{"k":{"text":"d"}},"kind":"e","Plain":1}`,
		`{"name":"a","other":{"Text":"free"},"any":{"NAME":1},"id":{"Name":1}}`, // no field there to match
	}
	for _, doc := range ok {
		var v outer
		if err := UnmarshalExact([]byte(doc), &v); err != nil {
			t.Errorf("UnmarshalExact(%s): %v", doc, err)
		}
	}
	bad := []string{
		`{"Name":"a"}`,
		`{"inner":{"TEXT":"b"}}`,
		`{"list":[{"text":"c"},{"Text":"d"}]}`,
		`{"byKey":{"k":{"tExt":"d"}}}`,
		`{"KIND":"e"}`,
		`{"plain":1}`,
	}
	for _, doc := range bad {
		var v outer
		if err := UnmarshalExact([]byte(doc), &v); !errors.Is(err, ErrInexactName) {
			t.Errorf("UnmarshalExact(%s) = %v, want ErrInexactName", doc, err)
		}
	}
	var v outer
	if err := UnmarshalExact([]byte("{\"\u212aind\":\"x\"}"), &v); !errors.Is(err, ErrInexactName) {
		t.Errorf("Kelvin sign for k: %v, want ErrInexactName", err)
	}
	if err := UnmarshalExact([]byte(`{"name":"a","Name":"b"}`), &v); !errors.Is(err, ErrDuplicateMember) {
		t.Errorf("repeated member: %v, want ErrDuplicateMember", err)
	}
	if err := UnmarshalExact(nil, &v); !errors.Is(err, ErrSyntax) {
		t.Errorf("empty: %v, want ErrSyntax", err)
	}
}
