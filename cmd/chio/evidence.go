package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/progress"
	"github.com/chio-ledger/chio/ledger/evidence"
	"github.com/chio-ledger/chio/ledger/witness"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

func newEvidenceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "evidence",
		Short: "Export and verify evidence packages: receipts with their proofs against one signed checkpoint",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newEvidenceExportCmd(), newEvidenceVerifyCmd())
	return cmd
}

func newEvidenceExportCmd() *cobra.Command {
	var base, credential, keyFile, out, principal, tool, since, until, outcome, consistencyFrom string
	var pageSize int
	cmd := &cobra.Command{
		Use:   "export --url URL --token TOKEN|@FILE --out DIR [filters]",
		Short: "Write an evidence package of the receipts a reader may read",
		Long: "Fetches the log's signed checkpoint, then pages through /v1/receipts/query and writes, as pages\n" +
			"arrive, each receipt (its leaf bytes) and its inclusion proof at that checkpoint's size; receipts\n" +
			"appended after it are left out. The credential scopes the export as it scopes every read: a\n" +
			"tenant's token exports only the tenant's receipts. DIR must not exist. The package is written into\n" +
			"a hidden sibling, .DIR.partial, and renamed to DIR when complete: an interrupted export (Ctrl-C)\n" +
			"leaves no DIR, and the next one into the same DIR removes what it left. Progress goes to stderr:\n" +
			"one line redrawn in place on a terminal, otherwise a line at each tenth of the receipts the query\n" +
			"counts (and at least every 5 s), then a summary line. DIR holds receipts.ndjson,\n" +
			"inclusion-proofs.ndjson, checkpoints, capability-lineage.ndjson (the lineage chains of the\n" +
			"capabilities the receipts name, from the projections at the same URL; empty when the credential\n" +
			"cannot read lineage, as query.json then says), query.json and manifest.json (SHA-256 and size of\n" +
			"every other file). A receipt no reader can decode is written as the /v1/receipts/{id} body that\n" +
			"carries its stored bytes in base64. --consistency-from adds consistency-proof.json: the proof that\n" +
			"the package's checkpoint extends an earlier one the auditor holds.\n\n" +
			"--principal keeps the receipts of calls made under that authority path (a tenant, as `chio\n" +
			"capability inspect` prints it), decided from the capability lineage, which the credential must\n" +
			"then be able to read.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageError(errors.New("--out is required"))
			}
			u, err := url.Parse(strings.TrimRight(base, "/"))
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageError(fmt.Errorf("--url %q is not an http(s) URL", base))
			}
			var f evidence.Filter
			if f, err = evidenceFilter(principal, tool, since, until, outcome); err != nil {
				return usageError(err)
			}
			if pageSize < 0 || pageSize > 200 {
				return usageError(errors.New("--page-size must be 1–200"))
			}
			if rest, ok := strings.CutPrefix(credential, "@"); ok {
				b, err := os.ReadFile(rest)
				if err != nil {
					return usageError(fmt.Errorf("--token: %w", err))
				}
				credential = strings.TrimSpace(string(b))
			}
			credential = orDefault(credential, os.Getenv(serviceTokenEnv))
			c := &evidence.Client{Base: u.String(), HTTP: &http.Client{Timeout: 2 * time.Minute}, Token: credential}
			if keyFile != "" {
				if credential == "" {
					return usageError(errors.New("--key proves possession of the --token capability's subject key: give --token"))
				}
				s, err := signerFromFiles(keyFile, credential)
				if err != nil {
					return usageError(fmt.Errorf("--key: %w", err))
				}
				c.HTTP.Transport, c.Token = &dpop.Transport{Signer: s}, ""
			}
			o := evidence.Options{Filter: f, PageSize: pageSize}
			if consistencyFrom != "" {
				if o.ConsistencyFrom, err = os.ReadFile(consistencyFrom); err != nil {
					return usageError(fmt.Errorf("--consistency-from: %w", err))
				}
			}
			prog := progress.New(cmd.ErrOrStderr(), "evidence export", 0, progress.WithUnit("receipts"))
			defer prog.Stop()
			o.Progress = prog.Func()
			q, err := evidence.Export(cmd.Context(), c, out, o)
			if err != nil {
				return &exitError{code: 1, err: err}
			}
			prog.Done()
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "evidence package written to %s: %d tool receipts (%d unreadable) at tree size %d of %s; %d lineage records\n",
				out, q.Receipts, q.Unreadable, q.TreeSize, q.Origin, q.Lineage.Records)
			if q.Lineage.Note != "" {
				fmt.Fprintf(w, "lineage: %s\n", q.Lineage.Note)
			}
			if q.ConsistencyFrom != nil {
				fmt.Fprintf(w, "consistency: tree size %d extends to %d\n", *q.ConsistencyFrom, q.TreeSize)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&base, "url", "http://127.0.0.1:8080", "base URL of the ledger (and its projections: chio up serves both)")
	cmd.Flags().StringVar(&credential, "token", "", "the reader's credential: a capability or the service token, inline or @FILE (default $"+serviceTokenEnv+")")
	cmd.Flags().StringVar(&keyFile, "key", "", "the --token capability's subject key: every request carries a DPoP proof (needed when the capability can delegate)")
	cmd.Flags().StringVar(&out, "out", "", "the package directory to create (must not exist)")
	cmd.Flags().StringVar(&principal, "principal", "", "only receipts of calls made under this authority path (p:HEX)")
	cmd.Flags().StringVar(&tool, "tool", "", "only receipts of this tool: SERVER/TOOL, or SERVER for all its tools")
	cmd.Flags().StringVar(&since, "since", "", "only receipts at or after this time (RFC 3339 or Unix seconds)")
	cmd.Flags().StringVar(&until, "until", "", "only receipts at or before this time (RFC 3339 or Unix seconds)")
	cmd.Flags().StringVar(&outcome, "outcome", "", "only receipts with this verdict: allow, deny, cancelled or incomplete")
	cmd.Flags().StringVar(&consistencyFrom, "consistency-from", "", "an earlier signed checkpoint of this log: add the proof the package's checkpoint extends it")
	cmd.Flags().IntVar(&pageSize, "page-size", 200, "receipts per query page (1–200): what the export holds in memory at once")
	return cmd
}

