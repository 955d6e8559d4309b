package schemas

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func compileSchema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	entries, err := FS.ReadDir("jsonschema")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		raw, err := FS.ReadFile("jsonschema/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
		if err := c.AddResource(schemaBaseURL+e.Name(), doc); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
	}
	s, err := c.Compile(schemaBaseURL + name)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	return s
}

const schemaBaseURL = "https://chio.dev/schemas/"

func validateJSON(s *jsonschema.Schema, raw []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	return s.Validate(doc)
}

func testKey(seed byte) ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
}

func sampleBody(d Decision) ReceiptBody {
	params := json.RawMessage(`{"path":"docs/a.txt","n":1.50}`)
	ph, err := ParameterHash(params)
	if err != nil {
		panic(err)
	}
	return ReceiptBody{
		ID: "0190f3c2-7a1b-7c3d-9e4f-0a1b2c3d4e5f", Timestamp: 1760000000, CapabilityID: "cap-123",
		ToolServer: "fs", ToolName: "read_file",
		Action:   ToolCallAction{Parameters: params, ParameterHash: ph},
		Decision: d, ContentHash: EmptyContentHash, PolicyHash: SHA256Hex([]byte("policy")),
		TrustLevel: TrustMediated,
	}
}

func TestReceiptsMatchSchema(t *testing.T) {
	s := compileSchema(t, "receipt.v1.schema.json")
	decisions := []Decision{
		{Verdict: VerdictAllow},
		{Verdict: VerdictDeny, Reason: "path outside grant", Guard: "ForbiddenPathGuard"},
		{Verdict: VerdictCancelled, Reason: "client cancelled"},
		{Verdict: VerdictIncomplete, Reason: "no outcome within 10m0s"},
	}
	for _, d := range decisions {
		for _, extra := range []string{"bare", "full"} {
			t.Run(string(d.Verdict)+"/"+extra, func(t *testing.T) {
				b := sampleBody(d)
				if extra == "full" {
					b.Evidence = []GuardEvidence{{GuardName: "ForbiddenPathGuard", Verdict: true}, {GuardName: "X", Details: "why"}}
					b.Metadata = json.RawMessage(`{"attribution":{"grant_index":0}}`)
					b.TenantID = "tenant-a"
				}
				r, err := SignReceipt(testKey(1), b)
				if err != nil {
					t.Fatal(err)
				}
				leaf, err := CanonicalReceipt(r)
				if err != nil {
					t.Fatal(err)
				}
				if err := validateJSON(s, leaf); err != nil {
					t.Fatalf("schema rejects a Go-built receipt: %v\n%s", err, leaf)
				}
				back, err := ParseReceipt(leaf)
				if err != nil {
					t.Fatal(err)
				}
				if err := back.Verify(); err != nil {
					t.Fatalf("round-tripped receipt does not verify: %v", err)
				}
				again, _ := CanonicalReceipt(back)
				if !bytes.Equal(leaf, again) {
					t.Fatalf("canonical bytes changed on round trip:\n%s\n%s", leaf, again)
				}
				if extra == "bare" && (strings.Contains(string(leaf), "evidence") || strings.Contains(string(leaf), "metadata") || strings.Contains(string(leaf), "tenant_id") || strings.Contains(string(leaf), "null")) {
					t.Fatalf("unset optional fields must be omitted: %s", leaf)
				}
			})
		}
	}
}

