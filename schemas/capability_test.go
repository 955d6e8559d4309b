package schemas

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func capBody(id string, issuer, subject int, grants ...ToolGrant) CapabilityBody {
	return CapabilityBody{
		ID: id, Issuer: pubOf(issuer), Subject: pubOf(subject),
		Scope: Scope{Grants: grants}, IssuedAt: 1_800_000_000, ExpiresAt: 1_800_003_600,
	}
}

func pubOf(seed int) string { return EncodePublicKey(testKey(byte(seed)).Public().(ed25519.PublicKey)) }

func TestCapabilitiesMatchSchema(t *testing.T) {
	s := compileSchema(t, "capability.v1.schema.json")
	n := uint32(5)
	root, err := IssueCapability(testKey(1), capBody("root", 1, 2,
		ToolGrant{ServerID: "fs", ToolName: "*", Operations: []Operation{OpInvoke, OpDelegate}, MaxInvocations: &n,
			Constraints:  []Constraint{{Type: "prefix", Value: json.RawMessage(`{"pointer":"/path","prefix":"docs/"}`)}},
			MaxTotalCost: &MonetaryAmount{Units: 100, Currency: "USD"}}))
	if err != nil {
		t.Fatal(err)
	}
	child := capBody("child", 0, 3, ToolGrant{ServerID: "fs", ToolName: "read_file", Operations: []Operation{OpInvoke}, MaxInvocations: &n,
		Constraints:  root.Scope.Grants[0].Constraints,
		MaxTotalCost: &MonetaryAmount{Units: 50, Currency: "USD"}})
	delegated, err := Delegate(testKey(2), root, child)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []*CapabilityToken{root, delegated} {
		raw, _ := json.Marshal(tok)
		if err := validateJSON(s, raw); err != nil {
			t.Fatalf("schema rejects a Go-built token: %v\n%s", err, raw)
		}
		back, err := ParseCapability(raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := back.VerifySignature(); err != nil {
			t.Fatal(err)
		}
		h, _ := EncodeCapabilityHeader(back)
		fromHeader, err := DecodeCapabilityText(h)
		if err != nil || string(fromHeader) != string(raw) {
			t.Fatalf("header round trip: %v", err)
		}
	}
	if a := delegated.Ancestor(0); a.VerifySignature() != nil || a.ID != "root" {
		t.Fatal("the rebuilt ancestor does not verify")
	}
}

func TestBadCapabilitiesRejectedByBoth(t *testing.T) {
	s := compileSchema(t, "capability.v1.schema.json")
	tok, err := IssueCapability(testKey(1), capBody("cap-1", 1, 2, ToolGrant{ServerID: "fs", ToolName: "read", Operations: []Operation{OpInvoke}}))
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(tok)
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	grants := func(m map[string]any) map[string]any {
		return m["scope"].(map[string]any)["grants"].([]any)[0].(map[string]any)
	}
	cases := map[string][]byte{
		"unknown field":      mutate(func(m map[string]any) { m["admin"] = true }),
		"unknown schema":     mutate(func(m map[string]any) { m["schema"] = "chio.capability.v2" }),
		"missing signature":  mutate(func(m map[string]any) { delete(m, "signature") }),
		"uppercase issuer":   mutate(func(m map[string]any) { m["issuer"] = strings.ToUpper(m["issuer"].(string)) }),
		"bad id":             mutate(func(m map[string]any) { m["id"] = "../x" }),
		"no operations":      mutate(func(m map[string]any) { grants(m)["operations"] = []any{} }),
		"unknown operation":  mutate(func(m map[string]any) { grants(m)["operations"] = []any{"sudo"} }),
		"server wildcard":    mutate(func(m map[string]any) { grants(m)["server_id"] = "*" }),
		"grant extra field":  mutate(func(m map[string]any) { grants(m)["max_calls"] = 3 }),
		"zero issued_at":     mutate(func(m map[string]any) { m["issued_at"] = 0 }),
		"negative budget":    mutate(func(m map[string]any) { grants(m)["max_invocations"] = -1 }),
		"money without unit": mutate(func(m map[string]any) { grants(m)["max_total_cost"] = map[string]any{"units": 5} }),
		"string time":        mutate(func(m map[string]any) { m["expires_at"] = "tomorrow" }),
		"null scope":         mutate(func(m map[string]any) { m["scope"] = nil }),
		"empty scope":        mutate(func(m map[string]any) { m["scope"] = map[string]any{"grants": []any{}} }),
		"control in name":    mutate(func(m map[string]any) { grants(m)["tool_name"] = "read\n" }),
	}
	for name, raw := range cases {
		t.Run(name, func(t *testing.T) {
			if validateJSON(s, raw) == nil {
				t.Errorf("schema accepts it")
			}
			if _, err := ParseCapability(raw); err == nil {
				t.Errorf("ParseCapability accepts it")
			}
		})
	}
	// Expiry before issuance and an empty scope are beyond the schema; Go refuses them.
	for name, raw := range map[string][]byte{
		"expires before issued": mutate(func(m map[string]any) { m["expires_at"] = m["issued_at"] }),
	} {
		if _, err := ParseCapability(raw); err == nil {
			t.Errorf("%s: ParseCapability accepts it", name)
		}
	}
}

// permits is the meaning of a scope, evaluated by brute force: may a
// holder perform op on server/tool, and with which budgets.
func permits(s Scope, server, tool string, op Operation) []ToolGrant {
	var out []ToolGrant
	for _, g := range s.Grants {
		if g.ServerID == server && (g.ToolName == "*" || g.ToolName == tool) && hasOp(g.Operations, op) {
			out = append(out, g)
		}
	}
	return out
}

// Property: whenever CheckAttenuation accepts a child, everything the child
// permits the parent permitted through a delegable grant with at least the
// child's budget and no constraint the child lacks.
func TestAttenuationNeverWidens(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	servers, toolNames := []string{"a", "b"}, []string{"x", "y", "*"}
	ops := []Operation{OpInvoke, OpRead, OpDelegate}
	cons := []Constraint{{Type: "prefix", Value: json.RawMessage(`{"pointer":"/p","prefix":"d"}`)}, {Type: "max", Value: json.RawMessage(`{"pointer":"/n","max":3}`)}}
	randGrant := func() ToolGrant {
		g := ToolGrant{ServerID: servers[r.IntN(2)], ToolName: toolNames[r.IntN(3)]}
		for _, o := range ops {
			if r.IntN(2) == 0 {
				g.Operations = append(g.Operations, o)
			}
		}
		if len(g.Operations) == 0 {
			g.Operations = []Operation{OpInvoke}
		}
		if r.IntN(2) == 0 {
			n := uint32(r.IntN(5))
			g.MaxInvocations = &n
		}
		if r.IntN(3) == 0 {
			g.MaxTotalCost = &MonetaryAmount{Units: uint64(r.IntN(5)), Currency: []string{"USD", "EUR"}[r.IntN(2)]}
		}
		for _, c := range cons {
			if r.IntN(3) == 0 {
				g.Constraints = append(g.Constraints, c)
			}
		}
		return g
	}
	accepted := 0
	for range 20000 {
		parent := CapabilityBody{IssuedAt: 100, ExpiresAt: 200}
		child := CapabilityBody{IssuedAt: uint64(90 + r.IntN(20)), ExpiresAt: uint64(190 + r.IntN(20))}
		for range 1 + r.IntN(3) {
			parent.Scope.Grants = append(parent.Scope.Grants, randGrant())
		}
		for range 1 + r.IntN(2) {
			child.Scope.Grants = append(child.Scope.Grants, randGrant())
		}
		if CheckAttenuation(&parent, &child) != nil {
			continue
		}
		accepted++
		if child.IssuedAt < parent.IssuedAt || child.ExpiresAt > parent.ExpiresAt {
			t.Fatalf("accepted a wider window: %+v ⊄ %+v", child, parent)
		}
		for _, cg := range child.Scope.Grants {
			for _, s := range servers {
				for _, tl := range []string{"x", "y", "z"} {
					for _, o := range cg.Operations {
						if len(permits(Scope{Grants: []ToolGrant{cg}}, s, tl, o)) == 0 {
							continue
						}
						ok := false
						for _, pg := range permits(parent.Scope, s, tl, o) {
							if hasOp(pg.Operations, OpDelegate) && (pg.MaxInvocations == nil || (cg.MaxInvocations != nil && *cg.MaxInvocations <= *pg.MaxInvocations)) &&
								amountWithin(cg.MaxTotalCost, pg.MaxTotalCost) && len(cg.Constraints) >= len(pg.Constraints) {
								ok = true
							}
						}
						if !ok {
							t.Fatalf("child grant %+v permits %s on %s/%s beyond parent %+v", cg, o, s, tl, parent.Scope)
						}
					}
				}
			}
		}
	}
	if accepted < 100 {
		t.Fatalf("only %d random children were accepted; the property was barely exercised", accepted)
	}
}

func FuzzParseCapability(f *testing.F) {
	tok, err := IssueCapability(testKey(1), capBody("cap-f", 1, 2, ToolGrant{ServerID: "fs", ToolName: "*", Operations: []Operation{OpInvoke, OpDelegate}}))
	if err != nil {
		f.Fatal(err)
	}
	child, err := Delegate(testKey(2), tok, capBody("cap-g", 0, 3, ToolGrant{ServerID: "fs", ToolName: "x", Operations: []Operation{OpInvoke}}))
	if err != nil {
		f.Fatal(err)
	}
	for _, t := range []*CapabilityToken{tok, child} {
		raw, _ := json.Marshal(t)
		f.Add(string(raw))
		h, _ := EncodeCapabilityHeader(t)
		f.Add(h)
	}
	f.Add(`{"id":1}`)
	f.Fuzz(func(t *testing.T, text string) {
		raw, err := DecodeCapabilityText(text)
		if err != nil {
			return
		}
		tok, err := ParseCapability(raw)
		if err != nil {
			return
		}
		// Whatever parses is structurally sound and survives a round trip.
		if err := tok.Validate(); err != nil {
			t.Fatalf("parsed but invalid: %v", err)
		}
		again, _ := json.Marshal(tok)
		back, err := ParseCapability(again)
		if err != nil {
			t.Fatalf("re-encoding does not parse: %v", err)
		}
		if fmt.Sprint(back) != fmt.Sprint(tok) {
			t.Fatal("round trip changed the token")
		}
		_ = tok.VerifySignature()
		for i := range tok.DelegationChain {
			_ = tok.Ancestor(i).VerifySignature()
		}
	})
}

func TestManifestsMatchSchema(t *testing.T) {
	s := compileSchema(t, "manifest.v1.schema.json")
	good := []byte(`{"schema":"chio.manifest.v1","server_id":"hello-a2a-srv","name":"Hello A2A Server","version":"0.1.0",
		"tools":[{"name":"hello_task","description":"Return a collated greeting",
		"input_schema":{"type":"object","x-chio-streaming":true},"has_side_effects":false,"metadata":{"a2a.expose":true}}]}`)
	if err := validateJSON(s, good); err != nil {
		t.Fatal(err)
	}
	m, err := ParseManifest(good)
	if err != nil {
		t.Fatal(err)
	}
	back, _ := json.Marshal(m)
	if err := validateJSON(s, back); err != nil {
		t.Fatalf("schema rejects a Go-encoded manifest: %v\n%s", err, back)
	}
	bad := map[string]string{
		"wrong schema":      `{"schema":"chio.manifest.v2","server_id":"s","name":"n","version":"1","tools":[{"name":"t","input_schema":{}}]}`,
		"no tools":          `{"schema":"chio.manifest.v1","server_id":"s","name":"n","version":"1","tools":[]}`,
		"schema not object": `{"schema":"chio.manifest.v1","server_id":"s","name":"n","version":"1","tools":[{"name":"t","input_schema":[]}]}`,
		"unknown field":     `{"schema":"chio.manifest.v1","server_id":"s","name":"n","version":"1","tools":[{"name":"t","input_schema":{},"x":1}]}`,
		"bad latency":       `{"schema":"chio.manifest.v1","server_id":"s","name":"n","version":"1","tools":[{"name":"t","input_schema":{},"latency_hint":"Slow"}]}`,
		"long description":  `{"schema":"chio.manifest.v1","server_id":"s","name":"n","version":"1","tools":[{"name":"t","input_schema":{},"description":"` + strings.Repeat("d", 501) + `"}]}`,
		"wildcard name":     `{"schema":"chio.manifest.v1","server_id":"s","name":"n","version":"1","tools":[{"name":"*","input_schema":{}}]}`,
	}
	for name, raw := range bad {
		if validateJSON(s, []byte(raw)) == nil {
			t.Errorf("%s: schema accepts it", name)
		}
		if _, err := ParseManifest([]byte(raw)); err == nil {
			t.Errorf("%s: ParseManifest accepts it", name)
		}
	}
	dup := `{"schema":"chio.manifest.v1","server_id":"s","name":"n","version":"1","tools":[{"name":"t","input_schema":{}},{"name":"t","input_schema":{}}]}`
	if _, err := ParseManifest([]byte(dup)); err == nil {
		t.Error("duplicate tool names accepted")
	}
}

// A constraint number a double cannot hold would be signed as its double
// neighbour, letting a holder swap it: refused at issue and at parse.
func TestInexactConstraintNumbersRefused(t *testing.T) {
	g := ToolGrant{ServerID: "bank", ToolName: "pay", Operations: []Operation{OpInvoke},
		Constraints: []Constraint{{Type: "exact", Value: json.RawMessage(`{"pointer":"/account","equals":12345678901234567891}`)}}}
	if _, err := IssueCapability(testKey(1), capBody("cap-n", 1, 2, g)); err == nil {
		t.Fatal("issued a token with an inexact constraint number")
	}
	g.Constraints[0].Value = json.RawMessage(`{"pointer":"/amount","equals":1.50}`)
	tok, err := IssueCapability(testKey(1), capBody("cap-n", 1, 2, g))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(tok.Scope.Grants[0].Constraints[0].Value); got != `{"equals":1.5,"pointer":"/amount"}` {
		t.Fatalf("constraint not signed in canonical form: %s", got)
	}
	raw, _ := json.Marshal(tok)
	forged := strings.Replace(string(raw), `1.5`, `1.5000000000000000001`, 1)
	if _, err := ParseCapability([]byte(forged)); err == nil {
		t.Fatal("parsed a token whose constraint number was rewritten to a double neighbour")
	}
}

// TestAccessTokenIDsAreReserved: no capability may take an id of the
// form the kernel gives access tokens.
func TestAccessTokenIDsAreReserved(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	body := CapabilityBody{ID: ReservedIDPrefix + "0123", Issuer: EncodePublicKey(priv.Public().(ed25519.PublicKey)),
		Subject: EncodePublicKey(priv.Public().(ed25519.PublicKey)), IssuedAt: 1, ExpiresAt: 2,
		Scope: Scope{Grants: []ToolGrant{{ServerID: "s", ToolName: "t", Operations: []Operation{OpInvoke}}}}}
	if _, err := IssueCapability(priv, body); err == nil || !strings.Contains(err.Error(), "access tokens") {
		t.Fatalf("a capability with a reserved id: %v", err)
	}
}
