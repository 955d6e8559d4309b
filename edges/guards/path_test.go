package guards

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// checkArgs runs g on a fresh call with the given arguments.
func checkArgs(t *testing.T, g Guard, args string) Result {
	t.Helper()
	r, err := g.Check(context.Background(), &Call{Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("%s.Check(%s): %v", g.Name(), args, err)
	}
	if !r.Allow && r.Details == "" {
		t.Errorf("%s denied %s without details", g.Name(), args)
	}
	if len(r.Details) > MaxDetails {
		t.Errorf("details longer than %d bytes", MaxDetails)
	}
	return r
}

func TestPathGuard(t *testing.T) {
	defaults, err := NewPathGuard(PathConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rooted, err := NewPathGuard(PathConfig{AllowedRoots: []string{"/workspace/", "/tmp/scratch", "."}})
	if err != nil {
		t.Fatal(err)
	}
	absOnly, err := NewPathGuard(PathConfig{AllowedRoots: []string{"/workspace"}, Forbidden: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	dot, err := NewPathGuard(PathConfig{AllowedRoots: []string{"."}})
	if err != nil {
		t.Fatal(err)
	}
	slash, err := NewPathGuard(PathConfig{AllowedRoots: []string{"/"}})
	if err != nil {
		t.Fatal(err)
	}
	custom, err := NewPathGuard(PathConfig{Keys: []string{"src"}, Forbidden: []string{"**/*.pem", "secrets/**", "/var/lib/**/db", "~/.config/**"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		g       Guard
		args    string
		details string // "" = allow
	}{
		{"plain relative", defaults, `{"path":"docs/readme.md"}`, ""},
		{"plain absolute", defaults, `{"path":"/home/a/project/main.go"}`, ""},
		{"not a path key", defaults, `{"note":"../../etc/shadow"}`, ""},
		{"no arguments", defaults, ``, ""},
		{"scalar arguments", defaults, `"/etc/shadow"`, ""},
		{"dotdot in a name is fine", defaults, `{"path":"docs/a..b/c...d"}`, ""},
		{"traversal", defaults, `{"path":"docs/../../etc/hosts"}`, `/path: ".." traversal`},
		{"traversal at the end", defaults, `{"path":"docs/.."}`, `/path: ".." traversal`},
		{"traversal backslash", defaults, `{"file":"docs\\..\\..\\secret"}`, `/file: ".." traversal`},
		{"traversal percent-encoded", defaults, `{"path":"docs/%2e%2e/%2E%2E/etc"}`, `/path: ".." traversal (percent-encoded)`},
		{"traversal double-encoded", defaults, `{"path":"docs/%252e%252e/x"}`, `".." traversal (percent-encoded)`},
		{"traversal encoded slash", defaults, `{"path":"docs..%2f..%2fetc"}`, `".." traversal (percent-encoded)`},
		{"NUL byte", defaults, `{"path":"docs/readme.md\u0000.png"}`, `/path: NUL byte`},
		{"encoded NUL byte", defaults, `{"path":"docs/readme.md%00.png"}`, `/path: NUL byte (percent-encoded)`},
		{"ssh absolute", defaults, `{"path":"/home/a/.ssh/id_rsa"}`, `/path: forbidden by "**/.ssh/**"`},
		{"ssh relative", defaults, `{"path":".ssh/id_rsa"}`, `/path: forbidden by "**/.ssh/**"`},
		{"ssh tilde", defaults, `{"path":"~/.ssh/authorized_keys"}`, `forbidden by "**/.ssh/**"`},
		{"ssh directory itself", defaults, `{"dir":"/home/a/.ssh"}`, `/dir: forbidden by "**/.ssh/**"`},
		{"ssh upper case", defaults, `{"path":"/Users/a/.SSH/config"}`, `forbidden by "**/.ssh/**"`},
		{"ssh unclean", defaults, `{"path":"/home/a//./.ssh///known_hosts"}`, `forbidden by "**/.ssh/**"`},
		{"ssh windows", defaults, `{"path":"C:\\Users\\a\\.ssh\\id_ed25519"}`, `forbidden by "**/.ssh/**"`},
		{"id_rsa anywhere", defaults, `{"path":"backup/id_rsa.pub"}`, `forbidden by "**/id_rsa*"`},
		{"aws", defaults, `{"path":"/root2/.aws/credentials"}`, `forbidden by "**/.aws/**"`},
		{"env", defaults, `{"filename":".env"}`, `/filename: forbidden by "**/.env"`},
		{"env nested", defaults, `{"filename":"app/.env.production"}`, `forbidden by "**/.env.*"`},
		{"envrc is not env", defaults, `{"filename":"app/.envrc"}`, ""},
		{"git config", defaults, `{"path":"repo/.git/config"}`, `forbidden by "**/.git/config"`},
		{"git objects fine", defaults, `{"path":"repo/.git/HEAD"}`, ""},
		{"etc shadow", defaults, `{"path":"/etc/shadow"}`, `forbidden by "/etc/shadow"`},
		{"etc passwd unclean", defaults, `{"path":"//etc//passwd/"}`, `forbidden by "/etc/passwd"`},
		{"relative etc is not /etc", defaults, `{"path":"etc/passwd"}`, ""},
		{"proc", defaults, `{"path":"/proc/self/environ"}`, `forbidden by "/proc/**"`},
		{"proc itself", defaults, `{"path":"/proc"}`, `forbidden by "/proc/**"`},
		{"relative proc dir is fine", defaults, `{"path":"src/proc/main.go"}`, ""},
		{"root home", defaults, `{"cwd":"/root"}`, `/cwd: forbidden by "/root/**"`},
		{"file URL", defaults, `{"path":"file:///etc/shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL with host", defaults, `{"path":"FILE://localhost/home/a/.ssh/id_rsa"}`, `forbidden by "**/.ssh/**" (file URL)`},
		{"file URL one slash", defaults, `{"path":"file:/etc/shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL upper case", defaults, `{"path":"FILE:/etc/passwd"}`, `forbidden by "/etc/passwd" (file URL)`},
		{"file URL no slash", defaults, `{"path":"file:etc/shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL encoded slashes", defaults, `{"path":"file:%2Fetc%2Fshadow"}`, `forbidden by "/etc/shadow" (file URL) (percent-encoded)`},
		{"file URL backslashes", defaults, `{"path":"file:\\\\\\etc\\shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL backslash host", defaults, `{"path":"file:\\\\localhost\\etc\\shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL four slashes", defaults, `{"path":"file:////etc/shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL host read as a directory", defaults, `{"path":"file://etc/shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL host only", defaults, `{"path":"file://proc"}`, `forbidden by "/proc/**" (file URL)`},
		{"file URL fragment", defaults, `{"path":"file:///etc/shadow#x"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL query", defaults, `{"path":"file:/etc/passwd?x=1"}`, `forbidden by "/etc/passwd" (file URL)`},
		{"file URL leading control", defaults, `{"path":"\u0001file:/etc/shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL tab", defaults, `{"path":"fi\tle:/etc/shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL tab in the slashes", defaults, `{"path":"file:/\t/localhost/etc/shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"file URL traversal", defaults, `{"path":"file:docs/../x"}`, `".." traversal (file URL)`},
		{"file URL percent-encoded", defaults, `{"path":"file%3A%2F%2F%2Fetc%2Fshadow"}`, `forbidden by "/etc/shadow" (file URL) (percent-encoded)`},
		{"file URL encoded scheme", defaults, `{"path":"%66ile:/etc/shadow"}`, `forbidden by "/etc/shadow" (file URL) (percent-encoded)`},
		{"file-like names", defaults, `{"paths":["files/a.txt","file.txt","filename:x","profile:/etc/shadow"]}`, ""},
		{"encoded dot", defaults, `{"path":"/home/a/%2essh/config"}`, `forbidden by "**/.ssh/**" (percent-encoded)`},
		{"array of paths", defaults, `{"paths":["docs/a.md","/etc/sudoers"]}`, `/paths/1: forbidden by "/etc/sudoers"`},
		{"nested arrays", defaults, `{"paths":[["ok"],["/etc/shadow"]]}`, `/paths/1/0: forbidden by "/etc/shadow"`},
		{"nested key", defaults, `{"ops":[{"op":"copy","source":"a","destination":"/root/x"}]}`, `/ops/0/destination: forbidden by "/root/**"`},
		{"camelCase key", defaults, `{"filePath":"/etc/shadow"}`, `/filePath: forbidden by "/etc/shadow"`},
		{"kebab key", defaults, `{"FILE-PATH":"/etc/shadow"}`, `/FILE-PATH: forbidden by "/etc/shadow"`},
		{"non-string under a key", defaults, `{"path":42,"file":{"name":"x"}}`, ""},
		{"escaped pointer", defaults, `{"a/b":{"path":"/etc/shadow"}}`, `/a~1b/path: forbidden by "/etc/shadow"`},
		{"first in key order", defaults, `{"target":"/etc/shadow","dir":"/proc/1","path":"ok"}`, `/dir: forbidden by "/proc/**"`},
		// allowed roots
		{"inside root", rooted, `{"path":"/workspace/src/a.go"}`, ""},
		{"root itself", rooted, `{"path":"/workspace"}`, ""},
		{"second root", rooted, `{"path":"/tmp/scratch/out.txt"}`, ""},
		{"relative under dot", rooted, `{"path":"src/a.go"}`, ""},
		{"outside roots", rooted, `{"path":"/etc/hosts"}`, `/path: outside the allowed roots`},
		{"sibling with root prefix", rooted, `{"path":"/workspace-other/a"}`, `/path: outside the allowed roots`},
		{"tilde is not relative", rooted, `{"path":"~/notes"}`, `/path: outside the allowed roots`},
		{"forbidden inside root", rooted, `{"path":"/workspace/.env"}`, `forbidden by "**/.env"`},
		{"dot root", dot, `{"path":"docs/readme.md"}`, ""},
		{"dot root file URL one slash", dot, `{"path":"file:/etc/shadow"}`, `forbidden by "/etc/shadow" (file URL)`},
		{"dot root file URL upper case", dot, `{"path":"FILE:/etc/passwd"}`, `forbidden by "/etc/passwd" (file URL)`},
		{"dot root file URL encoded", dot, `{"path":"file:%2Fetc%2Fshadow"}`, `outside the allowed roots (file URL)`},
		{"dot root file URL outside", dot, `{"path":"file:/srv/data"}`, `outside the allowed roots (file URL)`},
		{"dot root file URL relative-looking", dot, `{"path":"file:docs/readme.md"}`, `outside the allowed roots (file URL)`},
		{"file URL inside root", absOnly, `{"path":"file:///workspace/a.go"}`, ""},
		{"file URL localhost inside root", absOnly, `{"path":"file://localhost/workspace/a.go"}`, ""},
		{"file URL other host inside root", absOnly, `{"path":"file://etc/workspace/a.go"}`, `outside the allowed roots (file URL)`},
		{"relative without dot root", absOnly, `{"path":"src/a.go"}`, `outside the allowed roots`},
		{"root case sensitive", absOnly, `{"path":"/Workspace/a"}`, `outside the allowed roots`},
		{"empty path is relative", absOnly, `{"path":""}`, `outside the allowed roots`},
		{"no forbidden patterns", absOnly, `{"path":"/workspace/.ssh/id_rsa"}`, ""},
		{"root slash takes absolute", slash, `{"path":"/srv/data"}`, ""},
		{"root slash refuses relative", slash, `{"path":"data"}`, `outside the allowed roots`},
		// custom keys and patterns
		{"custom key", custom, `{"src":"certs/server.pem"}`, `/src: forbidden by "**/*.pem"`},
		{"default key not used", custom, `{"path":"certs/server.pem"}`, ""},
		{"relative pattern", custom, `{"src":"secrets/db/pass"}`, `forbidden by "secrets/**"`},
		{"relative pattern on absolute", custom, `{"src":"/secrets/x"}`, `forbidden by "secrets/**"`},
		{"relative pattern is rooted", custom, `{"src":"a/secrets/x"}`, ""},
		{"doublestar in the middle", custom, `{"src":"/var/lib/a/b/c/db"}`, `forbidden by "/var/lib/**/db"`},
		{"doublestar zero segments", custom, `{"src":"/var/lib/db"}`, `forbidden by "/var/lib/**/db"`},
		{"doublestar no match", custom, `{"src":"/var/lib/a/db2"}`, ""},
		{"tilde pattern", custom, `{"src":"~/.config/gh/hosts.yml"}`, `forbidden by "~/.config/**"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := checkArgs(t, tt.g, tt.args)
			if tt.details == "" {
				if !r.Allow || r.Details != "" {
					t.Errorf("got %+v, want allow", r)
				}
				return
			}
			if r.Allow || !strings.Contains(r.Details, tt.details) {
				t.Errorf("got %+v, want a deny with %q", r, tt.details)
			}
		})
	}
}

func TestPathGuardConfig(t *testing.T) {
	bad := []PathConfig{
		{Keys: []string{"__"}},
		{Keys: []string{strings.Repeat("k", maxPathKey+1)}},
		{Forbidden: []string{""}},
		{Forbidden: []string{"a/[b"}},
		{Forbidden: []string{"a/../b"}},
		{Forbidden: []string{"."}},
		{AllowedRoots: []string{""}},
		{AllowedRoots: []string{"/a/../b"}},
		{AllowedRoots: []string{"/a\x00"}},
	}
	for _, cfg := range bad {
		if _, err := NewPathGuard(cfg); err == nil || !strings.HasPrefix(err.Error(), "path guard: ") {
			t.Errorf("NewPathGuard(%+v) error = %v", cfg, err)
		}
	}
	g, err := NewPathGuard(PathConfig{})
	if err != nil || g.Name() != "PathGuard" {
		t.Fatalf("%v %v", g, err)
	}
	d := DefaultForbiddenPaths()
	d[0] = "changed"
	if DefaultForbiddenPaths()[0] == "changed" {
		t.Error("DefaultForbiddenPaths shares its slice")
	}
	if _, err := g.Check(context.Background(), &Call{Arguments: json.RawMessage(`{`)}); err == nil {
		t.Error("invalid arguments: no error")
	}
}

func TestPathGuardManyPatternsAndSegments(t *testing.T) {
	// More patterns than one word of the tried-set, and a path that
	// repeats a literal many times: it must stay fast and correct.
	var pats []string
	for i := 0; i < 100; i++ {
		pats = append(pats, "**/config/x"+strings.Repeat("y", i))
	}
	pats = append(pats, "**/config/zz")
	g, err := NewPathGuard(PathConfig{Forbidden: pats})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("config/", 20000)
	if r := checkArgs(t, g, `{"path":"`+long+`end"}`); !r.Allow {
		t.Errorf("got %+v", r)
	}
	if r := checkArgs(t, g, `{"path":"`+long+`zz"}`); r.Allow || !strings.Contains(r.Details, `forbidden by "**/config/zz"`) {
		t.Errorf("got %+v", r)
	}
}

func TestMatchSegments(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"**", "", true}, {"**", "a/b", true}, {"a/**", "a", true}, {"a/**", "ab", false},
		{"**/b", "b", true}, {"**/b", "a/b", true}, {"**/b", "a/b/c", false}, {"a/**/b/**/c", "a/x/b/y/z/c", true},
		{"a/**/b/**/c", "a/c", false}, {"*/b", "a/b", true}, {"*/b", "a/x/b", false}, {"a/?", "a/bc", false},
		{"a/[bc]", "a/c", true}, {"**/**/x", "a/x", true},
	}
	for _, tt := range tests {
		gp, err := compileGlob(tt.pattern)
		if err != nil {
			t.Fatal(err)
		}
		if got := gp.match(tt.path); got != tt.want {
			t.Errorf("match(%q, %q) = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}
