package wire

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// Bounds on push-config strings. The URL bound matches common proxy and
// browser limits; token and credentials are echoed into webhook headers, so
// they are bounded like a header value.
const (
	MaxPushURLBytes         = 2048
	MaxPushTokenBytes       = 4096
	MaxPushCredentialsBytes = 4096
	maxPushSchemeBytes      = 128
)

// PushConfig is a push-notification config in either dialect: 1.0's
// flattened TaskPushNotificationConfig, or 0.3's TaskPushNotificationConfig
// {taskId, pushNotificationConfig}. The decoders only check the URL's
// syntax; guarding against SSRF (resolving the host, refusing private
// addresses) is the sender's job.
type PushConfig struct {
	// ID may be empty on input; the server assigns one.
	ID     string
	TaskID string
	URL    string
	// Token is client-chosen; SDKs echo it as X-A2A-Notification-Token.
	Token string
	// Auth is sent as "Authorization: <Scheme> <Credentials>", nil for none.
	Auth   *PushAuth
	Tenant string
}

// PushAuth is 1.0 authentication {scheme, credentials}, or 0.3
// authentication {schemes: […], credentials} reduced to its first scheme.
type PushAuth struct {
	Scheme      string
	Credentials string
}

// CreatePushConfigParams are the params of CreateTaskPushNotificationConfig
// / tasks/pushNotificationConfig/set. Config.TaskID is always set.
type CreatePushConfigParams struct {
	Config PushConfig
}

// GetPushConfigParams are the params of GetTaskPushNotificationConfig /
// tasks/pushNotificationConfig/get. ID is empty only for a 0.3 get without
// pushNotificationConfigId, which asks for the task's only (or default)
// config.
type GetPushConfigParams struct {
	TaskID string
	ID     string
	Tenant string
}

// ListPushConfigsParams are the params of ListTaskPushNotificationConfigs /
// tasks/pushNotificationConfig/list.
type ListPushConfigsParams struct {
	TaskID string
	// PageSize is 1..MaxPageSize: DefaultPageSize when absent or 0, and
	// larger requests are lowered to MaxPageSize (AIP-158) rather than refused.
	PageSize  int
	PageToken string
	Tenant    string
}

// DeletePushConfigParams are the params of DeleteTaskPushNotificationConfig
// / tasks/pushNotificationConfig/delete.
type DeletePushConfigParams struct {
	TaskID string
	ID     string
	Tenant string
}

// pushV10 reports whether v uses the 1.0 push shapes; 0.3 and the hello-a2a
// profile (which borrows 0.3's names) use the 0.3 ones.
func pushV10(v Version) bool { return v == V10 }

// pushRequired reads a string member that must be present and non-empty.
func pushRequired(o obj, name string) (string, *Error) {
	s, e := o.str(name)
	if e != nil {
		return "", e
	}
	if s == "" {
		return "", fieldError(o.field(name), "is required")
	}
	return s, nil
}

// DecodeCreatePushConfigParams decodes the create params of dialect v:
//   - 1.0: the flattened TaskPushNotificationConfig {tenant, taskId, id,
//     url, token, authentication{scheme, credentials}}, which is what the
//     a2a-go v2 client sends (the proto's CreateTaskPushNotificationConfig
//     takes TaskPushNotificationConfig itself);
//   - 0.3: {taskId, pushNotificationConfig: {id, url, token,
//     authentication{schemes, credentials}}}.
//
// taskId and url are required.
func DecodeCreatePushConfigParams(params json.RawMessage, v Version) (*CreatePushConfigParams, *Error) {
	o, e := paramsObject(params)
	if e != nil {
		return nil, e
	}
	taskID, e := pushRequired(o, "taskId")
	if e != nil {
		return nil, e
	}
	inner := o
	if !pushV10(v) {
		raw, ok := o.get("pushNotificationConfig")
		if !ok {
			return nil, fieldError("pushNotificationConfig", "is required")
		}
		if inner, e = object(raw, "pushNotificationConfig"); e != nil {
			return nil, e
		}
	}
	c, e := decodePushConfig(inner, v)
	if e != nil {
		return nil, e
	}
	c.TaskID = taskID
	if pushV10(v) {
		if c.Tenant, e = o.str("tenant"); e != nil {
			return nil, e
		}
	}
	return &CreatePushConfigParams{Config: *c}, nil
}

