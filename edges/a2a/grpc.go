package a2a

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	a2apb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/internal/tracing"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// GRPCServerOptions are the options a grpc.Server serving the binding
// needs: the request size limit of the other bindings, a bound on the
// streams one connection runs at once (MaxGRPCConnStreams), and
// deterministic encoding, so that two subscribers of one task get the
// same bytes for the same event (Go's map order would otherwise vary the
// metadata Struct's encoding between them).
func GRPCServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(wire.MaxRequestBytes), grpc.MaxConcurrentStreams(MaxGRPCConnStreams),
		grpc.ForceServerCodec(deterministicCodec{})}
}

// GRPCTracing are the server options that trace the gRPC binding with
// Config.TracerProvider (otelgrpc's stats handler: a SERVER span per
// call, continuing the caller's traceparent); none when tracing is off.
func (e *Edge) GRPCTracing() []grpc.ServerOption {
	return tracing.GRPCServerOptions(e.cfg.TracerProvider)
}

// MaxGRPCConnStreams is the HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS of the
// gRPC server (grpc-go's default is unbounded): a connection's calls past
// it wait in the client for one to end. It bounds one connection; the
// streams a caller holds across connections are bounded by
// Config.MaxStreamsPerCaller.
const MaxGRPCConnStreams = 100

// deterministicCodec is the proto codec with deterministic marshalling.
type deterministicCodec struct{}

func (deterministicCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpc: marshal %T: not a proto message", v)
	}
	return proto.MarshalOptions{Deterministic: true}.Marshal(m)
}

func (deterministicCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("grpc: unmarshal into %T: not a proto message", v)
	}
	return proto.Unmarshal(data, m)
}

// Name is "proto": the content-subtype clients ask for.
func (deterministicCodec) Name() string { return "proto" }

// RegisterGRPC mounts the A2A 1.0 gRPC binding (lf.a2a.v1.A2AService, the
// official proto as a2a-go generates it) on s. It runs on the same core as
// JSON-RPC and REST: a request's ProtoJSON is exactly the 1.0 JSON-RPC
// params, and the core's 1.0 JSON result is the ProtoJSON of the response,
// so each call is pb → JSON → core → JSON → pb, and the bindings cannot
// drift apart. The binding speaks 1.0 only.
func (e *Edge) RegisterGRPC(s grpc.ServiceRegistrar) {
	a2apb.RegisterA2AServiceServer(s, &grpcService{e: e})
}

// grpcService implements a2apb.A2AServiceServer. The embedded
// Unimplemented server is what generated code requires; every method is
// overridden below.
type grpcService struct {
	a2apb.UnimplementedA2AServiceServer
	e *Edge
}

// Metadata keys the binding reads (gRPC lowercases every key).
var (
	mdVersion   = strings.ToLower(wire.HeaderVersion)
	mdRequestID = strings.ToLower(HeaderRequestID)
	// mdCredentials are copied into the http.Header the credential is
	// read from: the capability (authorization: Bearer or DPoP, or
	// x-chio-capability) and its proof of possession (dpop).
	mdCredentials = []string{"authorization", "x-chio-capability", "dpop"}
)

// unmarshalResult reads the core's JSON into a pb response. Unknown
// members are dropped: the card and task JSON carry Chio extensions (and
// 0.3 twins) the proto has no field for.
var unmarshalResult = protojson.UnmarshalOptions{DiscardUnknown: true}

func (g *grpcService) SendMessage(ctx context.Context, req *a2apb.SendMessageRequest) (*a2apb.SendMessageResponse, error) {
	return unary(g, ctx, wire.OpSendMessage, req, &a2apb.SendMessageResponse{})
}

func (g *grpcService) GetTask(ctx context.Context, req *a2apb.GetTaskRequest) (*a2apb.Task, error) {
	return unary(g, ctx, wire.OpGetTask, req, &a2apb.Task{})
}

