package a2aadapter

import (
	"errors"
	"fmt"
)

// Sentinel errors; test them with errors.Is.
var (
	// ErrInsecureURL: a URL is plain http to a host that is not loopback.
	ErrInsecureURL = errors.New("https is required for a non-loopback host")
	// ErrNoInterface: the card offers no interface the adapter can use.
	ErrNoInterface = errors.New("no usable interface")
	// ErrInvalidCard: the card is unreadable or lacks what tools need.
	ErrInvalidCard = errors.New("invalid agent card")
	// ErrDeniedLocally: the authorization plan cannot satisfy the card, so
	// the call was refused before any upstream request.
	ErrDeniedLocally = errors.New("denied locally before any upstream call")
	// ErrInvalidArguments: the tool arguments break the tool contract.
	ErrInvalidArguments = errors.New("invalid arguments")
	// ErrNotAdvertised: the call needs a capability the card does not
	// advertise (streaming, push notifications, history length).
	ErrNotAdvertised = errors.New("not advertised by the agent card")
	// ErrFollowUpRefused: a follow-up names a task that was not observed
	// for the same tool, server, binding, interface and tenant (or there
	// is no task registry).
	ErrFollowUpRefused = errors.New("follow-up refused")
	// ErrMalformedPayload: the partner answered with a task, event or
	// message missing a required field.
	ErrMalformedPayload = errors.New("malformed upstream payload")
	// ErrTaskRebound: the partner reported a task id already recorded for
	// another tool, binding, interface or tenant.
	ErrTaskRebound = errors.New("task is recorded for another binding")
	// ErrUnknownTool: the invocation names a tool or server this adapter
	// does not serve.
	ErrUnknownTool = errors.New("unknown tool")
)

// Admission contracts a PolicyError names.
const (
	ContractTenant = "tenant"
	ContractSkill  = "skill"
	ContractScheme = "scheme"
	ContractOrigin = "origin"
)

// PolicyError is a partner admission failure: the card breaks Contract.
// Report is what discovery saw, for the operator.
type PolicyError struct {
	Partner  string
	Contract string
	Detail   string
	Report   Report
}

func (e *PolicyError) Error() string {
	return fmt.Sprintf("partner %q refused by the %s contract: %s", e.Partner, e.Contract, e.Detail)
}
