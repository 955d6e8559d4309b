package a2a

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	pb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// grpcListeners opens each replica's gRPC listener before the edge is
// built, so the card can advertise its address (Config.GRPCURL).
type grpcListeners struct{ lns []net.Listener }

func (g *grpcListeners) configure(t testing.TB) func(*Config, jetstream.JetStream) {
	return func(c *Config, _ jetstream.JetStream) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.GRPCURL = ln.Addr().String()
		g.lns = append(g.lns, ln)
	}
}

// serve runs a real grpc.Server per replica of cl on its listener.
func (g *grpcListeners) serve(t testing.TB, cl *cluster) {
	for i, e := range cl.raw {
		s := grpc.NewServer(GRPCServerOptions()...)
		e.RegisterGRPC(s)
		go func() { _ = s.Serve(g.lns[i]) }()
		t.Cleanup(s.Stop)
	}
}

// grpcBearer presents a capability as gRPC metadata and counts the calls
// that carried it, which proves the client spoke gRPC.
type grpcBearer struct {
	tok  string
	used *atomic.Int64
}

func (b grpcBearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	b.used.Add(1)
	return map[string]string{"authorization": "Bearer " + b.tok}, nil
}
func (grpcBearer) RequireTransportSecurity() bool { return false }

// grpcSDKClient is the a2a-go client built from the edge's card with its
// gRPC transport preferred; tok "" sends no credential.
func grpcSDKClient(t *testing.T, httpURL, tok string) (*a2aclient.Client, *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	card, err := agentcard.DefaultResolver.Resolve(ctx, httpURL)
	if err != nil {
		t.Fatalf("resolve card: %v", err)
	}
	used := &atomic.Int64{}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if tok != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(grpcBearer{tok: tok, used: used}))
	}
	c, err := a2aclient.NewFromCard(ctx, card, a2agrpc.WithGRPCTransport(opts...),
		a2aclient.WithConfig(a2aclient.Config{PreferredTransports: []sdk.TransportProtocol{sdk.TransportProtocolGRPC}}))
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c, used
}

// rawGRPC is the generated client on its own, for what the SDK hides:
// status codes, details, metadata.
func rawGRPC(t *testing.T, addr string) pb.A2AServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewA2AServiceClient(conn)
}

// grpcStatusOf is err's gRPC code and its ErrorInfo (nil if none).
func grpcStatusOf(t *testing.T, err error) (codes.Code, *errdetails.ErrorInfo, *errdetails.BadRequest) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("not a gRPC status: %v", err)
	}
	var info *errdetails.ErrorInfo
	var br *errdetails.BadRequest
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.BadRequest:
			br = d
		}
	}
	return st.Code(), info, br
}