// DecodeGetPushConfigParams decodes 1.0 {tenant, taskId, id} (both ids
// required) or 0.3 {id, pushNotificationConfigId} (the task id required,
// the config id optional).
func DecodeGetPushConfigParams(params json.RawMessage, v Version) (*GetPushConfigParams, *Error) {
	taskID, id, tenant, e := decodePushRef(params, v, false)
	if e != nil {
		return nil, e
	}
	return &GetPushConfigParams{TaskID: taskID, ID: id, Tenant: tenant}, nil
}

// DecodeDeletePushConfigParams decodes 1.0 {tenant, taskId, id} or 0.3
// {id, pushNotificationConfigId}; both ids are required in both dialects.
func DecodeDeletePushConfigParams(params json.RawMessage, v Version) (*DeletePushConfigParams, *Error) {
	taskID, id, tenant, e := decodePushRef(params, v, true)
	if e != nil {
		return nil, e
	}
	return &DeletePushConfigParams{TaskID: taskID, ID: id, Tenant: tenant}, nil
}

// decodePushRef reads the (task, config) pair of get and delete.
func decodePushRef(params json.RawMessage, v Version, configRequired bool) (taskID, id, tenant string, e *Error) {
	o, e := paramsObject(params)
	if e != nil {
		return "", "", "", e
	}
	if pushV10(v) {
		if taskID, e = pushRequired(o, "taskId"); e != nil {
			return "", "", "", e
		}
		if id, e = pushRequired(o, "id"); e != nil {
			return "", "", "", e
		}
		if tenant, e = o.str("tenant"); e != nil {
			return "", "", "", e
		}
		return taskID, id, tenant, nil
	}
	// 0.3 names the task "id" and the config "pushNotificationConfigId".
	if taskID, e = pushRequired(o, "id"); e != nil {
		return "", "", "", e
	}
	if configRequired {
		id, e = pushRequired(o, "pushNotificationConfigId")
	} else {
		id, e = o.str("pushNotificationConfigId")
	}
	if e != nil {
		return "", "", "", e
	}
	return taskID, id, "", nil
}

// DecodeListPushConfigsParams decodes 1.0 {tenant, taskId, pageSize,
// pageToken} or 0.3 {id}; the task id is required. 0.3 has no paging, but
// pageSize and pageToken are read there too because the 0.3 REST binding
// passes them as query parameters.
func DecodeListPushConfigsParams(params json.RawMessage, v Version) (*ListPushConfigsParams, *Error) {
	o, e := paramsObject(params)
	if e != nil {
		return nil, e
	}
	p := &ListPushConfigsParams{PageSize: DefaultPageSize}
	if pushV10(v) {
		if p.TaskID, e = pushRequired(o, "taskId"); e != nil {
			return nil, e
		}
		if p.Tenant, e = o.str("tenant"); e != nil {
			return nil, e
		}
	} else if p.TaskID, e = pushRequired(o, "id"); e != nil {
		return nil, e
	}
	size, e := o.integer("pageSize")
	if e != nil {
		return nil, e
	}
	switch {
	case size == nil || *size == 0:
	case *size < 0:
		return nil, fieldError("pageSize", "must not be negative")
	case *size > MaxPageSize:
		p.PageSize = MaxPageSize
	default:
		p.PageSize = *size
	}
	if p.PageToken, e = o.str("pageToken"); e != nil {
		return nil, e
	}
	return p, nil
}

// DecodeInlinePushConfig decodes the config carried in
// SendConfiguration.PushConfig: 1.0 taskPushNotificationConfig (flattened,
// taskId optional because the task may not exist yet) or 0.3
// pushNotificationConfig. Empty or null raw means no config (nil, nil).
//
// DecodeSendParams keeps whichever of the two members was sent, whatever
// the method's dialect, so the authentication object is read in either
// form (scheme or schemes) regardless of v; v picks the field paths and
// which form an error names.
func DecodeInlinePushConfig(raw json.RawMessage, v Version) (*PushConfig, *Error) {
	if len(raw) == 0 || jsonKind(raw) == '0' {
		return nil, nil
	}
	path := "configuration.pushNotificationConfig"
	if pushV10(v) {
		path = "configuration.taskPushNotificationConfig"
	}
	o, e := object(raw, path)
	if e != nil {
		return nil, e
	}
	c, e := decodePushConfig(o, v)
	if e != nil {
		return nil, e
	}
	if c.TaskID, e = o.str("taskId"); e != nil {
		return nil, e
	}
	if c.Tenant, e = o.str("tenant"); e != nil {
		return nil, e
	}
	return c, nil
}

