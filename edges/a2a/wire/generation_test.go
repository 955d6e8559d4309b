package wire

import (
	"encoding/json"
	"testing"
)

func TestGenerationMismatchError(t *testing.T) {
	e := GenerationMismatch("task-1", 3, 5)
	if e.Code != -32010 || e.Reason() != "TASK_GENERATION_MISMATCH" || e.HTTPStatus() != 409 || e.HTTPStatusV100() != 409 {
		t.Fatalf("%+v: %s %d %d", e, e.Reason(), e.HTTPStatus(), e.HTTPStatusV100())
	}
	info := e.Data.([]any)[0].(ErrorInfo)
	if info.Metadata["taskId"] != "task-1" || info.Metadata["expectedGeneration"] != "3" || info.Metadata["currentGeneration"] != "5" {
		t.Fatalf("error info %+v", info)
	}
}

func TestIfGenerationMatchDecodes(t *testing.T) {
	msg := `"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"x"}]}`
	for body, want := range map[string]int64{
		`{` + msg + `,"configuration":{"ifGenerationMatch":7}}`:    7,
		`{` + msg + `,"configuration":{"ifGenerationMatch":"8"}}`:  8,
		`{` + msg + `,"configuration":{"ifGenerationMatch":null}}`: -1,
		`{` + msg + `}`: -1,
	} {
		p, e := DecodeSendParams(json.RawMessage(body))
		if e != nil {
			t.Fatalf("%s: %v", body, e)
		}
		got := int64(-1)
		if p.Configuration.IfGenerationMatch != nil {
			got = *p.Configuration.IfGenerationMatch
		}
		if got != want {
			t.Fatalf("%s: %d, want %d", body, got, want)
		}
	}
	for _, bad := range []string{`1.5`, `"x"`, `-1`, `true`} {
		if _, e := DecodeSendParams(json.RawMessage(`{` + msg + `,"configuration":{"ifGenerationMatch":` + bad + `}}`)); e == nil || e.Code != CodeInvalidParams {
			t.Fatalf("ifGenerationMatch %s: %v", bad, e)
		}
	}
}

func TestParseGeneration(t *testing.T) {
	if g, err := ParseGeneration(" 12 "); err != nil || g != 12 || GenerationEventID(g) != "12" {
		t.Fatalf("%d %v", g, err)
	}
	for _, bad := range []string{"0", "-3", "4.1", "12.0", ""} {
		if _, err := ParseGeneration(bad); err == nil {
			t.Fatalf("%q parsed", bad)
		}
	}
	if g, e := MetadataGeneration(map[string]any{LastGenerationKey: 4.0}, LastGenerationKey, "f"); e != nil || *g != 4 {
		t.Fatalf("%v %v", g, e)
	}
	if _, e := MetadataGeneration(map[string]any{LastGenerationKey: 4.5}, LastGenerationKey, "f"); e == nil {
		t.Fatal("4.5 read as a generation")
	}
	if ext := TaskGenerationExtension(); ext.URI != TaskGenerationExtensionURI || ext.Required || ext.Description == "" {
		t.Fatalf("%+v", ext)
	}
}