// The official a2a-go client over the gRPC binding, against a real edge,
// kernel and JetStream: every operation, and errors mapped back to the
// SDK's sentinel errors.
func TestGRPCInterop(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", withPush(t), g.configure(t))
	g.serve(t, cl)
	grpcAddr := g.lns[0].Addr().String()
	tok := token(t, agentKey, "cap-grpc")
	c, used := grpcSDKClient(t, cl.edges[0].URL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("card", func(t *testing.T) { checkGRPCInterface(t, cl.edges[0].URL, grpcAddr) })
	var taskID sdk.TaskID
	t.Run("send get list", func(t *testing.T) { taskID = grpcSendGetList(ctx, t, c) })
	t.Run("send streaming", func(t *testing.T) { grpcStreaming(ctx, t, cl, c) })
	t.Run("subscribe", func(t *testing.T) { grpcSubscribe(ctx, t, cl, c) })
	t.Run("push configs and cancel", func(t *testing.T) { grpcPushAndCancel(ctx, t, c) })
	t.Run("errors", func(t *testing.T) { grpcErrors(ctx, t, cl, c, rawGRPC(t, grpcAddr), tok, taskID) })
	if used.Load() == 0 {
		t.Fatal("the client never called over gRPC")
	}
}

func checkGRPCInterface(t *testing.T, httpURL, grpcAddr string) {
	card, err := agentcard.DefaultResolver.Resolve(context.Background(), httpURL)
	if err != nil {
		t.Fatal(err)
	}
	var bindings []string
	for _, i := range card.SupportedInterfaces {
		bindings = append(bindings, string(i.ProtocolBinding)+"@"+string(i.ProtocolVersion))
		if i.ProtocolBinding == sdk.TransportProtocolGRPC && (i.URL != grpcAddr || i.ProtocolVersion != "1.0") {
			t.Fatalf("gRPC interface %+v, want %s 1.0", i, grpcAddr)
		}
	}
	if got := strings.Join(bindings, ","); got != "JSONRPC@1.0,HTTP+JSON@1.0,GRPC@1.0,JSONRPC@0.3,HTTP+JSON@0.3" {
		t.Fatalf("interfaces %s", got)
	}
}

func grpcSendGetList(ctx context.Context, t *testing.T, c *a2aclient.Client) sdk.TaskID {
	res, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("world")), Metadata: helloTarget})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*sdk.Task)
	if !ok || task.Status.State != sdk.TaskStateCompleted || len(task.Artifacts) != 1 || len(task.History) == 0 {
		t.Fatalf("send: %T %+v", res, res)
	}
	receipt := chioMetaOf(t, task.Metadata)["receiptId"]
	if receipt == nil || receipt == "" {
		t.Fatalf("no receipt in %v", task.Metadata)
	}
	zero := 0
	got, err := c.GetTask(ctx, &sdk.GetTaskRequest{ID: task.ID, HistoryLength: &zero})
	if err != nil || got.Status.State != sdk.TaskStateCompleted || len(got.History) != 0 || chioMetaOf(t, got.Metadata)["receiptId"] != receipt {
		t.Fatalf("get: %+v %v", got, err)
	}
	list, err := c.ListTasks(ctx, &sdk.ListTasksRequest{Status: sdk.TaskStateCompleted})
	if err != nil || len(list.Tasks) != 1 || list.Tasks[0].ID != task.ID {
		t.Fatalf("list: %+v %v", list, err)
	}
	return task.ID
}

// grpcStreaming streams a tool's chunks: the gate is opened beforehand,
// so the stream is read to its end with no timing involved.
func grpcStreaming(ctx context.Context, t *testing.T, cl *cluster, c *a2aclient.Client) {
	cl.step.open(stepChunks)
	evs, err := collect(t, c.SendStreamingMessage(ctx, &sdk.SendMessageRequest{
		Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("go")), Metadata: stepTarget}), nil)
	if err != nil {
		t.Fatalf("stream: %v after %v", err, eventJSON(t, evs))
	}
	checkStepStream(t, evs)
}

// checkStepStream checks a step_task stream: the task, each chunk as an
// artifact update, and a completed status at the end.
func checkStepStream(t *testing.T, evs []sdk.Event) {
	t.Helper()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	if _, ok := evs[0].(*sdk.Task); !ok {
		t.Fatalf("first event %T", evs[0])
	}
	artifacts := 0
	for _, ev := range evs {
		if _, ok := ev.(*sdk.TaskArtifactUpdateEvent); ok {
			artifacts++
		}
	}
	last, ok := evs[len(evs)-1].(*sdk.TaskStatusUpdateEvent)
	if artifacts != stepChunks || !ok || last.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("events: %v", eventJSON(t, evs))
	}
}

// grpcSubscribe subscribes to a task waiting on its tool, then lets the
// tool go once the subscription delivered the task.
func grpcSubscribe(ctx context.Context, t *testing.T, cl *cluster, c *a2aclient.Client) {
	id := grpcSendImmediately(ctx, t, c)
	first := make(chan string, 1)
	done := make(chan struct{})
	var evs []sdk.Event
	var err error
	go func() {
		defer close(done)
		evs, err = collect(t, c.SubscribeToTask(ctx, &sdk.SubscribeToTaskRequest{ID: id}), first)
	}()
	select {
	case got := <-first:
		if got != string(id) {
			t.Errorf("subscribed to %s, got %s", id, got)
		}
	case <-done:
	}
	cl.step.open(stepChunks)
	<-done
	if err != nil {
		t.Fatalf("subscribe: %v after %v", err, eventJSON(t, evs))
	}
	checkStepStream(t, evs)
}

