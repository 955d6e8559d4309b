package wire

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	sdk "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
)

func TestDecodeCreatePushConfigParams(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    Version
		in   string
		want PushConfig
	}{
		{"1.0 full", V10, `{"tenant":"acme","taskId":"t1","id":"c1","url":"https://hook.example/a2a","token":"tok","authentication":{"scheme":"Bearer","credentials":"s3cret"}}`,
			PushConfig{ID: "c1", TaskID: "t1", URL: "https://hook.example/a2a", Token: "tok", Auth: &PushAuth{Scheme: "Bearer", Credentials: "s3cret"}, Tenant: "acme"}},
		{"1.0 minimal", V10, `{"taskId":"t1","url":"http://127.0.0.1:9/h"}`,
			PushConfig{TaskID: "t1", URL: "http://127.0.0.1:9/h"}},
		{"1.0 scheme without credentials", V10, `{"taskId":"t1","url":"https://h/","authentication":{"scheme":"Basic"}}`,
			PushConfig{TaskID: "t1", URL: "https://h/", Auth: &PushAuth{Scheme: "Basic"}}},
		{"1.0 upper-case URL scheme, unknown members", V10, `{"taskId":"t1","url":"HTTPS://H/x","extra":{"a":1},"token":null}`,
			PushConfig{TaskID: "t1", URL: "HTTPS://H/x"}},
		{"1.0 with 0.3 schemes form", V10, `{"taskId":"t1","url":"https://h/","authentication":{"schemes":["Bearer","Basic"]}}`,
			PushConfig{TaskID: "t1", URL: "https://h/", Auth: &PushAuth{Scheme: "Bearer"}}},
		{"0.3 full", V03, `{"taskId":"t1","pushNotificationConfig":{"id":"c1","url":"https://h/x","token":"tok","authentication":{"schemes":["Bearer"],"credentials":"s"}}}`,
			PushConfig{ID: "c1", TaskID: "t1", URL: "https://h/x", Token: "tok", Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}}},
		{"0.3 minimal", V03, `{"taskId":"t1","pushNotificationConfig":{"url":"https://h/x"}}`,
			PushConfig{TaskID: "t1", URL: "https://h/x"}},
		{"0.3 agreeing scheme and schemes", V03, `{"taskId":"t1","pushNotificationConfig":{"url":"https://h/x","authentication":{"scheme":"Bearer","schemes":["Bearer"]}}}`,
			PushConfig{TaskID: "t1", URL: "https://h/x", Auth: &PushAuth{Scheme: "Bearer"}}},
		{"hello profile uses 0.3 shapes", VHelloStdio, `{"taskId":"t1","pushNotificationConfig":{"url":"https://h/x"}}`,
			PushConfig{TaskID: "t1", URL: "https://h/x"}},
	} {
		got, e := DecodeCreatePushConfigParams(json.RawMessage(tc.in), tc.v)
		if e != nil {
			t.Errorf("%s: %v", tc.name, e)
			continue
		}
		if !reflect.DeepEqual(got.Config, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got.Config, tc.want)
		}
	}
}

