package verify

import (
	"bytes"

	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/scitt"
	"github.com/chio-ledger/chio/schemas"
)

// VerifySCITT checks a SCITT transparent statement of a receipt, in
// order: the keys; the statement's signature by the pinned kernel key
// and its COSE Receipt's inclusion proof and signature by the pinned log
// key (check "scitt"); then the receipt it carries, as Verify checks one
// (kernel-key, receipt, receipt-signature, parameter-hash); and that the
// statement's subject is that receipt.
func VerifySCITT(statement []byte, vkey, kernelKey string) (*Result, error) {
	kpub, err := schemas.ParsePublicKey(kernelKey)
	if err != nil {
		return nil, failf("kernel-key", "%v", err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, failf("scitt", "verifier key: %v", err)
	}
	logPub, err := scitt.VKeyPublicKey(vkey)
	if err != nil {
		return nil, failf("scitt", "%v", err)
	}
	st, err := scitt.Verify(statement, kpub, logPub)
	if err != nil {
		return nil, &Failure{Check: "scitt", Err: err}
	}
	r, leaf, err := parseReceipt(st.Receipt)
	if err != nil {
		return nil, &Failure{Check: "receipt", Err: err}
	}
	if err := checkReceipt(r, kernelKey); err != nil {
		return nil, err
	}
	switch {
	case !bytes.Equal(leaf, st.Receipt):
		return nil, failf("receipt", "the statement's payload is not a receipt in its canonical form, so it is not the log's leaf")
	case st.Subject != scitt.SubjectPrefix+r.ID:
		return nil, failf("scitt", "the statement is about %q, its receipt is %s", st.Subject, r.ID)
	}
	return &Result{ReceiptID: r.ID, LeafIndex: st.Index, TreeSize: st.Size, Origin: v.Name(), Verdict: r.Decision.Verdict,
		Root: schemas.EncodeHash(st.Root)}, nil
}
