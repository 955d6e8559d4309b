package schemas

import (
	"net/http"
	"testing"
)

func TestCapabilityFromHeaders(t *testing.T) {
	cases := []struct {
		h       http.Header
		want    string
		wantErr bool
	}{
		{http.Header{"Authorization": {"Bearer abc"}}, "abc", false},
		{http.Header{"Authorization": {"bearer  abc "}}, "abc", false},
		{http.Header{"X-Chio-Capability": {"abc"}}, "abc", false},
		{http.Header{"Authorization": {"Bearer abc"}, "X-Chio-Capability": {"abc"}}, "abc", false},
		{http.Header{"Authorization": {"Bearer abc"}, "X-Chio-Capability": {"xyz"}}, "", true},
		{http.Header{"Authorization": {"Basic abc"}}, "", true},
		{http.Header{"Authorization": {"Bearer"}}, "", true},
		{http.Header{}, "", true},
	}
	for i, c := range cases {
		got, err := CapabilityFromHeaders(c.h)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("case %d: got %q, %v", i, got, err)
		}
	}
}