func TestDecodePushRefParams(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  func() (any, *Error)
		want any
	}{
		{"1.0 get", func() (any, *Error) {
			return DecodeGetPushConfigParams(json.RawMessage(`{"tenant":"x","taskId":"t","id":"c"}`), V10)
		}, &GetPushConfigParams{TaskID: "t", ID: "c", Tenant: "x"}},
		{"0.3 get", func() (any, *Error) {
			return DecodeGetPushConfigParams(json.RawMessage(`{"id":"t","pushNotificationConfigId":"c"}`), V03)
		}, &GetPushConfigParams{TaskID: "t", ID: "c"}},
		{"0.3 get without config id", func() (any, *Error) {
			return DecodeGetPushConfigParams(json.RawMessage(`{"id":"t","metadata":{}}`), V03)
		}, &GetPushConfigParams{TaskID: "t"}},
		{"1.0 delete", func() (any, *Error) {
			return DecodeDeletePushConfigParams(json.RawMessage(`{"taskId":"t","id":"c"}`), V10)
		}, &DeletePushConfigParams{TaskID: "t", ID: "c"}},
		{"0.3 delete", func() (any, *Error) {
			return DecodeDeletePushConfigParams(json.RawMessage(`{"id":"t","pushNotificationConfigId":"c"}`), V03)
		}, &DeletePushConfigParams{TaskID: "t", ID: "c"}},
		{"1.0 list defaults", func() (any, *Error) {
			return DecodeListPushConfigsParams(json.RawMessage(`{"taskId":"t"}`), V10)
		}, &ListPushConfigsParams{TaskID: "t", PageSize: DefaultPageSize}},
		{"1.0 list paged", func() (any, *Error) {
			return DecodeListPushConfigsParams(json.RawMessage(`{"taskId":"t","pageSize":"7","pageToken":"p","tenant":"x"}`), V10)
		}, &ListPushConfigsParams{TaskID: "t", PageSize: 7, PageToken: "p", Tenant: "x"}},
		{"1.0 list oversize page is lowered", func() (any, *Error) {
			return DecodeListPushConfigsParams(json.RawMessage(`{"taskId":"t","pageSize":5000}`), V10)
		}, &ListPushConfigsParams{TaskID: "t", PageSize: MaxPageSize}},
		{"0.3 list", func() (any, *Error) {
			return DecodeListPushConfigsParams(json.RawMessage(`{"id":"t"}`), V03)
		}, &ListPushConfigsParams{TaskID: "t", PageSize: DefaultPageSize}},
	} {
		got, e := tc.got()
		if e != nil {
			t.Errorf("%s: %v", tc.name, e)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestPushParamErrors(t *testing.T) {
	create10 := func(p json.RawMessage) *Error { _, e := DecodeCreatePushConfigParams(p, V10); return e }
	create03 := func(p json.RawMessage) *Error { _, e := DecodeCreatePushConfigParams(p, V03); return e }
	get10 := func(p json.RawMessage) *Error { _, e := DecodeGetPushConfigParams(p, V10); return e }
	get03 := func(p json.RawMessage) *Error { _, e := DecodeGetPushConfigParams(p, V03); return e }
	del10 := func(p json.RawMessage) *Error { _, e := DecodeDeletePushConfigParams(p, V10); return e }
	del03 := func(p json.RawMessage) *Error { _, e := DecodeDeletePushConfigParams(p, V03); return e }
	list10 := func(p json.RawMessage) *Error { _, e := DecodeListPushConfigsParams(p, V10); return e }
	list03 := func(p json.RawMessage) *Error { _, e := DecodeListPushConfigsParams(p, V03); return e }
	inline10 := func(p json.RawMessage) *Error { _, e := DecodeInlinePushConfig(p, V10); return e }
	inline03 := func(p json.RawMessage) *Error { _, e := DecodeInlinePushConfig(p, V03); return e }

	long := func(n int) string { return strings.Repeat("a", n) }
	url10 := func(u string) string { return `{"taskId":"t","url":` + mustMarshal(u) + `}` }
	for _, tc := range []struct {
		name   string
		decode func(json.RawMessage) *Error
		in     string
		field  string
	}{
		{"params not object", create10, `[]`, "params"},
		{"missing task", create10, `{"url":"https://h/"}`, "taskId"},
		{"empty task", create10, `{"taskId":"","url":"https://h/"}`, "taskId"},
		{"task wrong type", create10, `{"taskId":1,"url":"https://h/"}`, "taskId"},
		{"missing url", create10, `{"taskId":"t"}`, "url"},
		{"null url", create10, `{"taskId":"t","url":null}`, "url"},
		{"url wrong type", create10, `{"taskId":"t","url":["https://h/"]}`, "url"},
		{"ftp url", create10, url10("ftp://h/x"), "url"},
		{"javascript url", create10, url10("javascript:alert(1)"), "url"},
		{"relative url", create10, url10("/hook"), "url"},
		{"no host", create10, url10("http:///x"), "url"},
		{"port without host", create10, url10("http://:80/x"), "url"},
		{"unparsable url", create10, url10("http://h/%zz"), "url"},
		{"control char in url", create10, url10("http://h/\x01"), "url"},
		{"oversize url", create10, url10("https://h/" + long(MaxPushURLBytes)), "url"},
		{"token wrong type", create10, `{"taskId":"t","url":"https://h/","token":5}`, "token"},
		{"oversize token", create10, `{"taskId":"t","url":"https://h/","token":"` + long(MaxPushTokenBytes+1) + `"}`, "token"},
		{"newline in token", create10, `{"taskId":"t","url":"https://h/","token":"a\nb"}`, "token"},
		{"id wrong type", create10, `{"taskId":"t","url":"https://h/","id":7}`, "id"},
		{"tenant wrong type", create10, `{"taskId":"t","url":"https://h/","tenant":{}}`, "tenant"},
		{"auth not object", create10, `{"taskId":"t","url":"https://h/","authentication":"Bearer x"}`, "authentication"},
		{"auth without scheme", create10, `{"taskId":"t","url":"https://h/","authentication":{"credentials":"x"}}`, "authentication.scheme"},
		{"auth scheme wrong type", create10, `{"taskId":"t","url":"https://h/","authentication":{"scheme":1}}`, "authentication.scheme"},
		{"auth scheme with space", create10, `{"taskId":"t","url":"https://h/","authentication":{"scheme":"Bearer x"}}`, "authentication.scheme"},
		{"auth scheme oversize", create10, `{"taskId":"t","url":"https://h/","authentication":{"scheme":"` + long(200) + `"}}`, "authentication.scheme"},
		{"credentials wrong type", create10, `{"taskId":"t","url":"https://h/","authentication":{"scheme":"Bearer","credentials":true}}`, "authentication.credentials"},
		{"oversize credentials", create10, `{"taskId":"t","url":"https://h/","authentication":{"scheme":"Bearer","credentials":"` + long(MaxPushCredentialsBytes+1) + `"}}`, "authentication.credentials"},
		{"CRLF in credentials", create10, `{"taskId":"t","url":"https://h/","authentication":{"scheme":"Bearer","credentials":"x\r\nX-Evil: 1"}}`, "authentication.credentials"},
		{"scheme contradicts schemes", create10, `{"taskId":"t","url":"https://h/","authentication":{"scheme":"Basic","schemes":["Bearer"]}}`, "authentication.scheme"},
		{"0.3 missing task", create03, `{"pushNotificationConfig":{"url":"https://h/"}}`, "taskId"},
		{"0.3 missing config", create03, `{"taskId":"t"}`, "pushNotificationConfig"},
		{"0.3 config not object", create03, `{"taskId":"t","pushNotificationConfig":"https://h/"}`, "pushNotificationConfig"},
		{"0.3 flattened url is not read", create03, `{"taskId":"t","url":"https://h/"}`, "pushNotificationConfig"},
		{"0.3 missing url", create03, `{"taskId":"t","pushNotificationConfig":{"id":"c"}}`, "pushNotificationConfig.url"},
		{"0.3 non-http url", create03, `{"taskId":"t","pushNotificationConfig":{"url":"file:///etc/passwd"}}`, "pushNotificationConfig.url"},
		{"0.3 empty schemes", create03, `{"taskId":"t","pushNotificationConfig":{"url":"https://h/","authentication":{"schemes":[]}}}`, "pushNotificationConfig.authentication.schemes"},
		{"0.3 schemes not array", create03, `{"taskId":"t","pushNotificationConfig":{"url":"https://h/","authentication":{"schemes":"Bearer"}}}`, "pushNotificationConfig.authentication.schemes"},
		{"0.3 schemes item wrong type", create03, `{"taskId":"t","pushNotificationConfig":{"url":"https://h/","authentication":{"schemes":[1]}}}`, "pushNotificationConfig.authentication.schemes[0]"},
		{"0.3 empty first scheme", create03, `{"taskId":"t","pushNotificationConfig":{"url":"https://h/","authentication":{"schemes":[""]}}}`, "pushNotificationConfig.authentication.schemes[0]"},
		{"0.3 auth without schemes", create03, `{"taskId":"t","pushNotificationConfig":{"url":"https://h/","authentication":{}}}`, "pushNotificationConfig.authentication.schemes"},
		{"1.0 get missing task", get10, `{"id":"c"}`, "taskId"},
		{"1.0 get missing id", get10, `{"taskId":"t"}`, "id"},
		{"1.0 get id wrong type", get10, `{"taskId":"t","id":1}`, "id"},
		{"0.3 get missing id", get03, `{"pushNotificationConfigId":"c"}`, "id"},
		{"0.3 get config id wrong type", get03, `{"id":"t","pushNotificationConfigId":2}`, "pushNotificationConfigId"},
		{"1.0 delete missing id", del10, `{"taskId":"t"}`, "id"},
		{"0.3 delete missing config id", del03, `{"id":"t"}`, "pushNotificationConfigId"},
		{"0.3 delete absent params", del03, ``, "id"},
		{"1.0 list missing task", list10, `{}`, "taskId"},
		{"1.0 list negative page", list10, `{"taskId":"t","pageSize":-1}`, "pageSize"},
		{"1.0 list fractional page", list10, `{"taskId":"t","pageSize":1.5}`, "pageSize"},
		{"1.0 list token wrong type", list10, `{"taskId":"t","pageToken":1}`, "pageToken"},
		{"0.3 list missing id", list03, `{"taskId":"t"}`, "id"},
		{"inline 1.0 missing url", inline10, `{"token":"x"}`, "configuration.taskPushNotificationConfig.url"},
		{"inline 1.0 not object", inline10, `"https://h/"`, "configuration.taskPushNotificationConfig"},
		{"inline 1.0 taskId wrong type", inline10, `{"url":"https://h/","taskId":1}`, "configuration.taskPushNotificationConfig.taskId"},
		{"inline 0.3 bad url", inline03, `{"url":"h/x"}`, "configuration.pushNotificationConfig.url"},
		{"inline 0.3 empty schemes", inline03, `{"url":"https://h/","authentication":{"schemes":[]}}`, "configuration.pushNotificationConfig.authentication.schemes"},
	} {
		e := tc.decode(json.RawMessage(tc.in))
		if e == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if e.Code != CodeInvalidParams || violationField(e) != tc.field {
			t.Errorf("%s: got %d %q (%s), want -32602 %q", tc.name, e.Code, violationField(e), e.Message, tc.field)
		}
	}
}

func mustMarshal(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestDecodeInlinePushConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    Version
		in   string
		want *PushConfig
	}{
		{"absent", V10, ``, nil},
		{"null", V03, `null`, nil},
		{"1.0", V10, `{"url":"https://h/x","token":"k","authentication":{"scheme":"Bearer","credentials":"c"},"taskId":"t","tenant":"x"}`,
			&PushConfig{URL: "https://h/x", Token: "k", Auth: &PushAuth{Scheme: "Bearer", Credentials: "c"}, TaskID: "t", Tenant: "x"}},
		{"0.3", V03, `{"id":"c1","url":"https://h/x","authentication":{"schemes":["Bearer"]}}`,
			&PushConfig{ID: "c1", URL: "https://h/x", Auth: &PushAuth{Scheme: "Bearer"}}},
		{"0.3 member under a 1.0 method", V10, `{"url":"https://h/x","authentication":{"schemes":["Basic"],"credentials":"u:p"}}`,
			&PushConfig{URL: "https://h/x", Auth: &PushAuth{Scheme: "Basic", Credentials: "u:p"}}},
	} {
		got, e := DecodeInlinePushConfig(json.RawMessage(tc.in), tc.v)
		if e != nil {
			t.Errorf("%s: %v", tc.name, e)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
	// Through DecodeSendParams, as the server will use it.
	sp, e := DecodeSendParams(json.RawMessage(`{"message":{"role":"user","parts":[{"text":"a"}]},"configuration":{"pushNotificationConfig":{"url":"https://h/x"}}}`))
	if e != nil {
		t.Fatal(e)
	}
	if c, e := DecodeInlinePushConfig(sp.Configuration.PushConfig, V03); e != nil || c == nil || c.URL != "https://h/x" {
		t.Errorf("inline via send params: %+v %v", c, e)
	}
}

func TestEncodePushConfig(t *testing.T) {
	full := &PushConfig{ID: "c1", TaskID: "t1", URL: "https://h/x?a=1&b=<2>", Token: "tok",
		Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}, Tenant: "acme"}
	bare := &PushConfig{ID: "c2", TaskID: "t1", URL: "https://h/y"}
	for _, tc := range []struct {
		v    Version
		c    *PushConfig
		want string
	}{
		{V10, full, `{"tenant":"acme","id":"c1","taskId":"t1","url":"https://h/x?a=1&b=<2>","token":"tok","authentication":{"scheme":"Bearer","credentials":"s"}}`},
		{V10, bare, `{"id":"c2","taskId":"t1","url":"https://h/y"}`},
		{V03, full, `{"taskId":"t1","pushNotificationConfig":{"id":"c1","url":"https://h/x?a=1&b=<2>","token":"tok","authentication":{"schemes":["Bearer"],"credentials":"s"}}}`},
		{V03, bare, `{"taskId":"t1","pushNotificationConfig":{"id":"c2","url":"https://h/y"}}`},
		{VHelloStdio, bare, `{"taskId":"t1","pushNotificationConfig":{"id":"c2","url":"https://h/y"}}`},
	} {
		got, err := EncodePushConfig(tc.v, tc.c)
		if err != nil {
			t.Errorf("%s %s: %v", tc.v, tc.c.ID, err)
			continue
		}
		if string(got) != tc.want {
			t.Errorf("%s %s:\n got %s\nwant %s", tc.v, tc.c.ID, got, tc.want)
		}
	}

	// Round trip: the encoded config is itself valid create params in both
	// dialects (1.0 create takes the config; 0.3 set takes {taskId, config}).
	for _, v := range []Version{V10, V03} {
		for _, c := range []*PushConfig{full, bare} {
			b, err := EncodePushConfig(v, c)
			if err != nil {
				t.Fatal(err)
			}
			p, e := DecodeCreatePushConfigParams(b, v)
			if e != nil {
				t.Errorf("%s round trip of %s: %v", v, c.ID, e)
				continue
			}
			want := *c
			if v != V10 {
				want.Tenant = "" // 0.3 has no tenant
			}
			if !reflect.DeepEqual(p.Config, want) {
				t.Errorf("%s round trip:\n got %+v\nwant %+v", v, p.Config, want)
			}
		}
	}

	for _, tc := range []struct {
		v Version
		c *PushConfig
	}{
		{V10, nil},
		{V10, &PushConfig{URL: "https://h/"}},
		{V03, &PushConfig{TaskID: "t"}},
		{V03, &PushConfig{TaskID: "t", URL: "https://h/", Auth: &PushAuth{}}},
		{"2.0", bare},
	} {
		if _, err := EncodePushConfig(tc.v, tc.c); err == nil {
			t.Errorf("%s %+v: no error", tc.v, tc.c)
		}
	}
}

func TestEncodePushConfigList(t *testing.T) {
	cs := []PushConfig{{ID: "a", TaskID: "t", URL: "https://h/a"}, {ID: "b", TaskID: "t", URL: "https://h/b", Auth: &PushAuth{Scheme: "Bearer"}}}
	for _, tc := range []struct {
		v    Version
		cs   []PushConfig
		next string
		want string
	}{
		{V10, nil, "", `{"configs":[],"nextPageToken":""}`},
		{V10, cs, "p2", `{"configs":[{"id":"a","taskId":"t","url":"https://h/a"},{"id":"b","taskId":"t","url":"https://h/b","authentication":{"scheme":"Bearer"}}],"nextPageToken":"p2"}`},
		{V03, nil, "ignored", `[]`},
		{V03, cs, "", `[{"taskId":"t","pushNotificationConfig":{"id":"a","url":"https://h/a"}},{"taskId":"t","pushNotificationConfig":{"id":"b","url":"https://h/b","authentication":{"schemes":["Bearer"]}}}]`},
	} {
		got, err := EncodePushConfigList(tc.v, tc.cs, tc.next)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s %d:\n got %s %v\nwant %s", tc.v, len(tc.cs), got, err, tc.want)
		}
	}
	if _, err := EncodePushConfigList(V10, []PushConfig{{TaskID: "t"}}, ""); err == nil || !strings.Contains(err.Error(), "configs[0]") {
		t.Errorf("invalid item: %v", err)
	}
	if _, err := EncodePushConfigList("x", nil, ""); err == nil {
		t.Error("unknown version accepted")
	}
}

func TestMethodDecodeParamsPush(t *testing.T) {
	for _, tc := range []struct {
		method, params string
		want           any
	}{
		{"CreateTaskPushNotificationConfig", `{"taskId":"t","url":"https://h/"}`, &CreatePushConfigParams{Config: PushConfig{TaskID: "t", URL: "https://h/"}}},
		{"GetTaskPushNotificationConfig", `{"taskId":"t","id":"c"}`, &GetPushConfigParams{TaskID: "t", ID: "c"}},
		{"ListTaskPushNotificationConfigs", `{"taskId":"t"}`, &ListPushConfigsParams{TaskID: "t", PageSize: DefaultPageSize}},
		{"DeleteTaskPushNotificationConfig", `{"taskId":"t","id":"c"}`, &DeletePushConfigParams{TaskID: "t", ID: "c"}},
		{"tasks/pushNotificationConfig/set", `{"taskId":"t","pushNotificationConfig":{"url":"https://h/"}}`, &CreatePushConfigParams{Config: PushConfig{TaskID: "t", URL: "https://h/"}}},
		{"tasks/pushNotificationConfig/get", `{"id":"t","pushNotificationConfigId":"c"}`, &GetPushConfigParams{TaskID: "t", ID: "c"}},
		{"tasks/pushNotificationConfig/list", `{"id":"t"}`, &ListPushConfigsParams{TaskID: "t", PageSize: DefaultPageSize}},
		{"tasks/pushNotificationConfig/delete", `{"id":"t","pushNotificationConfigId":"c"}`, &DeletePushConfigParams{TaskID: "t", ID: "c"}},
	} {
		// The dialect comes from the name, whatever was negotiated.
		for _, negotiated := range []Version{V10, V03, VHelloStdio} {
			m, ok := LookupMethod(tc.method, negotiated)
			if !ok {
				t.Fatalf("%s not found", tc.method)
			}
			got, e := m.DecodeParams(json.RawMessage(tc.params))
			if e != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s (%s): %#v %v", tc.method, negotiated, got, e)
			}
		}
	}
	m, _ := LookupMethod("tasks/pushNotificationConfig/set", V03)
	if got, e := m.DecodeParams(json.RawMessage(`{"taskId":"t"}`)); got != nil || e == nil {
		t.Errorf("bad set params: %v %v", got, e)
	}
}

