package main

import (
	"context"
	"encoding/json"
	"github.com/chio-ledger/chio/internal/natsauth"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// chio up serves the gRPC binding by default, one port above --listen
// (here both are port 0), lists it in the card, serves a call on it under
// the dev capability, and stops cleanly.
func TestUpServesGRPC(t *testing.T) {
	grpcRE := regexp.MustCompile(`chio up: gRPC +([0-9.:]+) `)
	cardRE := regexp.MustCompile(`agent card +(http://[0-9.:]+)/`)
	out, stop := startCommand(t, grpcRE, "up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "none")
	addr, base := grpcRE.FindStringSubmatch(out)[1], cardRE.FindStringSubmatch(out)[1]

	resp, err := http.Get(base + "/.well-known/agent-card.json")
	if err != nil {
		t.Fatal(err)
	}
	var card struct {
		SupportedInterfaces []struct{ URL, ProtocolBinding, ProtocolVersion string } `json:"supportedInterfaces"`
	}
	err = json.NewDecoder(resp.Body).Decode(&card)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, i := range card.SupportedInterfaces {
		found = found || (i.ProtocolBinding == "GRPC" && i.URL == addr && i.ProtocolVersion == "1.0")
	}
	if !found {
		t.Fatalf("no GRPC interface at %s in %+v", addr, card.SupportedInterfaces)
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := pb.NewA2AServiceClient(conn).SendMessage(ctx, &pb.SendMessageRequest{Message: &pb.Message{
		MessageId: "g1", Role: pb.Role_ROLE_USER, Parts: []*pb.Part{{Content: &pb.Part_Text{Text: "world"}}}}})
	if err != nil || res.GetTask().GetStatus().GetState() != pb.TaskState_TASK_STATE_COMPLETED {
		t.Fatalf("send over gRPC: %v %v", res, err)
	}
	// Stopping ends the gRPC server with the rest (GracefulStop in the
	// drain); what the ledger reports about a stop this early is not this
	// test's business, only that the command ends.
	if err := stop(); err != nil && strings.Contains(err.Error(), "did not stop") {
		t.Fatal(err)
	}
}

// chio edge a2a serves gRPC only when asked, advertising --public-url's
// host with the gRPC port, and authenticates gRPC callers like HTTP ones.
func TestEdgeA2AServesGRPC(t *testing.T) {
	up := startUp(t)
	re := regexp.MustCompile(`chio edge a2a: gRPC 127\.0\.0\.1:([0-9]+) \(A2A 1\.0, advertised as ([^)]+)\)`)
	out, _ := startCommand(t, re, "edge", "a2a", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "grpc-edge"), "--edge-credential", up.credFile("grpc-edge"), "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
		"--public-url", "https://edge.example", "--issuer-pub", filepath.Join(up.dir, "keys", issuerPubFile))
	m := re.FindStringSubmatch(out)
	if m[2] != "edge.example:"+m[1] {
		t.Fatalf("advertised %s, want edge.example:%s", m[2], m[1])
	}
	conn, err := grpc.NewClient("127.0.0.1:"+m[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewA2AServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := &pb.SendMessageRequest{Message: &pb.Message{MessageId: "g2", Role: pb.Role_ROLE_USER, Parts: []*pb.Part{{Content: &pb.Part_Text{Text: "world"}}}}}
	if _, err := client.SendMessage(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("tokenless send: %v", err)
	}
	tok, err := os.ReadFile(filepath.Join(up.dir, "dev-capability.token"))
	if err != nil {
		t.Fatal(err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "x-chio-capability", strings.TrimSpace(string(tok)))
	if res, err := client.SendMessage(authed, req); err != nil || res.GetTask().GetStatus().GetState() != pb.TaskState_TASK_STATE_COMPLETED {
		t.Fatalf("send with a capability: %v %v", res, err)
	}
}

// The dev capability never reaches the network over gRPC either.
func TestUpRefusesPublicGRPCWithDevCapability(t *testing.T) {
	_, err := chio(context.Background(), "up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "none", "--grpc-listen", "0.0.0.0:0")
	if err == nil || !strings.Contains(err.Error(), "--grpc-listen 0.0.0.0:0 is not a loopback address") {
		t.Fatalf("err = %v", err)
	}
}
