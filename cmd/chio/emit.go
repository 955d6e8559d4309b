package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
)

func newEmitCmd() *cobra.Command {
	var natsURL, server, tool string
	var na natsauth.Client
	var ef edgeFlags
	var count int
	cmd := &cobra.Command{
		Use:   "emit --nats URL [--count N]",
		Short: "Publish sample tool calls' decision and outcome events, as an edge would, and print their receipt ids",
		Long: "Publishes N calls to CHIO_EVENTS, alternating an allowed call (decision, then its completed outcome)\n" +
			"and a denied one, each with a fresh UUIDv7 receipt id, waiting for every PubAck. For trying the ledger\n" +
			"before an edge is running; the receipt ids are printed one per line.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if count < 1 {
				return usageError(errors.New("--count must be at least 1"))
			}
			signer, err := ef.edgeSigner()
			if err != nil {
				return err
			}
			nc, js, err := connectNATS(natsURL, "chio-emit", natsauth.Edge, &na)
			if err != nil {
				return err
			}
			defer nc.Close()
			for i := 0; i < count; i++ {
				verdict := schemas.VerdictAllow
				if i%2 == 1 {
					verdict = schemas.VerdictDeny
				}
				id, err := emitCall(cmd.Context(), js, signer, server, tool, verdict)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL")
	registerNATSAuth(cmd.Flags(), &na)
	registerEdgeSignerFlags(cmd.Flags(), &ef)
	cmd.Flags().IntVar(&count, "count", 2, "calls to publish")
	cmd.Flags().StringVar(&server, "tool-server", "hello", "tool server id")
	cmd.Flags().StringVar(&tool, "tool", "hello_task", "tool name")
	return cmd
}

// emitCall publishes one call's events the way an edge does: the decision,
// then (when allowed) the outcome, each acknowledged before the next.
// emitCall publishes one call's events, signed by signer if it is not nil.
func emitCall(ctx context.Context, js jetstream.JetStream, signer *schemas.EdgeSigner, server, tool string, verdict schemas.Verdict) (string, error) {
	id := uuid.Must(uuid.NewV7()).String()
	now := uint64(time.Now().Unix())
	d := schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(id), ReceiptID: id,
		Timestamp: now, CapabilityID: "demo-capability", ToolServer: server, ToolName: tool,
		Parameters: json.RawMessage(`{"message":"hello"}`), Decision: schemas.Decision{Verdict: verdict},
		PolicyHash: schemas.SHA256Hex([]byte("demo-policy")), EdgeID: "chio-emit"}
	if signer != nil {
		c := signer.Credential()
		d.EdgeID, d.EdgeKey, d.EdgeCredentialID = c.EdgeID, c.PublicKey, c.ID
	}
	if verdict == schemas.VerdictDeny {
		d.Decision.Reason, d.Decision.Guard = "the demo denies every other call", "demo"
	}
	if err := publishEvent(ctx, js, signer, schemas.SubjectDecision, d.EventID, &d); err != nil {
		return "", err
	}
	if verdict == schemas.VerdictAllow {
		o := schemas.OutcomeEvent{Schema: schemas.OutcomeEventSchema, EventID: schemas.OutcomeEventID(id), ReceiptID: id,
			Timestamp: now, Outcome: schemas.OutcomeCompleted, ContentHash: schemas.SHA256Hex([]byte(`"hello"`))}
		if err := publishEvent(ctx, js, signer, schemas.SubjectOutcome, o.EventID, &o); err != nil {
			return "", err
		}
	}
	return id, nil
}

func publishEvent(ctx context.Context, js jetstream.JetStream, signer *schemas.EdgeSigner, subject, id string, v interface{ Validate() error }) error {
	if err := v.Validate(); err != nil {
		return err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: subject, Data: raw, Header: nats.Header{}}
	if signer != nil {
		cred, sig := signer.Sign(subject, raw)
		msg.Header.Set(schemas.HeaderEdgeCredential, cred)
		msg.Header.Set(schemas.HeaderEdgeSignature, sig)
	}
	if _, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("publish %s: %w", id, err)
	}
	return nil
}