// Each of these is rejected by the JSON Schema and by the Go parser or validator.
func TestBadReceiptsRejectedByBoth(t *testing.T) {
	s := compileSchema(t, "receipt.v1.schema.json")
	r, err := SignReceipt(testKey(1), sampleBody(Decision{Verdict: VerdictAllow}))
	if err != nil {
		t.Fatal(err)
	}
	good, _ := CanonicalReceipt(r)
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	cases := map[string][]byte{
		"null metadata":        mutate(func(m map[string]any) { m["metadata"] = nil }),
		"deny without guard":   mutate(func(m map[string]any) { m["decision"] = map[string]any{"verdict": "deny", "reason": "x"} }),
		"allow with reason":    mutate(func(m map[string]any) { m["decision"] = map[string]any{"verdict": "allow", "reason": "x"} }),
		"unknown verdict":      mutate(func(m map[string]any) { m["decision"] = map[string]any{"verdict": "maybe"} }),
		"uppercase kernel key": mutate(func(m map[string]any) { m["kernel_key"] = strings.ToUpper(m["kernel_key"].(string)) }),
		"short signature":      mutate(func(m map[string]any) { m["signature"] = "abcd" }),
		"unknown field":        mutate(func(m map[string]any) { m["prev_hash"] = "00" }),
		"missing signature":    mutate(func(m map[string]any) { delete(m, "signature") }),
		"bad trust level":      mutate(func(m map[string]any) { m["trust_level"] = "trusted" }),
		"empty evidence guard": mutate(func(m map[string]any) { m["evidence"] = []any{map[string]any{"guard_name": "", "verdict": true}} }),
		"bad parameter hash":   mutate(func(m map[string]any) { m["action"].(map[string]any)["parameter_hash"] = "xyz" }),
		"missing tool_name":    mutate(func(m map[string]any) { delete(m, "tool_name") }),
		"evidence extra fields": mutate(func(m map[string]any) {
			m["evidence"] = []any{map[string]any{"guard_name": "g", "verdict": true, "x": 1}}
		}),
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			if err := validateJSON(s, raw); err == nil {
				t.Errorf("schema accepted: %s", raw)
			}
			r, err := ParseReceipt(raw)
			if err == nil {
				err = r.Verify()
			}
			if err == nil {
				t.Errorf("Go accepted: %s", raw)
			}
		})
	}
}

func TestReceiptVerifyDetectsTampering(t *testing.T) {
	r, err := SignReceipt(testKey(1), sampleBody(Decision{Verdict: VerdictAllow}))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(r *Receipt){
		"tool name":       func(r *Receipt) { r.ToolName = "write_file" },
		"parameters":      func(r *Receipt) { r.Action.Parameters = json.RawMessage(`{"path":"/etc/passwd"}`) },
		"other key":       func(r *Receipt) { r.KernelKey = EncodePublicKey(testKey(2).Public().(ed25519.PublicKey)) },
		"algorithm hint":  func(r *Receipt) { r.Algorithm = "p256" },
		"ecdsa signature": func(r *Receipt) { r.Signature = "p256:3045" },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			c := *r
			f(&c)
			if err := c.Verify(); err == nil {
				t.Fatal("tampered receipt verified")
			}
		})
	}
	c := *r
	c.Algorithm = "ed25519" // informational and outside the signed body
	if err := c.Verify(); err != nil {
		t.Fatalf("algorithm hint must not change the signature: %v", err)
	}
}

