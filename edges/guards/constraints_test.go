package guards

import (
	"github.com/chio-ledger/chio/schemas/strictjson"

	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

func constraint(typ, value string) schemas.Constraint {
	return schemas.Constraint{Type: typ, Value: json.RawMessage(value)}
}

func mustDecode(t testing.TB, doc string) any {
	t.Helper()
	v, err := strictjson.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("decode %q: %v", doc, err)
	}
	return v
}

func TestConstraintCheck(t *testing.T) {
	tests := []struct {
		name    string
		typ     string
		value   string
		args    string
		allow   bool
		details string // a substring of the deny details
	}{
		// exact
		{"exact string", "exact", `{"pointer":"/mode","equals":"read"}`, `{"mode":"read"}`, true, ""},
		{"exact string differs", "exact", `{"pointer":"/mode","equals":"read"}`, `{"mode":"write"}`, false, `constraint[0] exact at "/mode": value differs`},
		{"exact number 1 == 1.0", "exact", `{"pointer":"/n","equals":1}`, `{"n":1.0}`, true, ""},
		{"exact number 1 == 10e-1", "exact", `{"pointer":"/n","equals":1}`, `{"n":10e-1}`, true, ""},
		{"exact number 0 == -0.0e5", "exact", `{"pointer":"/n","equals":0}`, `{"n":-0.0e5}`, true, ""},
		{"exact large integers stay exact", "exact", `{"pointer":"/n","equals":9007199254740993}`, `{"n":9007199254740992}`, false, "value differs"},
		{"exact number vs string", "exact", `{"pointer":"/n","equals":1}`, `{"n":"1"}`, false, "value differs"},
		{"exact object", "exact", `{"pointer":"/o","equals":{"a":[1,true,null]}}`, `{"o":{"a":[1.0,true,null]}}`, true, ""},
		{"exact object extra key", "exact", `{"pointer":"/o","equals":{"a":1}}`, `{"o":{"a":1,"b":2}}`, false, "value differs"},
		{"exact array order", "exact", `{"pointer":"/a","equals":[1,2]}`, `{"a":[2,1]}`, false, "value differs"},
		{"exact null", "exact", `{"pointer":"/a","equals":null}`, `{"a":null}`, true, ""},
		{"exact null vs missing", "exact", `{"pointer":"/a","equals":null}`, `{}`, false, "target is missing"},
		{"exact whole document", "exact", `{"pointer":"","equals":{"x":1}}`, `{"x":1}`, true, ""},
		{"exact escaped pointer", "exact", `{"pointer":"/a~1b/c~0d","equals":true}`, `{"a/b":{"c~d":true}}`, true, ""},
		{"exact array index", "exact", `{"pointer":"/items/1/id","equals":"b"}`, `{"items":[{"id":"a"},{"id":"b"}]}`, true, ""},
		{"exact array index out of range", "exact", `{"pointer":"/items/2","equals":"b"}`, `{"items":["a","b"]}`, false, "target is missing"},
		{"exact array index leading zero", "exact", `{"pointer":"/items/01","equals":"b"}`, `{"items":["a","b"]}`, false, "target is missing"},
		{"exact array dash", "exact", `{"pointer":"/items/-","equals":"b"}`, `{"items":["a","b"]}`, false, "target is missing"},
		{"exact through a scalar", "exact", `{"pointer":"/a/b","equals":1}`, `{"a":"str"}`, false, "target is missing"},
		{"exact empty key", "exact", `{"pointer":"/","equals":1}`, `{"":1}`, true, ""},
		// one_of
		{"one_of hit", "one_of", `{"pointer":"/region","values":["eu","us"]}`, `{"region":"us"}`, true, ""},
		{"one_of miss", "one_of", `{"pointer":"/region","values":["eu","us"]}`, `{"region":"ap"}`, false, `constraint[0] one_of at "/region": value is not one of the allowed values`},
		{"one_of numeric", "one_of", `{"pointer":"/n","values":[1,2]}`, `{"n":2.00}`, true, ""},
		{"one_of mixed types", "one_of", `{"pointer":"/n","values":["1",true]}`, `{"n":1}`, false, "not one of"},
		{"one_of missing", "one_of", `{"pointer":"/region","values":["eu"]}`, `{}`, false, "target is missing"},
		// prefix
		{"prefix ok", "prefix", `{"pointer":"/path","prefix":"docs/"}`, `{"path":"docs/a.md"}`, true, ""},
		{"prefix miss", "prefix", `{"pointer":"/path","prefix":"docs/"}`, `{"path":"src/a.go"}`, false, `constraint[0] prefix at "/path": value lacks the required prefix`},
		{"prefix on number", "prefix", `{"pointer":"/path","prefix":"1"}`, `{"path":12}`, false, "target is not a string"},
		{"prefix case sensitive", "prefix", `{"pointer":"/path","prefix":"docs/"}`, `{"path":"DOCS/a"}`, false, "lacks the required prefix"},
		// regex
		{"regex whole match", "regex", `{"pointer":"/url","pattern":"https://[a-z.]+/.*"}`, `{"url":"https://example.com/x"}`, true, ""},
		{"regex is anchored at the start", "regex", `{"pointer":"/url","pattern":"https://.*"}`, `{"url":"x https://example.com"}`, false, "does not match the pattern"},
		{"regex is anchored at the end", "regex", `{"pointer":"/id","pattern":"[0-9]+"}`, `{"id":"123abc"}`, false, `constraint[0] regex at "/id": value does not match the pattern`},
		{"regex alternation stays anchored", "regex", `{"pointer":"/id","pattern":"a|b"}`, `{"id":"ab"}`, false, "does not match"},
		{"regex alternation", "regex", `{"pointer":"/id","pattern":"a|b"}`, `{"id":"b"}`, true, ""},
		{"regex on array", "regex", `{"pointer":"/id","pattern":".*"}`, `{"id":["x"]}`, false, "target is not a string"},
		// max
		{"max below", "max", `{"pointer":"/amount","max":100}`, `{"amount":99.99}`, true, ""},
		{"max equal", "max", `{"pointer":"/amount","max":100}`, `{"amount":1e2}`, true, ""},
		{"max above", "max", `{"pointer":"/amount","max":100}`, `{"amount":100.0000001}`, false, `constraint[0] max at "/amount": value is above the maximum`},
		{"max negative", "max", `{"pointer":"/amount","max":-1.5}`, `{"amount":-2}`, true, ""},
		{"max negative above", "max", `{"pointer":"/amount","max":-1.5}`, `{"amount":-1.25}`, false, "above the maximum"},
		{"max huge exponent", "max", `{"pointer":"/amount","max":100}`, `{"amount":1e99999999999999}`, false, "above the maximum"},
		{"max large integer exact", "max", `{"pointer":"/n","max":9007199254740992}`, `{"n":9007199254740993}`, false, "above the maximum"},
		{"max fraction", "max", `{"pointer":"/n","max":0.1}`, `{"n":0.09999999999999999999}`, true, ""},
		{"max string", "max", `{"pointer":"/amount","max":100}`, `{"amount":"5"}`, false, "target is not a number"},
		{"max missing", "max", `{"pointer":"/amount","max":100}`, `{"other":1}`, false, "target is missing"},
		// max_length
		{"max_length runes", "max_length", `{"pointer":"/q","max_length":5}`, `{"q":"héllo"}`, true, ""},
		{"max_length runes over", "max_length", `{"pointer":"/q","max_length":4}`, `{"q":"héllo"}`, false, `constraint[0] max_length at "/q": value is longer than the maximum length`},
		{"max_length array", "max_length", `{"pointer":"/ids","max_length":2}`, `{"ids":[1,2]}`, true, ""},
		{"max_length array over", "max_length", `{"pointer":"/ids","max_length":2}`, `{"ids":[1,2,3]}`, false, "array is longer than the maximum length"},
		{"max_length zero", "max_length", `{"pointer":"/q","max_length":0}`, `{"q":""}`, true, ""},
		{"max_length object", "max_length", `{"pointer":"/q","max_length":9}`, `{"q":{}}`, false, "target is not a string or an array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := CompileConstraints([]schemas.Constraint{constraint(tt.typ, tt.value)})
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			r := set.Check(mustDecode(t, tt.args))
			if r.Allow != tt.allow {
				t.Fatalf("Check(%s) = %+v, want allow=%v", tt.args, r, tt.allow)
			}
			if tt.allow && r.Details != "" {
				t.Errorf("allow with details %q", r.Details)
			}
			if !tt.allow && !strings.Contains(r.Details, tt.details) {
				t.Errorf("details %q, want them to contain %q", r.Details, tt.details)
			}
		})
	}
}

