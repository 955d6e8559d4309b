package main

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/ledger/verify"
	"github.com/chio-ledger/chio/ledger/witness"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

func newVerifyCmd() *cobra.Command {
	var receiptF, proofF, checkpointF, vkey, kernelKey, agentCard, jwks, policyF, manifestF, manifestKey, scittF string
	cmd := &cobra.Command{
		Use:   "verify --receipt F --proof F [--checkpoint F] --vkey K --kernel-key HEX [--witness-policy F] | --scitt F --vkey K --kernel-key HEX | --agent-card F|URL [--jwks F|URL] | --manifest F --manifest-key K",
		Short: "Verify a receipt, its inclusion proof and a signed checkpoint offline, or a signed agent card",
		Long: "Checks, in order: the receipt parses; it is signed by the pinned kernel key; its signature and\n" +
			"parameter hash; the checkpoint's signature by the pinned log key (--vkey, a note verifier key or a\n" +
			"file holding one) and its origin; the proof is for this receipt and this checkpoint's size; the\n" +
			"leaf hash; the audit path to the checkpoint root. Exit status 0 means all passed, 1 names the first\n" +
			"failed check, 2 means the inputs could not be read.\n\n" +
			"With --scitt (a SCITT transparent statement, /v1/receipts/{id}/scitt) it checks, in order: the\n" +
			"statement's COSE signature by the pinned kernel key; its COSE Receipt (RFC 9942, vds RFC9162_SHA256):\n" +
			"the inclusion proof of the statement's payload, folded into a root, and that root's signature by\n" +
			"the pinned log key; then the receipt inside as above, and that the statement is about it.\n\n" +
			"With --agent-card (a file, a URL, or an agent's origin) it verifies the card's JWS signatures\n" +
			"(A2A AgentCard.signatures, Ed25519 over the RFC 8785 form of the card without them) against the\n" +
			"keys of --jwks (a file or URL: offline with a file), or else, for a card fetched from a URL, the\n" +
			"JWKS its signature's jku names on that URL's own origin (https, or http on loopback); a card file\n" +
			"needs --jwks. It prints the key that verified. Exit status 1 means no signature verifies.\n\n" +
			"For a receipt that verifies it also prints how the caller proved who it was, as the signed\n" +
			"metadata.attribution.binding records it: \"binding: dpop (jkt …)\" (an RFC 9449 proof by the\n" +
			"capability's subject key, with that key's RFC 7638 thumbprint), \"binding: chio_dpop_v1 (jkt …)\" (a\n" +
			"chio.dpop_proof.v1), \"binding: bearer\" (the token alone), or \"binding: none recorded\" (a receipt\n" +
			"signed before bindings were recorded, or refused before the caller was bound). For a caller that\n" +
			"came with an identity provider's access token it prints who, as metadata.attribution.identity\n" +
			"records it: \"identity: \"SUBJECT\" of ISSUER (client \"ID\", token \"JTI\", actor \"ACTOR\", …)\", each\n" +
			"actor acting on the subject's behalf, the current one first.\n\n" +
			"A receipt nested deeper than readers allow (the ledger serves it by id as {\"unreadable\": why,\n" +
			"\"raw\": its bytes}; that body or the bare bytes are accepted) is checked over its signed bytes\n" +
			"without decoding what is deep; a pass then prints \"unreadable: …\" and reads no binding.\n\n" +
			"With --manifest (a chio.signed_manifest.v1 document, e.g. from chio tools list --manifests) it\n" +
			"checks, in order: the schema, that manifest_hash is the SHA-256 of the manifest's RFC 8785 form (the\n" +
			"hash receipts name as metadata.manifest.hash), that it is signed by --manifest-key (the public key,\n" +
			"or a file holding it such as chio up's keys/manifest.pub), and the signature. Exit status 1 names\n" +
			"the first failed check.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if manifestF != "" || manifestKey != "" {
				if receiptF != "" || proofF != "" || checkpointF != "" || vkey != "" || kernelKey != "" || agentCard != "" || manifestF == "" {
					return usageError(errors.New("--manifest-key goes with --manifest, which verifies a manifest alone"))
				}
				return verifyManifest(cmd, manifestF, manifestKey)
			}
			if agentCard != "" {
				if receiptF != "" || proofF != "" || checkpointF != "" || vkey != "" || kernelKey != "" {
					return usageError(errors.New("--agent-card verifies a card alone: drop the receipt flags"))
				}
				return verifyAgentCard(cmd, agentCard, jwks)
			}
			if jwks != "" {
				return usageError(errors.New("--jwks goes with --agent-card"))
			}
			if scittF != "" {
				if receiptF != "" || proofF != "" || checkpointF != "" || policyF != "" {
					return usageError(errors.New("--scitt carries its receipt and proof: drop --receipt, --proof, --checkpoint and --witness-policy"))
				}
				return verifySCITT(cmd, scittF, vkey, kernelKey)
			}
			in := verify.Inputs{KernelKey: strings.TrimSpace(kernelKey), VKey: strings.TrimSpace(vkey)}
			for _, f := range []struct {
				flag, path string
				dst        *[]byte
			}{{"--receipt", receiptF, &in.Receipt}, {"--proof", proofF, &in.Proof}, {"--checkpoint", checkpointF, &in.Checkpoint}} {
				if f.path == "" {
					if f.flag == "--checkpoint" {
						continue // a tlog-proof carries its own
					}
					return usageError(fmt.Errorf("%s is required", f.flag))
				}
				b, err := os.ReadFile(f.path)
				if err != nil {
					return usageError(fmt.Errorf("%s: %w", f.flag, err))
				}
				*f.dst = b
			}
			if in.VKey == "" || in.KernelKey == "" {
				return usageError(errors.New("--vkey and --kernel-key are required (pin them out of band)"))
			}
			if _, err := vkeyFlag(in.VKey); err != nil {
				return usageError(err)
			}
			in.VKey = keyText(in.VKey)
			if policyF != "" {
				p, err := witness.LoadPolicy(policyF)
				if err != nil {
					return usageError(fmt.Errorf("--witness-policy: %w", err))
				}
				in.Witnesses = p
			}
			res, err := verify.Verify(in)
			if err != nil {
				var f *verify.Failure
				if errors.As(err, &f) {
					return &exitError{code: 1, err: fmt.Errorf("verify: FAILED %s: %v", f.Check, f.Err)}
				}
				return &exitError{code: 1, err: err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "verify: OK receipt %s (%s) is leaf %d of %s at tree size %d\n",
				res.ReceiptID, res.Verdict, res.LeafIndex, res.Origin, res.TreeSize)
			if in.Witnesses != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "witnesses: quorum %s met, cosigned by %s\n", in.Witnesses.Quorum(), strings.Join(res.Witnesses, ", "))
			}
			if res.Unreadable != "" {
				// Genuine and in the log, but no reader can show it: say so
				// rather than describe what could not be read.
				fmt.Fprintf(cmd.OutOrStdout(), "unreadable: %s (checked over its signed bytes; readers list it only as unreadable)\n", res.Unreadable)
				fmt.Fprintln(cmd.OutOrStdout(), "binding: not read (the receipt is unreadable)")
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "binding: %s\n", receiptBinding(in.Receipt))
			if id := receiptIdentity(in.Receipt); id != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "identity: %s\n", id)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "edge: %s\n", receiptEdge(in.Receipt))
			return nil
		},
	}
	cmd.Flags().StringVar(&receiptF, "receipt", "", "receipt JSON (bare, or the /v1/receipts/{id} body)")
	cmd.Flags().StringVar(&proofF, "proof", "", "inclusion proof: JSON (/v1/receipts/{id}/inclusion-proof) or C2SP tlog-proof (/v1/receipts/{id}/tlog-proof)")
	cmd.Flags().StringVar(&checkpointF, "checkpoint", "", "signed checkpoint note (/log/checkpoint); optional with a tlog-proof")
	cmd.Flags().StringVar(&vkey, "vkey", "", "the log's note verifier key, or a file holding it")
	cmd.Flags().StringVar(&kernelKey, "kernel-key", "", "the pinned kernel public key (64 hex)")
	cmd.Flags().StringVar(&scittF, "scitt", "", "verify a SCITT transparent statement of a receipt instead (/v1/receipts/{id}/scitt), with --vkey and --kernel-key")
	cmd.Flags().StringVar(&agentCard, "agent-card", "", "verify a signed A2A agent card instead: a file, a URL, or an agent's origin")
	cmd.Flags().StringVar(&policyF, "witness-policy", "", "witness policy file: the checkpoint must be cosigned by its quorum")
	cmd.Flags().StringVar(&jwks, "jwks", "", "with --agent-card: the JWKS (file or URL) holding the keys to trust (default, for a card URL: its jku on the same origin)")
	cmd.Flags().StringVar(&manifestF, "manifest", "", "verify a chio.signed_manifest.v1 document instead (with --manifest-key)")
	cmd.Flags().StringVar(&manifestKey, "manifest-key", "", "with --manifest: the signer's public key (64 hex), or a file holding it")
	return cmd
}