// RFC 8785 §3.2.2 / appendix examples: key order by UTF-16 code units and
// ES6 number formatting.
func TestCanonicalJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"b":2,"a":1}`, `{"a":1,"b":2}`},
		{`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001]}`,
			`{"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27]}`},
		{`{"\u20ac":"Euro Sign","\r":"Carriage Return","\ud83d\ude00":"Emoji","1":"One","\u0080":"Control"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji\"}"},
	}
	for _, c := range cases {
		got, err := CanonicalizeJSON([]byte(c.in))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Errorf("JCS(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
	}
	h, _ := ParameterHash(nil)
	if h != EmptyContentHash {
		t.Errorf("hash of JCS(null) = %s, want %s", h, EmptyContentHash)
	}
}

func TestEventsMatchSchema(t *testing.T) {
	dec := DecisionEvent{Schema: DecisionEventSchema, EventID: DecisionEventID("r1"), ReceiptID: "r1", Timestamp: 1,
		CapabilityID: "c", ToolServer: "s", ToolName: "t", Parameters: json.RawMessage(`{}`),
		Decision: Decision{Verdict: VerdictDeny, Reason: "no grant", Guard: "grant"}, PolicyHash: "p",
		Evidence: []GuardEvidence{{GuardName: "g", Verdict: false}}, Metadata: json.RawMessage(`{"a":1}`)}
	out := OutcomeEvent{Schema: OutcomeEventSchema, EventID: OutcomeEventID("r1"), ReceiptID: "r1", Timestamp: 2,
		Outcome: OutcomeFailed, ContentHash: EmptyContentHash, Reason: "tool error"}
	to := TimeoutEvent{Schema: TimeoutEventSchema, EventID: TimeoutEventID("r1"), ReceiptID: "r1", Timestamp: 3, Reason: "late"}
	stmt, err := SignCheckpointStatement(testKey(3), CheckpointBody{CheckpointSeq: 1, BatchStartSeq: 1, BatchEndSeq: 4, TreeSize: 4,
		MerkleRoot: EncodeHash(make([]byte, 32)), IssuedAt: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := stmt.Verify(); err != nil {
		t.Fatal(err)
	}
	good := []struct {
		schema string
		v      interface{ Validate() error }
		doc    any
	}{
		{"decision-event.v1.schema.json", &dec, &dec},
		{"outcome-event.v1.schema.json", &out, &out},
		{"timeout-event.v1.schema.json", &to, &to},
		{"checkpoint-statement.v1.schema.json", &stmt.Body, stmt},
	}
	for _, g := range good {
		t.Run(g.schema, func(t *testing.T) {
			if err := g.v.Validate(); err != nil {
				t.Fatalf("Go rejects: %v", err)
			}
			raw, _ := json.Marshal(g.doc)
			if err := validateJSON(compileSchema(t, g.schema), raw); err != nil {
				t.Fatalf("schema rejects %s: %v", raw, err)
			}
		})
	}

	bad := []struct {
		name, schema string
		v            interface{ Validate() error }
	}{
		{"decision with cancelled verdict", "decision-event.v1.schema.json", func() *DecisionEvent {
			d := dec
			d.Decision = Decision{Verdict: VerdictCancelled, Reason: "x"}
			return &d
		}()},
		{"decision with array metadata", "decision-event.v1.schema.json", func() *DecisionEvent { d := dec; d.Metadata = json.RawMessage(`[1]`); return &d }()},
		{"decision with slash in id", "decision-event.v1.schema.json", func() *DecisionEvent {
			d := dec
			d.ReceiptID, d.EventID = "a/b", "a/b.decision"
			return &d
		}()},
		{"failed outcome without reason", "outcome-event.v1.schema.json", func() *OutcomeEvent { o := out; o.Reason = ""; return &o }()},
		{"outcome with bad hash", "outcome-event.v1.schema.json", func() *OutcomeEvent { o := out; o.ContentHash = "00"; return &o }()},
		{"timeout without reason", "timeout-event.v1.schema.json", func() *TimeoutEvent { x := to; x.Reason = ""; return &x }()},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			if err := b.v.Validate(); err == nil {
				t.Error("Go accepts")
			}
			raw, _ := json.Marshal(b.v)
			if err := validateJSON(compileSchema(t, b.schema), raw); err == nil {
				t.Errorf("schema accepts %s", raw)
			}
		})
	}
}

// JSON Schema cannot tie event_id to receipt_id; the Go validator does.
func TestEventIDBoundToReceiptID(t *testing.T) {
	d := DecisionEvent{Schema: DecisionEventSchema, EventID: "r2.decision", ReceiptID: "r1", Timestamp: 1,
		CapabilityID: "c", ToolServer: "s", ToolName: "t", Parameters: json.RawMessage(`{}`),
		Decision: Decision{Verdict: VerdictAllow}, PolicyHash: "p"}
	if err := d.Validate(); err == nil || !strings.Contains(err.Error(), "event_id") {
		t.Fatalf("want an event_id error, got %v", err)
	}
}

func TestReceiptSubject(t *testing.T) {
	for in, want := range map[string]string{"fs": "chio.receipts.fs", "a.b c*>": "chio.receipts.a_b_c__", "": "chio.receipts._"} {
		if got := ReceiptSubject(in); got != want {
			t.Errorf("ReceiptSubject(%q) = %q, want %q", in, got, want)
		}
	}
}

func ExampleSignReceipt() {
	r, _ := SignReceipt(testKey(1), sampleBody(Decision{Verdict: VerdictAllow}))
	fmt.Println(r.Verify() == nil, len(r.Signature))
	// Output: true 128
}

// The one-pass leaf equals the generic JCS of the signed receipt, and its
// signature verifies, for receipts with and without every optional field.
func TestSignReceiptLeafMatchesGenericJCS(t *testing.T) {
	bodies := []ReceiptBody{sampleBody(Decision{Verdict: VerdictAllow}), benchBody()}
	full := sampleBody(Decision{Verdict: VerdictDeny, Reason: "r \"quoted\" \u2028 é", Guard: "g"})
	full.TenantID = "tenant \\ \u0001 <&> \u2028"
	full.CapabilityID = "cap\"x\u007f"
	full.Timestamp = 1<<53 + 2
	full.Metadata = json.RawMessage(`{"z":1,"a":[1.0,2e3,"x"],"signature":"not the real one","tenant_id":"x"}`)
	full.Evidence = []GuardEvidence{{GuardName: "b", Verdict: true, Details: "d"}}
	full.ToolName = "tool\tname"
	bodies = append(bodies, full)
	for i, b := range bodies {
		leaf, err := SignReceiptLeaf(testKey(1), b)
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseReceipt(leaf)
		if err != nil {
			t.Fatalf("%d: %v\n%s", i, err, leaf)
		}
		if err := r.Verify(); err != nil {
			t.Fatalf("%d: %v", i, err)
		}
		want, _ := CanonicalReceipt(r)
		if !bytes.Equal(leaf, want) {
			t.Fatalf("%d:\n got %s\nwant %s", i, leaf, want)
		}
		generic, _ := SignReceipt(testKey(1), b)
		if generic.Signature != r.Signature {
			t.Fatalf("%d: signatures differ", i)
		}
	}
}

func FuzzSignReceiptLeaf(f *testing.F) {
	f.Add("id-1", "fs", "read", `{"a":1}`, `{"k":"v"}`, "", uint64(1))
	f.Add("x", "s\u2028", "t\"", `[1e400]`, ``, "tenant", uint64(1<<53))
	f.Fuzz(func(t *testing.T, id, server, tool, params, meta, tenant string, ts uint64) {
		b := sampleBody(Decision{Verdict: VerdictAllow})
		b.ID, b.ToolServer, b.ToolName, b.TenantID, b.Timestamp = id, server, tool, tenant, ts
		b.Action.Parameters = json.RawMessage(params)
		if meta != "" {
			b.Metadata = json.RawMessage(meta)
		}
		ph, err := ParameterHash(b.Action.Parameters)
		if err != nil {
			return
		}
		b.Action.ParameterHash = ph
		leaf, err := SignReceiptLeaf(testKey(1), b)
		if err != nil {
			return
		}
		generic, err := SignReceipt(testKey(1), b)
		if err != nil {
			t.Fatalf("generic path rejects what the leaf path signed: %v", err)
		}
		want, err := CanonicalReceipt(generic)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(leaf, want) {
			t.Fatalf("\n got %s\nwant %s", leaf, want)
		}
	})
}

func TestValidIDAndKeyForms(t *testing.T) {
	for id, want := range map[string]bool{
		"0190f3c2-7a1b-7c3d-9e4f-0a1b2c3d4e5f": true, "rc-auth-1": true, "a.b:c_d": true, "x": true,
		"": false, "-a": false, ".a": false, "a/b": false, "a b": false, "é": false, strings.Repeat("a", 129): false,
	} {
		if ValidID(id) != want {
			t.Errorf("ValidID(%q) != %v", id, want)
		}
	}
	hex64 := strings.Repeat("ab", 32)
	for key, want := range map[string]error{
		hex64: nil, "p256:04" + strings.Repeat("a", 128): ErrUnsupportedAlgorithm,
		strings.ToUpper(hex64): errBadForm, hex64[:63]: errBadForm, "p256:04": errBadForm, "": errBadForm,
	} {
		_, err := ParsePublicKey(key)
		if (want == nil) != (err == nil) || (want == ErrUnsupportedAlgorithm && !errors.Is(err, ErrUnsupportedAlgorithm)) {
			t.Errorf("ParsePublicKey(%q) = %v", abbreviate(key), err)
		}
	}
}

var errBadForm = errors.New("bad form")
