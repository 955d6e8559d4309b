package schemas

import (
	"encoding/json"
	"testing"
)

func benchBody() ReceiptBody {
	b := sampleBody(Decision{Verdict: VerdictAllow})
	b.Action.Parameters = json.RawMessage(`{"message":{"role":"user","parts":[{"text":"hello 12345"}]}}`)
	b.Action.ParameterHash, _ = ParameterHash(b.Action.Parameters)
	b.Evidence = []GuardEvidence{{GuardName: "CapabilityGuard", Verdict: true}}
	return b
}

// BenchmarkReceipt measures what the ledger does per receipt: parameter
// hash, signature over the JCS body, JCS of the signed receipt.
func BenchmarkReceipt(b *testing.B) {
	key := testKey(1)
	body := benchBody()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParameterHash(body.Action.Parameters); err != nil {
			b.Fatal(err)
		}
		r, err := SignReceipt(key, body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := CanonicalReceipt(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCanonicalReceipt(b *testing.B) {
	r, _ := SignReceipt(testKey(1), benchBody())
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CanonicalReceipt(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSignReceiptLeaf(b *testing.B) {
	key := testKey(1)
	body := benchBody()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := SignReceiptLeaf(key, body); err != nil {
			b.Fatal(err)
		}
	}
}
