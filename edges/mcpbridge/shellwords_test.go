package mcpbridge

import (
	"slices"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	cases := []struct {
		line    string
		want    []string
		wantErr bool
	}{
		{"npx -y server", []string{"npx", "-y", "server"}, false},
		{"  a \t b\n c  ", []string{"a", "b", "c"}, false},
		{`a 'b c' "d e"`, []string{"a", "b c", "d e"}, false},
		{`a 'it''s'`, []string{"a", "its"}, false},
		{`a "it's"`, []string{"a", "it's"}, false},
		{`a 'x\y'`, []string{"a", `x\y`}, false},
		{`a "x\y \"q\" \\ \$HOME"`, []string{"a", `x\y "q" \ $HOME`}, false},
		{`a b\ c`, []string{"a", "b c"}, false},
		{`a ''`, []string{"a", ""}, false},
		{`a "" b`, []string{"a", "", "b"}, false},
		{`pre'fix'"ed"`, []string{"prefixed"}, false},
		{"a \\\nb", []string{"a", "b"}, false},
		{`$HOME ~ * | ;`, []string{"$HOME", "~", "*", "|", ";"}, false},
		{`"héllo wörld"`, []string{"héllo wörld"}, false},
		{`a 'b`, nil, true},
		{`a "b`, nil, true},
		{`a \`, nil, true},
		{``, nil, true},
		{`   `, nil, true},
	}
	for _, c := range cases {
		got, err := SplitCommand(c.line)
		if (err != nil) != c.wantErr || !slices.Equal(got, c.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q (error %v)", c.line, got, err, c.want, c.wantErr)
		}
	}
}
