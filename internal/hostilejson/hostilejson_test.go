package hostilejson

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

func TestVariantsAreRefused(t *testing.T) {
	obj := []byte(`{"tool_calls":[{"id":"a","n":1}],"model":"m"}`)
	for _, c := range Variants(obj) {
		if err := strictjson.Valid(c.Doc); !errors.Is(err, c.Err) {
			t.Errorf("%s: Valid = %v, want %v", c.Name, err, c.Err)
		}
		if c.Name == "data after the value" || c.Err == strictjson.ErrDepth && len(c.Doc) > 20000 {
			continue
		}
		// encoding/json takes every variant but the trailing data and the
		// deepest nesting: that is why a strict reader is needed at all.
		var v any
		if err := json.Unmarshal(c.Doc, &v); err != nil {
			t.Errorf("%s: encoding/json refuses it too (%v): the case proves nothing", c.Name, err)
		}
	}
}