func (g *grpcService) ListTasks(ctx context.Context, req *a2apb.ListTasksRequest) (*a2apb.ListTasksResponse, error) {
	return unary(g, ctx, wire.OpListTasks, req, &a2apb.ListTasksResponse{})
}

func (g *grpcService) CancelTask(ctx context.Context, req *a2apb.CancelTaskRequest) (*a2apb.Task, error) {
	return unary(g, ctx, wire.OpCancelTask, req, &a2apb.Task{})
}

func (g *grpcService) CreateTaskPushNotificationConfig(ctx context.Context, req *a2apb.TaskPushNotificationConfig) (*a2apb.TaskPushNotificationConfig, error) {
	return unary(g, ctx, wire.OpCreatePushConfig, req, &a2apb.TaskPushNotificationConfig{})
}

func (g *grpcService) GetTaskPushNotificationConfig(ctx context.Context, req *a2apb.GetTaskPushNotificationConfigRequest) (*a2apb.TaskPushNotificationConfig, error) {
	return unary(g, ctx, wire.OpGetPushConfig, req, &a2apb.TaskPushNotificationConfig{})
}

func (g *grpcService) ListTaskPushNotificationConfigs(ctx context.Context, req *a2apb.ListTaskPushNotificationConfigsRequest) (*a2apb.ListTaskPushNotificationConfigsResponse, error) {
	return unary(g, ctx, wire.OpListPushConfigs, req, &a2apb.ListTaskPushNotificationConfigsResponse{})
}

func (g *grpcService) DeleteTaskPushNotificationConfig(ctx context.Context, req *a2apb.DeleteTaskPushNotificationConfigRequest) (*emptypb.Empty, error) {
	return unary(g, ctx, wire.OpDeletePushConfig, req, &emptypb.Empty{})
}

func (g *grpcService) GetExtendedAgentCard(ctx context.Context, req *a2apb.GetExtendedAgentCardRequest) (*a2apb.AgentCard, error) {
	return unary(g, ctx, wire.OpGetExtendedAgentCard, req, &a2apb.AgentCard{})
}

func (g *grpcService) SendStreamingMessage(req *a2apb.SendMessageRequest, ss grpc.ServerStreamingServer[a2apb.StreamResponse]) error {
	return g.stream(wire.OpSendStreamingMessage, req, ss)
}

func (g *grpcService) SubscribeToTask(req *a2apb.SubscribeToTaskRequest, ss grpc.ServerStreamingServer[a2apb.StreamResponse]) error {
	return g.stream(wire.OpSubscribeToTask, req, ss)
}

// unary runs one non-streaming operation and returns resp filled from its
// result, or no message and the error's status.
func unary[R proto.Message](g *grpcService, ctx context.Context, op wire.Operation, req proto.Message, resp R) (R, error) {
	if err := g.call(ctx, op, req, resp); err != nil {
		var none R
		return none, err
	}
	return resp, nil
}

// call is one unary RPC, recorded as a "grpc" call: checks, the core's
// operation, and its JSON result decoded into resp.
func (g *grpcService) call(ctx context.Context, op wire.Operation, req, resp proto.Message) (err error) {
	ctx, rec := g.e.begin(ctx, "grpc", grpcRequestID(ctx))
	defer rec.release()
	rec.setMethod(op.String())
	defer g.recoverInto(rec, op, &err)
	rc, params, werr := g.prepare(ctx, op, req)
	if werr == nil {
		var result any
		if result, werr = g.e.do(ctx, rc, op, params); werr == nil {
			werr = decodeResult(result, resp)
		}
	}
	if werr != nil {
		rec.fail(werr)
		return grpcError(werr)
	}
	return nil
}

