package wire

import (
	"errors"
	"fmt"

	"github.com/chio-ledger/chio/schemas/strictjson"
)

// strictDocument checks a caller's document (a JSON-RPC body, a REST body)
// with strictjson before anything decodes it, so every member the decoders
// read later was read once and only once, and the answer names what was
// wrong: not JSON at all (invalid syntax, encoding) is ParseError, JSON
// that is not one readable request (a repeated member, too deep, too
// large) is InvalidRequest. The messages carry strictjson's offsets, which
// never quote the input.
func strictDocument(body []byte, what string) *Error { return CheckJSON(body, what) }

// CheckJSON is the strictjson check every binding's request passes, as a
// refusal for what: ParseError or InvalidRequest (see strictDocument), nil
// when body is accepted. The gRPC binding runs it on the ProtoJSON of a
// request, whose Struct and Value fields nest as deep as a caller likes.
func CheckJSON(body []byte, what string) *Error {
	err := strictjson.Valid(body)
	if err == nil {
		return nil
	}
	return strictRefusal(err, what)
}

func strictRefusal(err error, what string) *Error {
	msg := fmt.Sprintf("%s is not JSON this server reads: %v", what, err)
	switch {
	case errors.Is(err, strictjson.ErrDuplicateMember), errors.Is(err, strictjson.ErrDepth), errors.Is(err, strictjson.ErrTooLarge):
		return InvalidRequest(msg)
	}
	return ParseError(msg)
}