// evidenceFilter checks and converts the export's filter flags.
func evidenceFilter(principal, tool, since, until, outcome string) (evidence.Filter, error) {
	f := evidence.Filter{Principal: principal, Outcome: outcome}
	if principal != "" && !schemas.ValidPrincipal(principal) {
		return f, fmt.Errorf("--principal %q: want p: and 64 lowercase hex", principal)
	}
	switch schemas.Verdict(outcome) {
	case "", schemas.VerdictAllow, schemas.VerdictDeny, schemas.VerdictCancelled, schemas.VerdictIncomplete:
	default:
		return f, fmt.Errorf("--outcome %q: want allow, deny, cancelled or incomplete", outcome)
	}
	if tool != "" {
		// Tool names may hold "/" (fs/read_text_file); server ids do not.
		server, name, _ := strings.Cut(tool, "/")
		if name == "*" {
			name = ""
		}
		if !schemas.ValidName(server) || (name != "" && !schemas.ValidName(name)) {
			return f, fmt.Errorf("--tool %q: want SERVER/TOOL or SERVER", tool)
		}
		f.ToolServer, f.ToolName = server, name
	}
	var err error
	if f.Since, err = parseEvidenceTime("--since", since); err != nil {
		return f, err
	}
	if f.Until, err = parseEvidenceTime("--until", until); err != nil {
		return f, err
	}
	if f.Since != 0 && f.Until != 0 && f.Since > f.Until {
		return f, errors.New("--since is after --until")
	}
	return f, nil
}

// describeFilter prints a filter as query.json's fields, "{}" for none.
func describeFilter(f evidence.Filter) string {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Sprintf("%+v", f)
	}
	return string(b)
}

// parseEvidenceTime reads RFC 3339 or Unix seconds ("" is 0: no bound).
func parseEvidenceTime(flag, s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return n, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil || t.Unix() < 0 {
		return 0, fmt.Errorf("%s %q: want RFC 3339 or Unix seconds", flag, s)
	}
	return uint64(t.Unix()), nil
}