func TestConstraintSetFirstFailureDenies(t *testing.T) {
	set, err := CompileConstraints([]schemas.Constraint{
		constraint("prefix", `{"pointer":"/path","prefix":"docs/"}`),
		constraint("max", `{"pointer":"/limit","max":100}`),
		constraint("max_length", `{"pointer":"/query","max_length":3}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if set.Len() != 3 {
		t.Errorf("Len = %d", set.Len())
	}
	r := set.Check(mustDecode(t, `{"path":"docs/a","limit":500,"query":"a long secret query"}`))
	if r.Allow || !strings.HasPrefix(r.Details, `constraint[1] max at "/limit"`) {
		t.Errorf("got %+v, want constraint[1] to deny", r)
	}
	if strings.Contains(r.Details, "secret") || strings.Contains(r.Details, "500") {
		t.Errorf("details echo the arguments: %q", r.Details)
	}
	if r := set.Check(mustDecode(t, `{"path":"docs/a","limit":5,"query":"abc"}`)); !r.Allow {
		t.Errorf("got %+v, want allow", r)
	}
	var none *ConstraintSet
	if r := none.Check(nil); !r.Allow || r.Details != "" || none.Len() != 0 {
		t.Errorf("nil set: %+v", r)
	}
}

func TestCompileConstraintsErrors(t *testing.T) {
	tests := []struct {
		name string
		c    schemas.Constraint
		want string
	}{
		{"governed_intent_required", constraint("governed_intent_required", `{}`), "unsupported constraint type"},
		{"require_approval_above", constraint("require_approval_above", `{"threshold_units":5}`), "unsupported constraint type"},
		{"seller_exact", constraint("seller_exact", `{"seller":"x"}`), "unsupported constraint type"},
		{"empty type", constraint("", `{}`), "unsupported constraint type"},
		{"case matters", constraint("Exact", `{"pointer":"/a","equals":1}`), "unsupported constraint type"},
		{"no value", schemas.Constraint{Type: "exact"}, "value must be an object"},
		{"value not object", constraint("exact", `[1]`), "value must be an object"},
		{"value invalid JSON", constraint("exact", `{"pointer":`), "value:"},
		{"value duplicate key", constraint("exact", `{"pointer":"/a","pointer":"/b","equals":1}`), "duplicate object key"},
		{"unknown key", constraint("exact", `{"pointer":"/a","equals":1,"case_insensitive":true}`), `unknown key "case_insensitive"`},
		{"other type's key", constraint("prefix", `{"pointer":"/a","equals":"x"}`), `unknown key "equals"`},
		{"missing pointer", constraint("exact", `{"equals":1}`), "value.pointer must be a string"},
		{"pointer not string", constraint("exact", `{"pointer":1,"equals":1}`), "value.pointer must be a string"},
		{"pointer without slash", constraint("exact", `{"pointer":"a","equals":1}`), "must be empty or start with"},
		{"pointer bad escape", constraint("exact", `{"pointer":"/a~2","equals":1}`), `"~0" or "~1"`},
		{"pointer trailing tilde", constraint("exact", `{"pointer":"/a~","equals":1}`), `"~0" or "~1"`},
		{"missing equals", constraint("exact", `{"pointer":"/a"}`), "value.equals is required"},
		{"one_of empty", constraint("one_of", `{"pointer":"/a","values":[]}`), "non-empty array"},
		{"one_of not array", constraint("one_of", `{"pointer":"/a","values":"x"}`), "non-empty array"},
		{"prefix not string", constraint("prefix", `{"pointer":"/a","prefix":1}`), "value.prefix must be a string"},
		{"regex bad", constraint("regex", `{"pointer":"/a","pattern":"a("}`), "value.pattern:"},
		{"regex backreference", constraint("regex", `{"pointer":"/a","pattern":"(a)\\1"}`), "value.pattern:"},
		{"regex too long", constraint("regex", `{"pointer":"/a","pattern":"`+strings.Repeat("a", MaxConstraintPattern+1)+`"}`), "longer than 1024"},
		{"regex not string", constraint("regex", `{"pointer":"/a","pattern":null}`), "value.pattern must be a string"},
		{"max string", constraint("max", `{"pointer":"/a","max":"100"}`), "value.max must be a number"},
		{"max huge exponent", constraint("max", `{"pointer":"/a","max":1e10000000000}`), "out of range"},
		{"max_length negative", constraint("max_length", `{"pointer":"/a","max_length":-1}`), "non-negative integer"},
		{"max_length fraction", constraint("max_length", `{"pointer":"/a","max_length":2.5}`), "non-negative integer"},
		{"max_length exponent", constraint("max_length", `{"pointer":"/a","max_length":1e3}`), "non-negative integer"},
		{"max_length too big", constraint("max_length", `{"pointer":"/a","max_length":99999999999}`), "non-negative integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok := constraint("exact", `{"pointer":"/x","equals":1}`)
			set, err := CompileConstraints([]schemas.Constraint{ok, tt.c})
			if err == nil {
				t.Fatalf("compiled %+v", set)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "compile constraints: constraints[1]") {
				t.Errorf("error %q, want it to name constraints[1] and contain %q", err, tt.want)
			}
		})
	}
	_, err := CompileConstraints([]schemas.Constraint{constraint("seller_exact", `{}`)})
	if !errors.Is(err, ErrUnsupportedConstraint) {
		t.Errorf("error %v is not ErrUnsupportedConstraint", err)
	}
	many := make([]schemas.Constraint, schemas.MaxConstraints+1)
	for i := range many {
		many[i] = constraint("exact", `{"pointer":"/x","equals":1}`)
	}
	if _, err := CompileConstraints(many); err == nil {
		t.Error("compiled more than MaxConstraints")
	}
	if set, err := CompileConstraints(nil); err != nil || set.Len() != 0 || !set.Check(nil).Allow {
		t.Errorf("no constraints: %v, %v", set, err)
	}
}

func TestConstraintGuard(t *testing.T) {
	g := NewConstraintGuard()
	if g.Name() != "ConstraintGuard" {
		t.Errorf("Name = %q", g.Name())
	}
	ctx := context.Background()
	set, err := CompileConstraints([]schemas.Constraint{constraint("one_of", `{"pointer":"/region","values":["eu"]}`)})
	if err != nil {
		t.Fatal(err)
	}
	grant := &schemas.ToolGrant{ServerID: "s", ToolName: "t", Operations: []schemas.Operation{schemas.OpInvoke},
		Constraints: []schemas.Constraint{constraint("one_of", `{"pointer":"/region","values":["eu"]}`)}}

	// No constraints: allow without looking at (even invalid) arguments.
	r, err := g.Check(ctx, &Call{Arguments: json.RawMessage(`not json`)})
	if err != nil || !r.Allow || r.Details != "" {
		t.Errorf("no constraints: %+v, %v", r, err)
	}
	r, err = g.Check(ctx, &Call{Arguments: json.RawMessage(`{"region":"eu"}`), Grant: grant, Constraints: set})
	if err != nil || !r.Allow {
		t.Errorf("allowed region: %+v, %v", r, err)
	}
	r, err = g.Check(ctx, &Call{Arguments: json.RawMessage(`{"region":"us"}`), Grant: grant, Constraints: set})
	if err != nil || r.Allow || !strings.Contains(r.Details, `constraint[0] one_of at "/region"`) {
		t.Errorf("other region: %+v, %v", r, err)
	}
	// A grant whose constraints were not compiled must not pass.
	if _, err := g.Check(ctx, &Call{Arguments: json.RawMessage(`{}`), Grant: grant}); err == nil {
		t.Error("uncompiled constraints: no error")
	}
	// Arguments that are not JSON: the guard cannot decide.
	_, err = g.Check(ctx, &Call{Arguments: json.RawMessage(`{"region":`), Constraints: set})
	if err == nil || !strings.Contains(err.Error(), "constraint guard: decode arguments") {
		t.Errorf("invalid arguments: %v", err)
	}
	if _, err := g.Check(ctx, nil); err == nil {
		t.Error("nil call: no error")
	}
}

func TestDecimal(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"0", "-0", 0}, {"0", "0e999999999999999", 0}, {"1", "1.000", 0}, {"1", "0.1e1", 0}, {"100", "1e2", 0},
		{"123.45", "12345e-2", 0}, {"0.001", "1e-3", 0}, {"1", "2", -1}, {"-1", "1", -1}, {"-2", "-1", -1},
		{"10", "9.99", 1}, {"0.1", "0.09", 1}, {"101", "1e2", 1}, {"1.01", "1.1", -1}, {"-0.5", "0", -1},
		{"9007199254740993", "9007199254740992", 1}, {"1e-999999999", "0", 1}, {"1e999999999", "1e999999998", 1},
	}
	for _, tt := range tests {
		a, ok1 := parseDecimal(tt.a)
		b, ok2 := parseDecimal(tt.b)
		if !ok1 || !ok2 {
			t.Errorf("parse %q, %q: %v %v", tt.a, tt.b, ok1, ok2)
			continue
		}
		if got := compareDecimal(&a, &b); got != tt.want {
			t.Errorf("compare(%s, %s) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := compareDecimal(&b, &a); got != -tt.want {
			t.Errorf("compare(%s, %s) = %d, want %d", tt.b, tt.a, got, -tt.want)
		}
	}
	for _, s := range []string{"", "-", "01", "1.", ".1", "1e", "1e+", "x", "1x", "1e9999999999"} {
		if _, ok := parseDecimal(s); ok {
			t.Errorf("parseDecimal(%q) ok", s)
		}
	}
}