// stream runs SendStreamingMessage or SubscribeToTask. An error before the
// stream opens is the RPC's status; one after it ends the RPC the same way,
// after the events already sent.
func (g *grpcService) stream(op wire.Operation, req proto.Message, ss grpc.ServerStreamingServer[a2apb.StreamResponse]) (err error) {
	ctx, rec := g.e.begin(ss.Context(), "grpc", grpcRequestID(ss.Context()))
	defer rec.release()
	rec.setMethod(op.String())
	defer g.recoverInto(rec, op, &err)
	rc, params, werr := g.prepare(ctx, op, req)
	var st *stream
	if werr == nil {
		// A resubscribe names the last generation it saw as SSE does.
		st, werr = g.e.openStream(withResumeFrom(ctx, mdValue(ctx, mdLastEventID)), rc, op, params)
	}
	if werr != nil {
		rec.fail(werr)
		return grpcError(werr)
	}
	s := &grpcSink{ss: ss}
	st.run(ctx, s, g.e.cfg.KeepAlive)
	return g.streamEnd(op, s, rec)
}

// streamEnd is the status a stream that ran ends with. SSE can only stop
// writing; gRPC can say why, so a stream cut by this replica's drain
// before its task ended is UNAVAILABLE (retry elsewhere), not OK, which a
// client would read as "the task is done"; its trailer carries the last
// generation sent, the resume point of SubscribeToTask.
func (g *grpcService) streamEnd(op wire.Operation, s *grpcSink, rec *callRecord) error {
	switch {
	case s.werr != nil:
		rec.fail(s.werr)
		return grpcError(s.werr)
	case s.sendErr != nil:
		return s.sendErr // the client went away; its status is already set
	case s.handedOver:
		return status.Error(codes.Unavailable, "this replica is shutting down; subscribe to the task again (metadata "+mdLastEventID+" names the last generation sent)")
	}
	return nil
}

// recoverInto turns a panic into INTERNAL: a bug must not take the
// process (and every other call on it) down, as grpc would let it.
func (g *grpcService) recoverInto(rec *callRecord, op wire.Operation, err *error) {
	if r := recover(); r != nil {
		g.e.log.Error("a2a: panic while handling a gRPC request", "method", op.String(), "panic", fmt.Sprint(r))
		werr := wire.InternalError("internal error")
		rec.fail(werr)
		*err = grpcError(werr)
	}
}

// prepare checks a call the way serveREST does, in the same order
// (version, push off, params, caller), and returns its decoded params.
func (g *grpcService) prepare(ctx context.Context, op wire.Operation, req proto.Message) (rpcCall, any, *wire.Error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if werr := grpcVersion(md); werr != nil {
		return rpcCall{}, nil, werr
	}
	if op.PushConfig() && g.e.cfg.Push == nil {
		return rpcCall{}, nil, wire.PushNotSupported()
	}
	raw, err := protojson.Marshal(req)
	if err != nil {
		return rpcCall{}, nil, wire.InvalidParams("request: " + err.Error())
	}
	if len(raw) > wire.MaxRequestBytes {
		return rpcCall{}, nil, wire.InvalidRequest(fmt.Sprintf("request larger than %d bytes", wire.MaxRequestBytes))
	}
	// Protobuf has no repeated names, but its Struct and Value fields
	// (metadata, data parts) nest as deep as the caller likes, and a
	// Struct's keys may differ only in case: the same refusals as the
	// JSON bindings, so no binding accepts what another refuses.
	if werr := wire.CheckJSON(raw, "request"); werr != nil {
		return rpcCall{}, nil, werr
	}
	params, werr := wire.Method{Op: op, Dialect: wire.V10, Version: wire.V10}.DecodeParams(raw)
	if werr != nil {
		return rpcCall{}, nil, werr
	}
	cl, werr := g.e.grpcCaller(ctx, md)
	if werr != nil {
		return rpcCall{}, nil, werr
	}
	return rpcCall{caller: cl, dialect: grpcDialect, remote: grpcRemote(ctx)}, params, nil
}

// grpcDialect encodes every gRPC result: the binding is 1.0's.
var grpcDialect = wire.DialectOf(wire.V10)