// decodePushConfig reads {id, url, token, authentication} from o.
func decodePushConfig(o obj, v Version) (*PushConfig, *Error) {
	c := &PushConfig{}
	var e *Error
	if c.ID, e = o.str("id"); e != nil {
		return nil, e
	}
	if c.URL, e = o.str("url"); e != nil {
		return nil, e
	}
	if e = checkPushURL(o.field("url"), c.URL); e != nil {
		return nil, e
	}
	if c.Token, e = o.str("token"); e != nil {
		return nil, e
	}
	if e = checkPushHeaderText(o.field("token"), c.Token, MaxPushTokenBytes); e != nil {
		return nil, e
	}
	if c.Auth, e = decodePushAuth(o, v); e != nil {
		return nil, e
	}
	return c, nil
}

// decodePushAuth reads authentication as 1.0 {scheme} or 0.3 {schemes}. Both
// forms are accepted (see DecodeInlinePushConfig); if both are given they
// must agree.
func decodePushAuth(o obj, v Version) (*PushAuth, *Error) {
	raw, ok := o.get("authentication")
	if !ok {
		return nil, nil
	}
	a, e := object(raw, o.field("authentication"))
	if e != nil {
		return nil, e
	}
	scheme, e := a.str("scheme")
	if e != nil {
		return nil, e
	}
	if a.has("schemes") {
		schemes, e := a.strings("schemes")
		if e != nil {
			return nil, e
		}
		if len(schemes) == 0 {
			return nil, fieldError(a.field("schemes"), "must list at least one scheme")
		}
		switch {
		case schemes[0] == "":
			return nil, fieldError(a.field("schemes")+"[0]", "must not be empty")
		case scheme != "" && scheme != schemes[0]:
			return nil, fieldError(a.field("scheme"), "contradicts schemes[0] %q", schemes[0])
		}
		scheme = schemes[0]
	}
	if scheme == "" {
		name := "schemes"
		if pushV10(v) {
			name = "scheme"
		}
		return nil, fieldError(a.field(name), "is required")
	}
	if len(scheme) > maxPushSchemeBytes || !isAuthScheme(scheme) {
		return nil, fieldError(a.field("scheme"), "must be an HTTP authentication scheme such as Bearer")
	}
	creds, e := a.str("credentials")
	if e != nil {
		return nil, e
	}
	if e := checkPushHeaderText(a.field("credentials"), creds, MaxPushCredentialsBytes); e != nil {
		return nil, e
	}
	return &PushAuth{Scheme: scheme, Credentials: creds}, nil
}

// checkPushURL requires an absolute http(s) URL with a host.
func checkPushURL(field, s string) *Error {
	if s == "" {
		return fieldError(field, "is required")
	}
	if len(s) > MaxPushURLBytes {
		return fieldError(field, "must be at most %d bytes", MaxPushURLBytes)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fieldError(field, "must be an absolute http or https URL")
	}
	if sch := strings.ToLower(u.Scheme); sch != "http" && sch != "https" {
		return fieldError(field, "must be an absolute http or https URL, not scheme %q", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fieldError(field, "must be an absolute http or https URL with a host")
	}
	return nil
}

// checkPushHeaderText bounds s and refuses control characters, because the
// sender puts s into a webhook request header.
func checkPushHeaderText(field, s string, max int) *Error {
	if len(s) > max {
		return fieldError(field, "must be at most %d bytes", max)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fieldError(field, "must not contain control characters")
		}
	}
	return nil
}

// isAuthScheme reports whether s is an RFC 9110 token (an auth-scheme).
func isAuthScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Wire shapes. Field order is the emitted order.

type pushAuth10 struct {
	Scheme      string `json:"scheme"`
	Credentials string `json:"credentials,omitempty"`
}

