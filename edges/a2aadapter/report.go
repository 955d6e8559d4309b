package a2aadapter

import "slices"

// Report is what discovery found: what `chio a2a discover` prints.
type Report struct {
	Target   string      `json:"target"`
	CardURL  string      `json:"cardUrl"`
	ServerID string      `json:"serverId"`
	Card     CardSummary `json:"card"`
	// ProtocolVersion is the chosen interface's A2A version.
	ProtocolVersion string             `json:"protocolVersion,omitempty"`
	Interface       *Interface         `json:"interface,omitempty"`
	Skipped         []SkippedInterface `json:"skippedInterfaces,omitempty"`
	Tools           []ToolReport       `json:"tools"`
	Auth            AuthPlan           `json:"auth"`
	Policy          PolicyVerdict      `json:"policy"`
}

// CardSummary is the card as the report shows it.
type CardSummary struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
	// Format is CardFormat10, CardFormat03 or CardFormatDual.
	Format            string `json:"format"`
	Streaming         bool   `json:"streaming"`
	PushNotifications bool   `json:"pushNotifications"`
	// HistoryLength reports whether history_length is offered.
	HistoryLength bool `json:"historyLength"`
}

// ToolReport maps one skill to its tool.
type ToolReport struct {
	SkillID   string `json:"skillId"`
	SkillName string `json:"skillName"`
	Tool      string `json:"tool"`
	// Unsatisfiable says why calls of this tool are denied locally when the
	// skill's own security requirements are not met.
	Unsatisfiable string `json:"unsatisfiable,omitempty"`
}

// clone is a deep copy, so that callers cannot change the adapter's.
func (r Report) clone() Report {
	if r.Interface != nil {
		i := *r.Interface
		r.Interface = &i
	}
	r.Skipped = slices.Clone(r.Skipped)
	r.Tools = slices.Clone(r.Tools)
	r.Auth.Schemes = slices.Clone(r.Auth.Schemes)
	req := make([][]string, len(r.Auth.Required))
	for i, s := range r.Auth.Required {
		req[i] = slices.Clone(s)
	}
	if r.Auth.Required != nil {
		r.Auth.Required = req
	}
	return r
}