// grpcVersion accepts a missing a2a-version or "1.0": gRPC is a 1.0
// binding (0.3's gRPC service is another proto), so absent means 1.0 here,
// unlike HTTP where it means 0.3.
func grpcVersion(md metadata.MD) *wire.Error {
	vs := md.Get(mdVersion)
	if len(vs) == 0 || strings.TrimSpace(vs[0]) == "" {
		return nil
	}
	if v, werr := wire.NegotiateVersion(vs[0], ""); werr == nil && v == wire.V10 {
		return nil
	}
	werr := wire.VersionNotSupported(strings.TrimSpace(vs[0]))
	werr.Message = fmt.Sprintf("A2A version %q is not supported on gRPC; use \"1.0\"", strings.TrimSpace(vs[0]))
	return werr
}

// grpcHeader carries the credential metadata over to the HTTP header
// names callerFrom reads, so every binding authenticates alike.
func grpcHeader(md metadata.MD) http.Header {
	h := http.Header{}
	for _, k := range mdCredentials {
		for _, v := range md.Get(k) {
			h.Add(k, v)
		}
	}
	return h
}

// grpcCaller reads a call's credential from its metadata as the HTTP
// bindings read their headers: "authorization: DPoP <capability>" with
// "dpop: <proof>", or "authorization: Bearer" / "x-chio-capability" alone.
// A proof's htm is POST and its htu the call's URL as HTTP/2 carries it:
// http, or https over TLS (the connection's), "://", the authority (see
// grpcAuthority), then the full method
// ("http://127.0.0.1:5000/lf.a2a.v1.A2AService/SendMessage").
func (e *Edge) grpcCaller(ctx context.Context, md metadata.MD) (caller, *wire.Error) {
	h := grpcHeader(md)
	method, _ := grpc.Method(ctx)
	scheme := "http"
	if p, ok := peer.FromContext(ctx); ok {
		if _, tls := p.AuthInfo.(credentials.TLSInfo); tls {
			scheme = "https"
		}
	}
	sent := ""
	if vs := md.Get(":authority"); len(vs) == 1 {
		sent = vs[0]
	}
	authority := e.grpcAuthority(sent)
	r := &http.Request{Method: http.MethodPost, Header: h, Host: authority, URL: &url.URL{Path: method}}
	p, err := dpop.FromRequest(r, scheme+"://"+authority)
	return e.callerFrom(p, err, dpop.Presents(h))
}

// grpcAuthority is the authority of a gRPC proof's htu. When the operator
// configured the gRPC interface the card advertises (Config.GRPCURL,
// --grpc-public-url), it is that host:port, whatever :authority the client
// sent: a proof made for another deployment's host is not good here (the
// HTTP bindings' htu takes its origin from Config.PublicURL the same way).
// A GRPCURL that names a port alone (":8081") takes Config.PublicURL's
// host; without a PublicURL, or without a GRPCURL, the edge does not know
// its own name, and the :authority the client sent (sent) is the one.
func (e *Edge) grpcAuthority(sent string) string {
	g := e.cfg.GRPCURL
	switch {
	case g == "":
		return sent
	case strings.HasPrefix(g, ":"):
		if e.cfg.PublicURL == "" {
			return sent
		}
		u, err := url.Parse(e.cfg.PublicURL)
		if err != nil || u.Hostname() == "" {
			return sent
		}
		return net.JoinHostPort(u.Hostname(), g[1:])
	}
	return g
}

// grpcRequestID is the caller's x-request-id metadata, under the rules of
// the HTTP header (bounded, printable ASCII), echoed in the response
// header metadata; "" for none or one not fit to log.
// mdLastEventID is the metadata a SubscribeToTask resumes from: the
// generation of the last event the client saw, as SSE's Last-Event-ID.
const mdLastEventID = "last-event-id"

// mdValue is the first value of metadata key k, or "".
func mdValue(ctx context.Context, k string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if vs := md.Get(k); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

func grpcRequestID(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	vs := md.Get(mdRequestID)
	if len(vs) == 0 || vs[0] == "" || len(vs[0]) > maxHTTPRequestID {
		return ""
	}
	id := vs[0]
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return ""
		}
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs(mdRequestID, id))
	return id
}

