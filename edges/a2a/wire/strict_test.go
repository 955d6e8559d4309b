package wire

import (
	"errors"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// Every hostile variant of a valid request is refused before any member
// is read: not JSON (syntax, encoding) as a parse error, JSON that is not
// one readable request (repeated member, too deep) as an invalid request;
// the REST body alike.
func TestStrictEnvelope(t *testing.T) {
	body := `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}}}`
	params := `{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"hi"}]}}`
	if _, e := DecodeRequest([]byte(body)); e != nil {
		t.Fatalf("the valid body: %v", e)
	}
	send, _ := MatchREST("POST", "/message:send")
	if _, e := DecodeRESTRequest(send, nil, []byte(params)); e != nil {
		t.Fatalf("the valid REST body: %v", e)
	}
	want := func(err error) int {
		if errors.Is(err, strictjson.ErrSyntax) || errors.Is(err, strictjson.ErrEncoding) {
			return CodeParseError
		}
		return CodeInvalidRequest
	}
	for _, c := range hostilejson.Variants([]byte(body)) {
		if req, e := DecodeRequest(c.Doc); e == nil || e.Code != want(c.Err) || string(req.ResponseID()) != "null" {
			t.Errorf("JSON-RPC %s: %v", c.Name, e)
		}
	}
	for _, c := range hostilejson.Variants([]byte(params)) {
		if _, e := DecodeRESTRequest(send, nil, c.Doc); e == nil || e.Code != want(c.Err) {
			t.Errorf("REST %s: %v", c.Name, e)
		}
	}
}

// A member given under both its JSON name and its proto name is one field
// given twice: refused, whichever would have been read.
func TestFieldGivenTwice(t *testing.T) {
	for _, tc := range []struct{ method, params string }{
		{"GetTask", `{"id":"t","historyLength":1,"history_length":2}`},
		{"SendMessage", `{"message":{"messageId":"m","message_id":"n","role":"ROLE_USER","parts":[{"text":"hi"}]}}`},
	} {
		m, _ := LookupMethod(tc.method, V10)
		if _, e := m.DecodeParams([]byte(tc.params)); e == nil || e.Code != CodeInvalidParams {
			t.Errorf("%s %s: %v", tc.method, tc.params, e)
		}
	}
	// One spelling alone is read.
	m, _ := LookupMethod("GetTask", V10)
	if _, e := m.DecodeParams([]byte(`{"id":"t","history_length":2}`)); e != nil {
		t.Fatal(e)
	}
}