type pushConfig10 struct {
	Tenant         string      `json:"tenant,omitempty"`
	ID             string      `json:"id"`
	TaskID         string      `json:"taskId"`
	URL            string      `json:"url"`
	Token          string      `json:"token,omitempty"`
	Authentication *pushAuth10 `json:"authentication,omitempty"`
}

type pushAuth03 struct {
	Schemes     []string `json:"schemes"`
	Credentials string   `json:"credentials,omitempty"`
}

type pushNotificationConfig03 struct {
	ID             string      `json:"id,omitempty"`
	URL            string      `json:"url"`
	Token          string      `json:"token,omitempty"`
	Authentication *pushAuth03 `json:"authentication,omitempty"`
}

type taskPushConfig03 struct {
	TaskID                 string                   `json:"taskId"`
	PushNotificationConfig pushNotificationConfig03 `json:"pushNotificationConfig"`
}

func pushConfigWire(v Version, c *PushConfig) (any, error) {
	if c == nil {
		return nil, invalid("nil push config")
	}
	if c.TaskID == "" || c.URL == "" {
		return nil, invalid("a push config needs a task id and a url")
	}
	if c.Auth != nil && c.Auth.Scheme == "" {
		return nil, invalid("push authentication without a scheme")
	}
	if pushV10(v) {
		w := pushConfig10{Tenant: c.Tenant, ID: c.ID, TaskID: c.TaskID, URL: c.URL, Token: c.Token}
		if c.Auth != nil {
			w.Authentication = &pushAuth10{Scheme: c.Auth.Scheme, Credentials: c.Auth.Credentials}
		}
		return w, nil
	}
	w := taskPushConfig03{TaskID: c.TaskID,
		PushNotificationConfig: pushNotificationConfig03{ID: c.ID, URL: c.URL, Token: c.Token}}
	if c.Auth != nil {
		w.PushNotificationConfig.Authentication = &pushAuth03{Schemes: []string{c.Auth.Scheme}, Credentials: c.Auth.Credentials}
	}
	return w, nil
}

// EncodePushConfig encodes c as the result of create and get: 1.0 the
// flattened TaskPushNotificationConfig {tenant?, id, taskId, url, token?,
// authentication?{scheme, credentials?}}; 0.3 (and hello-a2a) {taskId,
// pushNotificationConfig: {id?, url, token?, authentication?{schemes:
// [scheme], credentials?}}}; V03REST {name:
// "tasks/{taskId}/pushNotificationConfigs/{id}", pushNotificationConfig: {as
// in 0.3}}. Credentials are emitted as stored; clear them first if callers
// must not read them back. It fails on a config without a task id or url, or
// with an authentication lacking a scheme.
func EncodePushConfig(v Version, c *PushConfig) (json.RawMessage, error) {
	return DialectOf(v).EncodePushConfig(c)
}

// EncodePushConfigList encodes the result of list: 1.0 {configs: […],
// nextPageToken} (nextPageToken always present, "" on the last page); 0.3 a
// bare array, which has no paging, so nextPageToken is dropped; V03REST
// {configs: […], nextPageToken} with V03REST items. The array is never null.
func EncodePushConfigList(v Version, cs []PushConfig, nextPageToken string) (json.RawMessage, error) {
	return DialectOf(v).EncodePushConfigList(cs, nextPageToken)
}

func (d jsonDialect) EncodePushConfig(c *PushConfig) (json.RawMessage, error) {
	if err := knownVersion(d.v); err != nil {
		return nil, err
	}
	w, err := pushConfigWire(d.v, c)
	if err != nil {
		return nil, err
	}
	return marshal(w)
}

func (d jsonDialect) EncodePushConfigList(cs []PushConfig, nextPageToken string) (json.RawMessage, error) {
	v := d.v
	if err := knownVersion(v); err != nil {
		return nil, err
	}
	items := make([]any, 0, len(cs))
	for i := range cs {
		w, err := pushConfigWire(v, &cs[i])
		if err != nil {
			return nil, fmt.Errorf("configs[%d]: %w", i, err)
		}
		items = append(items, w)
	}
	if !pushV10(v) {
		return marshal(items)
	}
	return marshal(struct {
		Configs       []any  `json:"configs"`
		NextPageToken string `json:"nextPageToken"`
	}{items, nextPageToken})
}