// grpcSendImmediately starts a step_task, which waits for its gate.
func grpcSendImmediately(ctx context.Context, t *testing.T, c *a2aclient.Client) sdk.TaskID {
	t.Helper()
	res, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("x")),
		Metadata: stepTarget, Config: &sdk.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*sdk.Task)
	if !ok || task.Status.State.Terminal() {
		t.Fatalf("returnImmediately: %+v", res)
	}
	return task.ID
}

// grpcPushAndCancel manages push configs of a running task, then cancels
// it: the step tool waits on its gate until the cancel stops it.
func grpcPushAndCancel(ctx context.Context, t *testing.T, c *a2aclient.Client) {
	id := grpcSendImmediately(ctx, t, c)
	_, hook := newReceiver(t, 0)
	cfg, err := c.CreateTaskPushConfig(ctx, &sdk.PushConfig{TaskID: id, ID: "hook-1", URL: hook, Token: "tok-1",
		Auth: &sdk.PushAuthInfo{Scheme: "Bearer", Credentials: "s3cret"}})
	if err != nil || cfg.ID != "hook-1" || cfg.URL != hook || cfg.TaskID != id {
		t.Fatalf("create: %+v %v", cfg, err)
	}
	got, err := c.GetTaskPushConfig(ctx, &sdk.GetTaskPushConfigRequest{TaskID: id, ID: "hook-1"})
	if err != nil || got.Token != "tok-1" || got.Auth == nil || got.Auth.Scheme != "Bearer" {
		t.Fatalf("get: %+v %v", got, err)
	}
	if list, err := c.ListTaskPushConfigs(ctx, &sdk.ListTaskPushConfigRequest{TaskID: id}); err != nil || len(list) != 1 || list[0].ID != "hook-1" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := c.DeleteTaskPushConfig(ctx, &sdk.DeleteTaskPushConfigRequest{TaskID: id, ID: "hook-1"}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if list, err := c.ListTaskPushConfigs(ctx, &sdk.ListTaskPushConfigRequest{TaskID: id}); err != nil || len(list) != 0 {
		t.Fatalf("list after delete: %+v %v", list, err)
	}
	if _, err := c.GetTaskPushConfig(ctx, &sdk.GetTaskPushConfigRequest{TaskID: id, ID: "hook-1"}); err == nil {
		t.Fatal("get after delete succeeded")
	}
	task, err := c.CancelTask(ctx, &sdk.CancelTaskRequest{ID: id})
	if err != nil || task.Status.State != sdk.TaskStateCanceled {
		t.Fatalf("cancel: %+v %v", task, err)
	}
	if _, err := c.CancelTask(ctx, &sdk.CancelTaskRequest{ID: id}); !errors.Is(err, sdk.ErrTaskNotCancelable) {
		t.Fatalf("second cancel: %v", err)
	}
}

func grpcErrors(ctx context.Context, t *testing.T, cl *cluster, c *a2aclient.Client, raw pb.A2AServiceClient, tok string, done sdk.TaskID) {
	unknown := sdk.TaskID("0190f3c2-7a1b-7c3d-9e4f-0a1b2c3d4e5f")
	if _, err := c.GetTask(ctx, &sdk.GetTaskRequest{ID: unknown}); !errors.Is(err, sdk.ErrTaskNotFound) {
		t.Fatalf("unknown task: %v", err)
	}
	again := sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("more"))
	again.TaskID = done
	if _, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: again, Metadata: helloTarget}); !errors.Is(err, sdk.ErrUnsupportedOperation) {
		t.Fatalf("send to a terminal task: %v", err)
	}
	if _, err := collect(t, c.SubscribeToTask(ctx, &sdk.SubscribeToTaskRequest{ID: done}), nil); !errors.Is(err, sdk.ErrUnsupportedOperation) {
		t.Fatalf("subscribe to a terminal task: %v", err)
	}
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
	_, err := raw.GetTask(authed, &pb.GetTaskRequest{Id: string(unknown)})
	if code, info, _ := grpcStatusOf(t, err); code != codes.NotFound || info == nil || info.Reason != "TASK_NOT_FOUND" ||
		info.Domain != wire.ErrorDomain || info.Metadata["taskId"] != string(unknown) {
		t.Fatalf("unknown task: %v %v", code, info)
	}
	_, err = raw.SendMessage(authed, &pb.SendMessageRequest{})
	if code, info, br := grpcStatusOf(t, err); code != codes.InvalidArgument || info == nil || info.Reason != "INVALID_PARAMS" ||
		br == nil || len(br.FieldViolations) == 0 || br.FieldViolations[0].Field != "message" {
		t.Fatalf("send without a message: %v %v %v", code, info, br)
	}
	_, err = raw.GetTask(metadata.AppendToOutgoingContext(authed, "a2a-version", "0.3"), &pb.GetTaskRequest{Id: string(done)})
	if code, info, _ := grpcStatusOf(t, err); code != codes.FailedPrecondition || info == nil || info.Reason != "VERSION_NOT_SUPPORTED" {
		t.Fatalf("a2a-version 0.3: %v %v", code, info)
	}
	// No credential, or one that is not a capability, on an edge without
	// a dev token: UNAUTHENTICATED, which the SDK maps back.
	anon, _ := grpcSDKClient(t, cl.edges[0].URL, "")
	if _, err := anon.GetTask(ctx, &sdk.GetTaskRequest{ID: done}); !errors.Is(err, sdk.ErrUnauthenticated) {
		t.Fatalf("no credential: %v", err)
	}
	_, err = raw.GetTask(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer not-a-capability"), &pb.GetTaskRequest{Id: string(done)})
	if code, info, _ := grpcStatusOf(t, err); code != codes.Unauthenticated || info == nil || info.Reason != "UNAUTHENTICATED" {
		t.Fatalf("bad credential: %v %v", code, info)
	}
	if n := cl.tool.runs.Load(); n != 1 {
		t.Fatalf("the hello tool ran %d times; refused calls must not run it", n)
	}
}