// receiptIdentity is metadata.attribution.identity in one line, every
// value quoted (they come from the caller's token), or "" for none.
func receiptIdentity(raw []byte) string {
	var r struct {
		Metadata struct {
			Attribution struct {
				Identity *struct {
					Issuer   string `json:"issuer"`
					Subject  string `json:"subject"`
					ClientID string `json:"client_id"`
					TokenID  string `json:"token_id"`
					Act      []struct {
						Subject string `json:"sub"`
					} `json:"act"`
				} `json:"identity"`
			} `json:"attribution"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(bareReceipt(raw), &r); err != nil || r.Metadata.Attribution.Identity == nil {
		return ""
	}
	id := r.Metadata.Attribution.Identity
	out := strconv.Quote(id.Subject) + " of " + strconv.Quote(id.Issuer) + " ("
	if id.ClientID != "" {
		out += "client " + strconv.Quote(id.ClientID) + ", "
	}
	out += "token " + strconv.Quote(id.TokenID)
	// RFC 8693: each act.sub acts on the subject's behalf, the current
	// actor first.
	for _, a := range id.Act {
		out += ", actor " + strconv.Quote(a.Subject)
	}
	return out + ")"
}

// receiptBinding describes metadata.attribution.binding of a receipt that
// verified (bare, or the /v1/receipts/{id} body): "dpop (jkt …)",
// "chio_dpop_v1 (jkt …)", "bearer", or "none recorded". A jkt that is
// not the attributed subject key's thumbprint (for an access-token
// caller, the token's cnf.jkt) is said to be so.
func receiptBinding(raw []byte) string {
	raw = bareReceipt(raw)
	var r struct {
		Metadata struct {
			Attribution struct {
				SubjectKey string `json:"subject_key"`
				Identity   *struct {
					CnfJKT string `json:"cnf_jkt"`
				} `json:"identity"`
				Binding *struct {
					Method string `json:"method"`
					JKT    string `json:"jkt"`
				} `json:"binding"`
			} `json:"attribution"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Metadata.Attribution.Binding == nil {
		return "none recorded"
	}
	b, subject := r.Metadata.Attribution.Binding, r.Metadata.Attribution.SubjectKey
	method := b.Method
	switch method {
	case dpop.MethodBearer, dpop.MethodDPoP, dpop.MethodToolProof:
	default:
		method = "unknown method " + strconv.Quote(method)
	}
	if b.JKT == "" {
		return method
	}
	jkt := b.JKT
	if strings.Trim(jkt, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
		jkt = strconv.Quote(jkt)
	}
	out := method + " (jkt " + jkt
	if id := r.Metadata.Attribution.Identity; id != nil {
		// An access token is bound by its cnf.jkt; its subject "key" is a
		// name no one holds.
		if id.CnfJKT == b.JKT {
			return out + ", the access token's cnf.jkt)"
		}
		return out + ", NOT the access token's cnf.jkt)"
	}
	if k, err := schemas.ParsePublicKey(subject); err == nil && len(k) == ed25519.PublicKeySize {
		if dpop.Thumbprint(ed25519.PublicKey(k)) == b.JKT {
			out += ", the subject key's"
		} else {
			out += ", NOT the thumbprint of the subject key " + subject
		}
	}
	return out + ")"
}

// receiptEdge describes the edge a receipt names as the one that decided
// (metadata.edge, signed with the receipt), quoted: the receipt is
// genuine, but its strings are still the caller's to choose.
func receiptEdge(raw []byte) string {
	raw = bareReceipt(raw)
	var r struct {
		Metadata struct {
			Edge *schemas.EdgeRef `json:"edge"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Metadata.Edge == nil {
		return "none recorded (a ledger that checks edge signatures names the edge that signed the decision)"
	}
	e := r.Metadata.Edge
	return fmt.Sprintf("%q key %q credential %q (the edge that signed the decision)", e.EdgeID, e.Key, e.CredentialID)
}

// bareReceipt is the receipt itself of a /v1/receipts/{id} body, or raw
// when it is a bare receipt already.
func bareReceipt(raw []byte) []byte {
	var wrapper struct {
		Receipt json.RawMessage `json:"receipt"`
	}
	if json.Unmarshal(raw, &wrapper) == nil && len(wrapper.Receipt) > 0 {
		return wrapper.Receipt
	}
	return raw
}

// verifySCITT is chio verify --scitt.
func verifySCITT(cmd *cobra.Command, file, vkey, kernelKey string) error {
	if vkey == "" || kernelKey == "" {
		return usageError(errors.New("--vkey and --kernel-key are required (pin them out of band)"))
	}
	if _, err := vkeyFlag(vkey); err != nil {
		return usageError(err)
	}
	ts, err := os.ReadFile(file)
	if err != nil {
		return usageError(fmt.Errorf("--scitt: %w", err))
	}
	res, err := verify.VerifySCITT(ts, keyText(strings.TrimSpace(vkey)), strings.TrimSpace(kernelKey))
	if err != nil {
		var f *verify.Failure
		if errors.As(err, &f) {
			return &exitError{code: 1, err: fmt.Errorf("verify: FAILED %s: %v", f.Check, f.Err)}
		}
		return &exitError{code: 1, err: err}
	}
	// The root is what the log key signed; the proof's position is not
	// (RFC 9942 signs only the root).
	fmt.Fprintf(cmd.OutOrStdout(), "verify: OK SCITT statement of receipt %s (%s) is in the log of %s with root %s (the proof says leaf %d of %d)\n",
		res.ReceiptID, res.Verdict, res.Origin, res.Root, res.LeafIndex, res.TreeSize)
	return nil
}
