package a2a

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// The stdio binding: the hello-a2a profile, JSON-RPC one request per line.

// ServeStdio runs the hello-a2a stdio profile: one JSON-RPC request per
// line in, one response per line out, as the holder of the edge's dev
// capability (Config.DevToken). A capability the kernel refuses at the
// start is an error; one refused later (expired, revoked) gets -31401,
// with a deny receipt for a send. A line over the size limit is answered
// with -32600 and skipped; the loop goes on.
//
// The process holds the capability, but a capability that must be proven
// (one that can delegate, a dpop_required grant, --require-dpop) is
// honoured only with a proof of possession of its subject key, and stdio
// has no HTTP request to bind an RFC 9449 proof to: each call carries a
// chio.dpop_proof.v1 (dpop.Signer.ToolProof) as the JSON object
// params.metadata.chio.dpopProof (or params.message.metadata.chio.dpopProof;
// both at once are refused as malformed). A call without one is refused
// (missing_proof), with its deny receipt for a send. The proof names the
// one operation its call performs, and is good for nothing else:
//
//   - message/send (or tasks/send), which runs its tool in the call: the
//     tool call, as over MCP: the skill's server and tool, and the
//     arguments the message resolves to (the kernel checks it as it
//     decides the call).
//   - tasks/get that runs a deferred task (the first get after
//     message/stream): that task's tool call, as message/send's. The edge
//     tells the two gets apart by the proof's tool_server: a proof that
//     names a tool reads and runs a task that is waiting to run (else it
//     is refused, wrong_call); one that names the a2a operation reads the
//     task and leaves a waiting task waiting.
//   - every other method (tasks/get, tasks/list, tasks/cancel,
//     message/stream, the push-config methods, the extended card), which
//     runs no tool: the operation itself, StdioOperation(method, params):
//     tool_server "a2a", tool_name the JSON-RPC method name exactly as
//     sent, and action_hash the SHA-256 hex of the RFC 8785 form of the
//     params object as sent, less the proof: the member dpopProof is
//     removed from params.metadata.chio and from
//     params.message.metadata.chio, then each of those chio objects that
//     is empty is removed, then each of those metadata objects that is
//     empty (absent or null params are {}). A client signs its params
//     before it adds the proof, so the hash is the one of the params it
//     built; a proof for a tool call, or for another method or other
//     params, is refused (wrong_call).
func (e *Edge) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	var cerr *wire.Error
	if e.cfg.DevToken == "" {
		cerr = wire.Unauthenticated("the stdio edge has no capability to act under")
	} else if _, d := e.kernel.Held(e.cfg.DevToken); d != nil {
		return fmt.Errorf("a2a stdio: the configured capability is refused at %s: %s", d.Guard, d.Reason)
	}
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriter(out)
	// Lines are read on their own goroutine so that a stop (SIGTERM) ends
	// the session while it waits for input; that reader is left blocked
	// in Read, which ends with the process.
	type read struct {
		line    []byte
		tooLong bool
		err     error
	}
	lines := make(chan read)
	go func() {
		for {
			line, tooLong, err := readLine(r, wire.MaxRequestBytes)
			select {
			case lines <- read{line, tooLong, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var next read
		select {
		case next = <-lines:
		case <-ctx.Done():
			return nil // a requested stop, not a failure
		}
		line, tooLong, err := next.line, next.tooLong, next.err
		if err != nil && err != io.EOF {
			return fmt.Errorf("stdio: read: %w", err)
		}
		var resp []byte
		switch {
		case tooLong:
			werr := wire.InvalidRequest(fmt.Sprintf("request larger than %d bytes", wire.MaxRequestBytes))
			_, rec := e.begin(ctx, "stdio", "")
			rec.fail(werr)
			rec.release()
			resp = wire.EncodeError(nil, werr)
		case len(strings.TrimSpace(string(line))) > 0:
			lctx, rec := e.begin(ctx, "stdio", "")
			resp, _ = e.handleJSONRPC(lctx, rpcCall{caller: caller{token: e.cfg.DevToken}, negotiated: wire.V03, stdio: true}, line, cerr)
			rec.release()
		}
		if resp != nil {
			if _, werr := w.Write(append(resp, '\n')); werr != nil {
				return fmt.Errorf("stdio: write: %w", werr)
			}
			if werr := w.Flush(); werr != nil {
				return fmt.Errorf("stdio: flush: %w", werr)
			}
		}
		if err == io.EOF || ctx.Err() != nil {
			return nil
		}
	}
}

// metaDPoPProof is the member of metadata.chio that carries a stdio
// call's chio.dpop_proof.v1.
const metaDPoPProof = "dpopProof"

// StdioProofServer is the tool_server a stdio call's proof names for an
// operation that runs no tool (StdioOperation).
const StdioProofServer = "a2a"

// StdioOperation is what the chio.dpop_proof.v1 of a stdio call that runs
// no tool must name (ServeStdio): tool server StdioProofServer, tool name
// method as sent, and as arguments params (the JSON-RPC params object) in
// RFC 8785 form, without the proof: the member dpopProof of
// params.metadata.chio and of params.message.metadata.chio is removed,
// then those chio objects that are empty, then those metadata objects that
// are empty. A client calls it on the params it built, before it adds the
// proof, and signs the result:
//
//	op, err := a2a.StdioOperation("tasks/get", params)
//	proof, err := signer.ToolProof(op.ToolServer, op.ToolName, op.Arguments)
//	// then set params.metadata.chio.dpopProof to the proof
//
// params must be a JSON object (absent or null is {}) with an RFC 8785
// form (no duplicate member, no number out of range).
func StdioOperation(method string, params json.RawMessage) (dpop.Call, error) {
	args, err := withoutProof(params)
	if err != nil {
		return dpop.Call{}, err
	}
	return dpop.Call{ToolServer: StdioProofServer, ToolName: method, Arguments: args}, nil
}

// withoutProof is params as StdioOperation hashes them.
func withoutProof(params json.RawMessage) (json.RawMessage, error) {
	if p := bytes.TrimSpace(params); len(p) == 0 || string(p) == "null" {
		return json.RawMessage("{}"), nil
	}
	// Refused first, so that decoding into maps (which keeps the last of
	// two equal members) cannot make two different requests hash alike.
	if _, err := schemas.CanonicalizeJSON(params); err != nil {
		return nil, fmt.Errorf("params have no RFC 8785 form: %w", err)
	}
	top, ok := jsonObject(params)
	if !ok {
		return nil, errors.New("params must be a JSON object")
	}
	if err := dropProof(top); err != nil {
		return nil, err
	}
	if raw, ok := top["message"]; ok {
		if msg, ok := jsonObject(raw); ok {
			if err := dropProof(msg); err != nil {
				return nil, err
			}
			b, err := json.Marshal(msg)
			if err != nil {
				return nil, err
			}
			top["message"] = b
		}
	}
	b, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	return schemas.CanonicalizeJSON(b)
}

// dropProof removes obj.metadata.chio.dpopProof, then chio if it is an
// empty object, then metadata if it is one. Members that are not objects
// are left as they are.
func dropProof(obj map[string]json.RawMessage) error {
	meta, ok := jsonObject(obj["metadata"])
	if !ok {
		return nil
	}
	if chio, ok := jsonObject(meta["chio"]); ok {
		delete(chio, metaDPoPProof)
		if len(chio) == 0 {
			delete(meta, "chio")
		} else {
			b, err := json.Marshal(chio)
			if err != nil {
				return err
			}
			meta["chio"] = b
		}
	}
	if len(meta) == 0 {
		delete(obj, "metadata")
		return nil
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	obj["metadata"] = b
	return nil
}

// jsonObject decodes raw if it is a JSON object (not null, not any other
// value).
func jsonObject(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(t, &m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

// stdioProof is the proof a stdio call carries (see ServeStdio), nil for
// none. Its form is the kernel's to judge: whatever JSON value is there
// is passed on, so a malformed one is refused, never ignored. For a call
// whose operation runs no tool (every op but SendMessage) the proof is
// bound to that operation (kernel.Proof.Request, StdioOperation); a
// tasks/get that runs a deferred task binds it to the task's call instead
// (stdioRun).
func stdioProof(method string, op wire.Operation, params json.RawMessage) *kernel.Proof {
	var p struct {
		Metadata json.RawMessage `json:"metadata"`
		Message  struct {
			Metadata json.RawMessage `json:"metadata"`
		} `json:"message"`
	}
	// Names matched exactly, as the wire decoder matches them: a proof
	// under "Metadata" is in no metadata the call is read with. What does
	// not decode has no proof: the params' decoding refuses it.
	_ = strictjson.UnmarshalExact(params, &p)
	var found []json.RawMessage
	for _, meta := range []json.RawMessage{p.Metadata, p.Message.Metadata} {
		if raw := member(member(meta, "chio"), metaDPoPProof); len(raw) > 0 && string(raw) != "null" {
			found = append(found, raw)
		}
	}
	switch {
	case len(found) == 0:
		return nil
	case len(found) > 1:
		return refusedProof(dpop.CheckMalformed, "a stdio call carries one proof: params.metadata.chio.dpopProof or params.message.metadata.chio.dpopProof, not both")
	}
	proof := &kernel.Proof{Tool: found[0]}
	if op != wire.OpSendMessage {
		c, err := StdioOperation(method, params)
		if err != nil {
			return refusedProof(dpop.CheckCall, "the operation the proof must name cannot be computed: "+err.Error())
		}
		proof.Request = &c
	}
	return proof
}

// refusedProof is a proof the kernel refuses with check, before any
// other check (the way kernel.FromPresented carries a presentation wrong
// in form).
func refusedProof(check dpop.Check, msg string) *kernel.Proof {
	return kernel.FromPresented(dpop.Presented{Invalid: &dpop.Error{Check: check, Msg: msg}})
}

// stdioRun binds a stdio tasks/get's tool proof and says whether the get
// may run a deferred task (see ServeStdio). A proof that names the a2a
// operation stays bound to it (StdioOperation), and the get runs nothing.
// One that names a tool is bound to the call of the task the get names
// if that task is waiting to run (the get runs it, the kernel checking
// the proof again as it decides the call), else left bound to the
// operation, which it does not name: the kernel refuses it (wrong_call).
// The task is looked up under the process's own capability (Held); the
// get's answer still waits for the kernel to accept the proof.
func (e *Edge) stdioRun(ctx context.Context, c caller, p *wire.GetTaskParams) bool {
	proof := c.proof
	if proof == nil {
		return true // a bearer capability: nothing to bind
	}
	if proof.Request == nil || proof.Request.ToolServer != StdioProofServer {
		return false // refused as it is (malformed, or two proofs)
	}
	tp, err := dpop.ParseToolProof(proof.Tool)
	if err != nil || tp.ToolServer == StdioProofServer {
		return false
	}
	id, d := e.kernel.Held(c.token)
	if d != nil {
		return false
	}
	t, err := e.tasks.Load(ctx, p.ID, taskstore.Owner{Subject: id.Principal, Tenant: p.Tenant})
	if err != nil || t.State.Terminal() || !isDeferred(t) || t.Claimed(time.Now()) {
		return false
	}
	var r execRequest
	if json.Unmarshal(t.Request, &r) != nil {
		return false
	}
	proof.Request = &dpop.Call{ToolServer: r.ServerID, ToolName: r.ToolName, Arguments: r.Arguments}
	return true
}

// member is obj's member name, nil when obj is not an object or has none.
func member(obj json.RawMessage, name string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(obj, &m) != nil {
		return nil
	}
	return m[name]
}

// readLine reads one line of at most limit bytes; a longer one is read to
// its end and reported as tooLong, so the next line starts cleanly.
func readLine(r *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
	for {
		chunk, isPrefix, rerr := r.ReadLine()
		if len(line)+len(chunk) > limit {
			tooLong, line = true, nil
		} else if !tooLong {
			line = append(line, chunk...)
		}
		if rerr != nil {
			return line, tooLong, rerr
		}
		if !isPrefix {
			return line, tooLong, nil
		}
	}
}