// With push off, the push-config methods are refused whatever their
// params; an edge with a dev token serves tokenless gRPC callers under it.
func TestGRPCPushOffAndDevToken(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, token(t, agentKey, "cap-grpc-dev"), g.configure(t))
	g.serve(t, cl)
	c, _ := grpcSDKClient(t, cl.edges[0].URL, "")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.SendMessage(ctx, &sdk.SendMessageRequest{Message: sdk.NewMessage(sdk.MessageRoleUser, sdk.NewTextPart("world")), Metadata: helloTarget})
	if task, ok := res.(*sdk.Task); err != nil || !ok || task.Status.State != sdk.TaskStateCompleted {
		t.Fatalf("tokenless send: %+v %v", res, err)
	}
	if _, err := c.CreateTaskPushConfig(ctx, &sdk.PushConfig{TaskID: "t", URL: "https://example.com/hook"}); !errors.Is(err, sdk.ErrPushNotificationNotSupported) {
		t.Fatalf("create with push off: %v", err)
	}
	if _, err := c.ListTaskPushConfigs(ctx, &sdk.ListTaskPushConfigRequest{TaskID: "t"}); !errors.Is(err, sdk.ErrPushNotificationNotSupported) {
		t.Fatalf("list with push off: %v", err)
	}
}