// decodeResult reads the core's 1.0 JSON result into resp.
func decodeResult(result any, resp proto.Message) *wire.Error {
	raw, ok := result.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(result)
		if err != nil {
			return wire.InternalError(err.Error())
		}
		raw = b
	}
	if _, ok := resp.(*a2apb.AgentCard); ok {
		var err error
		if raw, err = protoSecurity(raw); err != nil {
			return wire.InternalError("agent card: " + err.Error())
		}
	}
	if err := unmarshalResult.Unmarshal(raw, resp); err != nil {
		return wire.InternalError(fmt.Sprintf("result does not fit %s: %v", resp.ProtoReflect().Descriptor().FullName(), err))
	}
	return nil
}

// protoSecurity rewrites a JSON card's securityRequirements from the shape
// a2a-go's JSON clients parse ({"schemes":{"s":["scope"]}}) to the proto's
// (map<string, StringList>: {"schemes":{"s":{"list":["scope"]}}}).
func protoSecurity(raw json.RawMessage) (json.RawMessage, error) {
	var card map[string]json.RawMessage
	if err := json.Unmarshal(raw, &card); err != nil {
		return nil, err
	}
	reqs, ok := card["securityRequirements"]
	if !ok {
		return raw, nil
	}
	var in []struct {
		Schemes map[string][]string `json:"schemes"`
	}
	if err := json.Unmarshal(reqs, &in); err != nil {
		return nil, err
	}
	type list struct {
		List []string `json:"list"`
	}
	out := make([]map[string]map[string]list, len(in))
	for i, r := range in {
		out[i] = map[string]map[string]list{"schemes": {}}
		for k, v := range r.Schemes {
			out[i]["schemes"][k] = list{List: append([]string{}, v...)}
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	card["securityRequirements"] = b
	return json.Marshal(card)
}

// grpcSink writes a stream as gRPC messages. Keep-alives are no-ops: HTTP/2
// has its own pings, and a gRPC stream has no comment frames.
type grpcSink struct {
	ss      grpc.ServerStreamingServer[a2apb.StreamResponse]
	werr    *wire.Error // a failure to end the RPC with
	sendErr error       // the client went away
	ended   bool        // the last event closes the stream by itself
	// handedOver: the replica's drain cut the stream (handover).
	handedOver bool
}

func (s *grpcSink) event(_ string, ev json.RawMessage) error {
	msg := &a2apb.StreamResponse{}
	if werr := decodeResult(ev, msg); werr != nil {
		s.werr = werr
		return werr
	}
	if err := s.ss.Send(msg); err != nil {
		s.sendErr = err
		return err
	}
	s.ended = closesStream(msg)
	return nil
}

func (s *grpcSink) fail(werr *wire.Error) {
	if s.werr == nil {
		s.werr = werr
	}
}

func (s *grpcSink) keepAlive() error { return nil }

// handover marks the stream cut by the drain and puts the resume point in
// its trailer (metadata last-event-id, as a resubscribe sends it).
func (s *grpcSink) handover(last int64) {
	s.handedOver = true
	if last > 0 {
		s.ss.SetTrailer(metadata.Pairs(mdLastEventID, wire.GenerationEventID(last)))
	}
}

// closesStream reports whether msg ends a subscription by itself (the
// only stream it is asked of): a lone message, or a terminal task or
// status. A subscription stays open through input-required and
// auth-required, so those do not end it.
func closesStream(msg *a2apb.StreamResponse) bool {
	var st a2apb.TaskState
	switch {
	case msg.GetMessage() != nil:
		return true
	case msg.GetTask() != nil:
		st = msg.GetTask().GetStatus().GetState()
	case msg.GetStatusUpdate() != nil:
		st = msg.GetStatusUpdate().GetStatus().GetState()
	default:
		return false
	}
	switch st {
	case a2apb.TaskState_TASK_STATE_COMPLETED, a2apb.TaskState_TASK_STATE_FAILED, a2apb.TaskState_TASK_STATE_CANCELED,
		a2apb.TaskState_TASK_STATE_REJECTED:
		return true
	}
	return false
}

// grpcCode maps A2A error codes to gRPC codes as a2a-go does (the v1.0.1
// table): its client maps a status back to an A2A error only when both
// the code and the ErrorInfo reason match its own table, so matching it is
// what makes errors.Is(err, a2a.ErrTaskNotFound) work for Go clients. The
// v1.0.0 table (UNIMPLEMENTED for push, unsupported operation and version)
// would turn those into a2a-go's ErrInternalError.
func grpcCode(code int) codes.Code {
	switch code {
	case wire.CodeParseError, wire.CodeInvalidRequest, wire.CodeInvalidParams, wire.CodeContentTypeNotSupported:
		return codes.InvalidArgument
	case wire.CodeMethodNotFound:
		return codes.Unimplemented
	case wire.CodeTaskNotFound:
		return codes.NotFound
	case wire.CodeTaskNotCancelable, wire.CodePushNotSupported, wire.CodeUnsupportedOperation,
		wire.CodeExtendedCardNotConfigured, wire.CodeExtensionSupportRequired, wire.CodeVersionNotSupported:
		return codes.FailedPrecondition
	case wire.CodeUnauthenticated:
		return codes.Unauthenticated
	case wire.CodePermissionDenied:
		return codes.PermissionDenied
	case wire.CodeGenerationMismatch:
		return codes.Aborted
	case wire.CodeResourceExhausted:
		return codes.ResourceExhausted
	}
	return codes.Internal // Internal, InvalidAgentResponse and unknown codes
}

// grpcReason is the ErrorInfo reason of code where it differs on gRPC:
// a2a-go names permission denied UNAUTHORIZED, and matches reasons exactly.
func grpcReason(code int, reason string) string {
	if code == wire.CodePermissionDenied {
		return "UNAUTHORIZED"
	}
	return reason
}

// grpcError is werr as a gRPC status: its code per grpcCode (INTERNAL
// for unknown codes; UNAVAILABLE, with a RetryInfo, for an Unavailable
// error), its message, and its ErrorInfo (and BadRequest, for
// invalid params naming fields) as details.
func grpcError(werr *wire.Error) error {
	code := grpcCode(werr.Code)
	info, details := grpcDetails(werr)
	if werr.RetryAfter > 0 {
		// A server condition expected to pass: UNAVAILABLE, with the
		// delay as a RetryInfo.
		code = codes.Unavailable
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(werr.RetryAfter)})
	}
	st := status.New(code, werr.Message)
	if info == nil {
		info = &errdetails.ErrorInfo{Reason: werr.Reason(), Domain: wire.ErrorDomain}
	}
	info.Reason = grpcReason(werr.Code, info.Reason)
	if info.Reason == "" {
		info.Reason = strings.ToUpper(st.Code().String()) // a reason is required
	}
	if withDetails, err := st.WithDetails(append([]protoadapt.MessageV1{info}, details...)...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// grpcDetails converts werr.Data's typed details: its ErrorInfo, and any
// others (BadRequest) as details to attach after it.
func grpcDetails(werr *wire.Error) (*errdetails.ErrorInfo, []protoadapt.MessageV1) {
	data, _ := werr.Data.([]any)
	var info *errdetails.ErrorInfo
	var out []protoadapt.MessageV1
	for _, d := range data {
		switch d := d.(type) {
		case wire.ErrorInfo:
			if info == nil {
				info = &errdetails.ErrorInfo{Reason: d.Reason, Domain: d.Domain, Metadata: d.Metadata}
			}
		case wire.BadRequest:
			br := &errdetails.BadRequest{}
			for _, v := range d.FieldViolations {
				br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description})
			}
			out = append(out, br)
		}
	}
	return info, out
}
