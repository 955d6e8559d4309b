package schemas

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// TestCallerDocumentsReadStrictly: what callers present (capability tokens,
// governed intents) goes through the strict reader, so each hostile form
// is refused with its strict error, not only by a later check.
func TestCallerDocumentsReadStrictly(t *testing.T) {
	tok, err := IssueCapability(testKey(1), capBody("cap-1", 1, 2, ToolGrant{ServerID: "fs", ToolName: "read", Operations: []Operation{OpInvoke}}))
	if err != nil {
		t.Fatal(err)
	}
	good, _ := json.Marshal(tok)
	if _, err := ParseCapability(good); err != nil {
		t.Fatal(err)
	}
	intent := []byte(`{"id":"intent-1","server_id":"fs","tool_name":"read","purpose":"read the docs"}`)
	if _, err := DecodeGovernedIntent(intent); err != nil {
		t.Fatal(err)
	}
	for _, c := range hostilejson.Variants(good) {
		if _, err := ParseCapability(c.Doc); !errors.Is(err, c.Err) {
			t.Errorf("capability, %s: %v, want %v", c.Name, err, c.Err)
		}
	}
	if _, err := DecodeGovernedIntent([]byte(`{"id":"intent-1","server_id":"fs","tool_name":"read","PURPOSE":"x"}`)); !errors.Is(err, strictjson.ErrInexactName) {
		t.Errorf("intent with a member matching only in case: %v", err)
	}
	for _, c := range hostilejson.Variants(intent) {
		_, err := DecodeGovernedIntent(c.Doc)
		if !errors.Is(err, ErrIntentShape) || !errors.Is(err, c.Err) {
			t.Errorf("intent, %s: %v", c.Name, err)
		}
	}
}
