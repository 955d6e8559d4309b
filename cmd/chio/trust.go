package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/schemas/dpop"
)

func newTrustCmd() *cobra.Command {
	trust := &cobra.Command{
		Use:   "trust",
		Short: "Query a projections service's trust reports",
		Args:  cobra.NoArgs,
	}
	ac := &cobra.Command{
		Use:   "authorization-context",
		Short: "The authorization-context report (chio.oauth.authorization-context-report.v1)",
		Args:  cobra.NoArgs,
	}
	ac.AddCommand(newAuthorizationContextListCmd())
	trust.AddCommand(ac)
	return trust
}

func newAuthorizationContextListCmd() *cobra.Command {
	var base, token, credential, capability, toolServer, toolName, keyFile, groupBy string
	var limit int
	var since, until uint64
	cmd := &cobra.Command{
		Use:   "list [--capability ID] [--limit N] [--url URL] [--token TOKEN|@FILE]",
		Short: "Print the authorization-context report of the governed receipts matching the filters",
		Long: "Calls GET /v1/reports/authorization-context on a projections service (chio up or chio projections)\n" +
			"and prints the report as indented JSON. The report is all or nothing: when a matching receipt cannot\n" +
			"be projected truthfully the service refuses it (422, naming the receipt) and this command exits 1 with\n" +
			"the service's message. --token is the reader's credential: a capability (its own calls and what its read\n" +
			"grants name; chio up writes an operator one to .chio/operator.token) or the service token, which may\n" +
			"also come from $" + serviceTokenEnv + ".",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return usageError(errors.New("--limit must be positive"))
			}
			u, err := url.Parse(strings.TrimRight(base, "/") + "/v1/reports/authorization-context")
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageError(fmt.Errorf("--url %q is not an http(s) URL", base))
			}
			q := url.Values{}
			for _, p := range []struct{ name, v string }{
				{"capabilityId", capability}, {"toolServer", toolServer}, {"toolName", toolName}, {"groupBy", groupBy},
			} {
				if p.v != "" {
					q.Set(p.name, p.v)
				}
			}
			if limit > 0 {
				q.Set("authorizationLimit", strconv.Itoa(limit))
			}
			if cmd.Flags().Changed("since") {
				q.Set("since", strconv.FormatUint(since, 10))
			}
			if cmd.Flags().Changed("until") {
				q.Set("until", strconv.FormatUint(until, 10))
			}
			u.RawQuery = q.Encode()
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodGet, u.String(), nil)
			if err != nil {
				return err
			}
			if rest, ok := strings.CutPrefix(credential, "@"); ok {
				b, err := os.ReadFile(rest)
				if err != nil {
					return usageError(fmt.Errorf("--token: %w", err))
				}
				credential = strings.TrimSpace(string(b))
			}
			client := &http.Client{Timeout: 2 * time.Minute}
			if token = orDefault(credential, orDefault(token, os.Getenv(serviceTokenEnv))); token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			if keyFile != "" {
				if credential == "" {
					return usageError(errors.New("--key proves possession of the --token capability's subject key: give --token"))
				}
				s, err := signerFromFiles(keyFile, credential)
				if err != nil {
					return usageError(fmt.Errorf("--key: %w", err))
				}
				client.Transport = &dpop.Transport{Signer: s}
			}
			resp, err := client.Do(req)
			if err != nil {
				return fmt.Errorf("authorization-context list: %w", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(io.LimitReader(resp.Body, 256<<20))
			if err != nil {
				return fmt.Errorf("authorization-context list: read the response: %w", err)
			}
			if resp.StatusCode/100 != 2 {
				return &exitError{code: 1, err: fmt.Errorf("authorization-context list: %s", serverError(resp.StatusCode, body))}
			}
			var out bytes.Buffer
			if err := json.Indent(&out, body, "", "  "); err != nil {
				return fmt.Errorf("authorization-context list: the response is not JSON: %w", err)
			}
			out.WriteByte('\n')
			_, err = out.WriteTo(cmd.OutOrStdout())
			return err
		},
	}
	cmd.Flags().StringVar(&base, "url", "http://127.0.0.1:8080", "base URL of the projections service")
	cmd.Flags().StringVar(&credential, "token", "", "the reader's credential: a capability or the service token, inline or @FILE")
	cmd.Flags().StringVar(&keyFile, "key", "", "the --token capability's subject key: every request carries a DPoP proof (needed when the capability can delegate)")
	cmd.Flags().StringVar(&token, "service-token", "", "the service token (default $"+serviceTokenEnv+"); --token takes either")
	cmd.Flags().StringVar(&capability, "capability", "", "only receipts of this capability id")
	cmd.Flags().IntVar(&limit, "limit", 0, "most rows to print (1–200; default the service's, 50); the summary counts every match")
	cmd.Flags().StringVar(&toolServer, "tool-server", "", "only receipts of this tool server")
	cmd.Flags().StringVar(&toolName, "tool-name", "", "only receipts of this tool")
	cmd.Flags().Uint64Var(&since, "since", 0, "only receipts at or after this Unix time (seconds)")
	cmd.Flags().Uint64Var(&until, "until", 0, "only receipts at or before this Unix time (seconds)")
	cmd.Flags().StringVar(&groupBy, "group-by", "", "identity: add each caller's summary (an identity provider's subject, or a capability's subject key)")
	return cmd
}

// serverError renders an error response: the service's {"error", "code"}
// when it sent one, else the status and the start of the body.
func serverError(status int, body []byte) string {
	var e struct {
		Error     string `json:"error"`
		Code      string `json:"code"`
		Param     string `json:"param"`
		ReceiptID string `json:"receiptId"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg := fmt.Sprintf("%s (%s, HTTP %d)", e.Error, e.Code, status)
		if e.Param != "" {
			msg += " [parameter " + e.Param + "]"
		}
		return msg
	}
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	return fmt.Sprintf("HTTP %d: %s", status, text)
}