func newEvidenceVerifyCmd() *cobra.Command {
	var input, vkey, kernelKey, policyFile string
	var edgeIssuers []string
	cmd := &cobra.Command{
		Use:   "verify --input DIR --vkey FILE --kernel-key HEX [--edge-issuer KEY] [--witness-policy FILE]",
		Short: "Verify an evidence package offline against pinned keys",
		Long: "Checks, in order: manifest.json (every file listed and no other, each of its size and SHA-256);\n" +
			"the checkpoint's signature by the pinned log key (--vkey: a note verifier key or a file holding\n" +
			"one) and its origin; query.json names that checkpoint; the lineage records (each once, parents\n" +
			"first, delegation depths in order); each receipt of receipts.ndjson with line N of\n" +
			"inclusion-proofs.ndjson, as `chio verify` checks one (pinned kernel key, receipt signature,\n" +
			"parameter hash, proof for this receipt at the checkpoint's size, leaf hash, audit path), every line\n" +
			"in the form the package writes, the receipts in strictly increasing log order, each inside\n" +
			"query.json's filter (tool server and name, outcome, since/until; a principal through the lineage\n" +
			"chain of its capability), each capability's lineage chain in the package unless query.json says\n" +
			"lineage was not readable or lists the capability as missing; every lineage record on a receipt's\n" +
			"chain; each receipt that names the edge that decided it (metadata.edge) against that edge's\n" +
			"credential in edge-credentials.ndjson (same edge id and key; signed by its issuer, one of the\n" +
			"--edge-issuer keys when given, and every credential named by a receipt); query.json's counts;\n" +
			"with --witness-policy, the witness quorum of the checkpoint's\n" +
			"cosignatures; and consistency-proof.json when present. Exit status 0 prints \"evidence package\n" +
			"verified\" with the counts; 1 names the first failed check with its file (and line); 2 is bad usage.\n\n" +
			"What a package that verifies proves: each receipt in it was signed by the kernel and is in the log\n" +
			"under the signed checkpoint, and is inside the filter query.json records. What it cannot prove:\n" +
			"that it holds every receipt the filter selects. Only the checkpoint and the receipts are signed;\n" +
			"manifest.json, query.json and the lineage records are not, so an exporter who leaves receipts out,\n" +
			"or anyone who removes some and rewrites query.json's counts and the manifest, makes a package that\n" +
			"verifies, and no offline check can tell without the log. The count printed is the count verified.\n" +
			"An auditor who needs completeness re-queries the log with the same filter and compares the receipts\n" +
			"at leaves below the package's tree size (a new `chio evidence export` does this), or compares with\n" +
			"a second, independent export. Likewise the lineage records, which tie a receipt to a principal, are as the exporter wrote\n" +
			"them: the projections' /v1/lineage/{id}/chain confirms them.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if input == "" || vkey == "" || kernelKey == "" {
				return usageError(errors.New("--input, --vkey and --kernel-key are required (pin the keys out of band)"))
			}
			if st, err := os.Stat(input); err != nil || !st.IsDir() {
				return usageError(fmt.Errorf("--input %s is not a directory", input))
			}
			if _, err := vkeyFlag(vkey); err != nil {
				return usageError(err)
			}
			vkey = keyText(vkey)
			issuers, err := edgeIssuerKeys(edgeIssuers)
			if err != nil {
				return usageError(err)
			}
			opts := evidence.VerifyOptions{VKey: vkey, KernelKey: strings.TrimSpace(kernelKey), EdgeIssuers: issuers}
			if policyFile != "" {
				p, err := witness.LoadPolicy(policyFile)
				if err != nil {
					return usageError(fmt.Errorf("--witness-policy: %w", err))
				}
				opts.Checkpoint = func(signed []byte, log note.Verifier) ([]string, error) {
					_, names, err := witness.VerifyCheckpoint(signed, log, p)
					return names, err
				}
			}
			rep, err := evidence.Verify(input, opts)
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("evidence verify: FAILED %w", err)}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "evidence package verified: %d tool receipts (%d unreadable), %d lineage records, %d verified files; tree size %d of %s\n",
				rep.Receipts, rep.Unreadable, rep.Lineage, rep.Files, rep.TreeSize, rep.Origin)
			fmt.Fprintf(w, "each receipt is inside the filter %s; not provable offline: that these are all the receipts it selects (compare with the log or a second export)\n",
				describeFilter(rep.Filter))
			switch {
			case rep.EdgeCredentials > 0 && len(issuers) > 0:
				fmt.Fprintf(w, "edges: %d edge credentials, each issued by a pinned --edge-issuer key\n", rep.EdgeCredentials)
			case rep.EdgeCredentials > 0:
				fmt.Fprintf(w, "edges: %d edge credentials, issued by %s (not pinned: compare with the operator's issuer key, or pass --edge-issuer)\n",
					rep.EdgeCredentials, strings.Join(rep.EdgeIssuers, ", "))
			}
			if policyFile != "" {
				fmt.Fprintf(w, "witnesses: quorum met, cosigned by %s\n", strings.Join(rep.Cosigners, ", "))
			}
			if rep.ConsistencyFrom != nil {
				fmt.Fprintf(w, "consistency: tree size %d extends to %d\n", *rep.ConsistencyFrom, rep.TreeSize)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&input, "input", "", "the evidence package directory")
	cmd.Flags().StringVar(&vkey, "vkey", "", "the log's note verifier key, or a file holding it")
	cmd.Flags().StringVar(&kernelKey, "kernel-key", "", "the pinned kernel public key (64 hex)")
	cmd.Flags().StringArrayVar(&edgeIssuers, "edge-issuer", nil, "an issuer key edge credentials must be signed by (64 hex, or a file holding it, e.g. KEYS/issuer.pub; repeatable)")
	cmd.Flags().StringVar(&policyFile, "witness-policy", "", "a witness policy file: the checkpoint must carry a quorum of its witnesses' cosignatures")
	return cmd
}