// Every A2A error code has the gRPC code a2a-go's client maps back to the
// same error, and an ErrorInfo in the A2A domain.
func TestGRPCErrorStatus(t *testing.T) {
	cases := []struct {
		werr   *wire.Error
		code   codes.Code
		reason string
	}{
		{wire.TaskNotFound("t1"), codes.NotFound, "TASK_NOT_FOUND"},
		{wire.TaskNotCancelable("t1", wire.StateCompleted), codes.FailedPrecondition, "TASK_NOT_CANCELABLE"},
		{wire.PushNotSupported(), codes.FailedPrecondition, "PUSH_NOTIFICATION_NOT_SUPPORTED"},
		{wire.UnsupportedOperation("no"), codes.FailedPrecondition, "UNSUPPORTED_OPERATION"},
		{wire.ContentTypeNotSupported("image/png"), codes.InvalidArgument, "CONTENT_TYPE_NOT_SUPPORTED"},
		{wire.InvalidAgentResponse("bad"), codes.Internal, "INVALID_AGENT_RESPONSE"},
		{wire.ExtendedCardNotConfigured(), codes.FailedPrecondition, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"},
		{wire.ExtensionSupportRequired("urn:x"), codes.FailedPrecondition, "EXTENSION_SUPPORT_REQUIRED"},
		{wire.VersionNotSupported("9.9"), codes.FailedPrecondition, "VERSION_NOT_SUPPORTED"},
		{wire.InvalidParams("", wire.FieldViolation{Field: "message", Description: "is required"}), codes.InvalidArgument, "INVALID_PARAMS"},
		{wire.MethodNotFound("Nope"), codes.Unimplemented, "METHOD_NOT_FOUND"},
		{wire.InternalError("boom"), codes.Internal, "INTERNAL_ERROR"},
		{wire.Unauthenticated("who"), codes.Unauthenticated, "UNAUTHENTICATED"},
		{wire.PermissionDenied("no"), codes.PermissionDenied, "UNAUTHORIZED"},
		// The conflict code, whether or not wire knows it yet: ABORTED,
		// with wire's reason or the code's name.
		{&wire.Error{Code: -32010, Message: "generation mismatch"}, codes.Aborted, ""},
		{&wire.Error{Code: -32099, Message: "unknown"}, codes.Internal, "INTERNAL"},
	}
	for _, c := range cases {
		code, info, br := grpcStatusOf(t, grpcError(c.werr))
		if code != c.code || info == nil || info.Reason == "" || (c.reason != "" && info.Reason != c.reason) || info.Domain != wire.ErrorDomain {
			t.Errorf("%d: %v %v, want %v %s", c.werr.Code, code, info, c.code, c.reason)
		}
		if st, _ := status.FromError(grpcError(c.werr)); st.Message() != c.werr.Message {
			t.Errorf("%d: message %q", c.werr.Code, st.Message())
		}
		if c.werr.Code == wire.CodeInvalidParams && (br == nil || br.FieldViolations[0].Field != "message") {
			t.Errorf("invalid params without its field violation: %v", br)
		}
	}
}

// A gRPC SubscribeToTask resumes from the last-event-id metadata like SSE
// from Last-Event-ID: a finished task replays what came after it, through
// its terminal status; without it, a finished task has nothing to stream.
func TestGRPCResume(t *testing.T) {
	var g grpcListeners
	cl := startCluster(t, 1, "", g.configure(t))
	g.serve(t, cl)
	tok := token(t, agentKey, "cap-grpc-resume")
	raw := rawGRPC(t, cl.raw[0].cfg.GRPCURL)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
	msg := &pb.Message{MessageId: "m-resume", Role: pb.Role_ROLE_USER, Parts: []*pb.Part{{Content: &pb.Part_Text{Text: "world"}}}}
	meta, _ := structpb.NewStruct(map[string]any{"chio": map[string]any{"targetSkillId": "hello_task"}})
	res, err := raw.SendMessage(ctx, &pb.SendMessageRequest{Message: msg, Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	task := res.GetTask()
	if task.GetStatus().GetState() != pb.TaskState_TASK_STATE_COMPLETED {
		t.Fatalf("send: %v", task)
	}
	end := int64(task.GetMetadata().GetFields()[wire.GenerationKey].GetNumberValue())
	if end < 2 {
		t.Fatalf("generation %d", end)
	}
	st, err := raw.SubscribeToTask(metadata.AppendToOutgoingContext(ctx, "last-event-id", strconv.FormatInt(end-1, 10)), &pb.SubscribeToTaskRequest{Id: task.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	var got []*pb.StreamResponse
	for {
		ev, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("resume: %v after %d events", err, len(got))
		}
		got = append(got, ev)
	}
	if len(got) != 1 || got[0].GetStatusUpdate().GetStatus().GetState() != pb.TaskState_TASK_STATE_COMPLETED ||
		int64(got[0].GetStatusUpdate().GetMetadata().GetFields()[wire.GenerationKey].GetNumberValue()) != end {
		t.Fatalf("resumed from %d: %v", end-1, got)
	}
	st, err = raw.SubscribeToTask(ctx, &pb.SubscribeToTaskRequest{Id: task.GetId()})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("subscribe to a finished task without last-event-id: %v", err)
	}
}