// TestPushShapesOfA2AGo checks the JSON the a2a-go v2 clients put on the
// wire for the push methods (1.0 directly, 0.3 through its a2av0 compat
// layer) against our decoders, and our encodings against its decoding.
func TestPushShapesOfA2AGo(t *testing.T) {
	pc := &sdk.PushConfig{Tenant: "acme", TaskID: "t1", ID: "c1", URL: "https://h/x", Token: "tok",
		Auth: &sdk.PushAuthInfo{Scheme: "Bearer", Credentials: "s"}}
	want := PushConfig{ID: "c1", TaskID: "t1", URL: "https://h/x", Token: "tok", Auth: &PushAuth{Scheme: "Bearer", Credentials: "s"}, Tenant: "acme"}

	// 1.0: the client marshals the request structs as the params.
	create10, e := DecodeCreatePushConfigParams(json.RawMessage(mustMarshal(pc)), V10)
	if e != nil || !reflect.DeepEqual(create10.Config, want) {
		t.Errorf("1.0 create: %+v %v", create10, e)
	}
	get10, e := DecodeGetPushConfigParams(json.RawMessage(mustMarshal(&sdk.GetTaskPushConfigRequest{TaskID: "t1", ID: "c1"})), V10)
	if e != nil || *get10 != (GetPushConfigParams{TaskID: "t1", ID: "c1"}) {
		t.Errorf("1.0 get: %+v %v", get10, e)
	}
	list10, e := DecodeListPushConfigsParams(json.RawMessage(mustMarshal(&sdk.ListTaskPushConfigRequest{TaskID: "t1", PageSize: 3, PageToken: "p"})), V10)
	if e != nil || *list10 != (ListPushConfigsParams{TaskID: "t1", PageSize: 3, PageToken: "p"}) {
		t.Errorf("1.0 list: %+v %v", list10, e)
	}
	del10, e := DecodeDeletePushConfigParams(json.RawMessage(mustMarshal(&sdk.DeleteTaskPushConfigRequest{TaskID: "t1", ID: "c1"})), V10)
	if e != nil || *del10 != (DeletePushConfigParams{TaskID: "t1", ID: "c1"}) {
		t.Errorf("1.0 delete: %+v %v", del10, e)
	}
	b, err := EncodePushConfig(V10, &want)
	if err != nil {
		t.Fatal(err)
	}
	var back sdk.PushConfig
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(&back, pc) {
		t.Errorf("1.0 encode read by a2a-go: %+v %v", back, err)
	}
	lb, err := EncodePushConfigList(V10, []PushConfig{want}, "")
	if err != nil {
		t.Fatal(err)
	}
	var list sdk.ListTaskPushConfigResponse
	if err := json.Unmarshal(lb, &list); err != nil || len(list.Configs) != 1 || !reflect.DeepEqual(list.Configs[0], pc) {
		t.Errorf("1.0 list read by a2a-go: %s %v", lb, err)
	}

	// 0.3: the compat client converts to the legacy params first.
	want03 := want
	want03.Tenant = ""
	create03, e := DecodeCreatePushConfigParams(json.RawMessage(mustMarshal(a2av0.FromV1PushConfig(pc))), V03)
	if e != nil || !reflect.DeepEqual(create03.Config, want03) {
		t.Errorf("0.3 set: %+v %v", create03, e)
	}
	get03, e := DecodeGetPushConfigParams(json.RawMessage(mustMarshal(a2av0.FromV1GetTaskPushConfigRequest(&sdk.GetTaskPushConfigRequest{TaskID: "t1", ID: "c1"}))), V03)
	if e != nil || *get03 != (GetPushConfigParams{TaskID: "t1", ID: "c1"}) {
		t.Errorf("0.3 get: %+v %v", get03, e)
	}
	list03, e := DecodeListPushConfigsParams(json.RawMessage(mustMarshal(a2av0.FromV1ListTaskPushConfigRequest(&sdk.ListTaskPushConfigRequest{TaskID: "t1"}))), V03)
	if e != nil || list03.TaskID != "t1" {
		t.Errorf("0.3 list: %+v %v", list03, e)
	}
	del03, e := DecodeDeletePushConfigParams(json.RawMessage(mustMarshal(a2av0.FromV1DeleteTaskPushConfigRequest(&sdk.DeleteTaskPushConfigRequest{TaskID: "t1", ID: "c1"}))), V03)
	if e != nil || *del03 != (DeletePushConfigParams{TaskID: "t1", ID: "c1"}) {
		t.Errorf("0.3 delete: %+v %v", del03, e)
	}
	b03, err := EncodePushConfig(V03, &want03)
	if err != nil {
		t.Fatal(err)
	}
	legacy := a2av0.FromV1PushConfig(&sdk.PushConfig{}) // a value of the legacy type, without importing it
	if err := json.Unmarshal(b03, legacy); err != nil {
		t.Fatal(err)
	}
	pc03 := *pc
	pc03.Tenant = ""
	if got := a2av0.ToV1PushConfig(legacy); !reflect.DeepEqual(got, &pc03) {
		t.Errorf("0.3 encode read by a2a-go: %+v", got)
	}
}
