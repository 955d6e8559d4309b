// Package chio_test holds the checks on the repository's own documentation:
// README.md and docs/*.md. It has no code of its own.
package chio_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxReadmeLines is the README's budget: it is the front door, and the
// reference lives under docs/.
const maxReadmeLines = 200

// docFiles is README.md and every docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md"}, files...)
	return files
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mdLink matches a Markdown link or image target: [text](target) or ![alt](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinks checks that every relative link in README.md and docs/*.md
// names a file that exists, relative to the page, and carries no anchor
// (headings move; files are what the test can hold still).
func TestDocLinks(t *testing.T) {
	for _, file := range docFiles(t) {
		t.Run(file, func(t *testing.T) {
			text := readDoc(t, file)
			links := mdLink.FindAllStringSubmatch(text, -1)
			for _, m := range links {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				if strings.Contains(target, "#") {
					t.Errorf("%s: link %q has an anchor; link the file", file, target)
					continue
				}
				p := filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s: link %q: %v", file, target, err)
				}
			}
		})
	}
}

// TestDocReadmeLength checks the README stays a front door.
func TestDocReadmeLength(t *testing.T) {
	n := strings.Count(readDoc(t, "README.md"), "\n")
	if n > maxReadmeLines {
		t.Errorf("README.md has %d lines; at most %d (move reference text to docs/)", n, maxReadmeLines)
	}
}

// TestDocNoOutsideReferences checks the docs, and the comments of the code,
// do not refer to things a reader of this repository cannot see.
func TestDocNoOutsideReferences(t *testing.T) {
	forbidden := []struct {
		name string
		re   *regexp.Regexp
	}{
		{"a sibling checkout", regexp.MustCompile(`\.\./shared`)},
		{"an issue number", regexp.MustCompile(`(?i)\bissues? #?\d+`)},
		{"the seed", regexp.MustCompile(`(?i)\bthe seed\b|\bseed's\b`)},
		{"the bridges spec", regexp.MustCompile(`(?i)\bbridges spec`)},
		{"a wire reference section", regexp.MustCompile(`(?i)wire reference §|chio-wire(\.md)? §`)},
	}
	for _, file := range append(docFiles(t), sourceFiles(t)...) {
		text := readDoc(t, file)
		for i, line := range strings.Split(text, "\n") {
			for _, f := range forbidden {
				if f.re.MatchString(line) {
					t.Errorf("%s:%d refers to %s: %q", file, i+1, f.name, strings.TrimSpace(line))
				}
			}
		}
	}
}

// sourceFiles are the repository's Go, JavaScript and shell files, but
// this one (which names what it forbids).
func sourceFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir // .git, .chio, .artifacts
		}
		switch filepath.Ext(path) {
		case ".go", ".js", ".sh":
			if path != "docs_test.go" {
				out = append(out, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDocTourInScript checks that every command of the tours in README.md
// and docs/tour.md (the shell blocks right after a `<!-- tour -->` line)
// is one scripts/tour.sh runs, so neither tour can rot.
func TestDocTourInScript(t *testing.T) {
	var blocks []string
	for _, doc := range []string{"README.md", "docs/tour.md"} {
		marked := markedShellBlocks(readDoc(t, doc), "<!-- tour -->")
		if len(marked) == 0 {
			t.Fatalf("%s has no shell block marked <!-- tour -->", doc)
		}
		blocks = append(blocks, marked...)
	}
	script := commandLines(readDoc(t, "scripts/tour.sh"))
	for _, block := range blocks {
		for _, cmd := range commandLines(block) {
			t.Run(cmd, func(t *testing.T) {
				for _, s := range script {
					if sameCommand(cmd, s) {
						return
					}
				}
				t.Errorf("tour command is not in scripts/tour.sh: %s", cmd)
			})
		}
	}
}

// TestDocTourNormalisation pins what sameCommand treats as the same command.
func TestDocTourNormalisation(t *testing.T) {
	cases := []struct {
		readme, script string
		same           bool
	}{
		{`curl -s -H "$OP" http://127.0.0.1:8080/v1/receipts/$ID > receipt.json`,
			`curl -sf -H "$OP" "http://$http/v1/receipts/$ID" > receipt.json`, true},
		{`curl -s http://127.0.0.1:8080/v1/receipts/$ID/tlog-proof`,
			`curl -sf "http://$http/v1/receipts/$ID"`, false},
		{`bin/chio emit --nats nats://127.0.0.1:4222 --count 2 | tee ids.txt`,
			`bin/chio emit --nats "nats://$natsaddr" --count 2 | tee ids.txt`, true},
		{`bin/chio emit --nats nats://127.0.0.1:4222 --count 2`,
			`bin/chio emit --nats "nats://$natsaddr"`, false},
		{`go build -o bin/chio ./cmd/chio`, `go build -o "$work/bin/chio" ./cmd/chio`, true},
		{`bin/chio verify --receipt r.json`, `bin/chio monitor --receipt r.json`, false},
		{`ID=$(head -1 ids.txt)`, `ID=$(head -1 ids.txt)`, true},
		{`ID=$(head -2 ids.txt)`, `ID=$(head -1 ids.txt)`, false},
	}
	for _, c := range cases {
		if got := sameCommand(c.readme, c.script); got != c.same {
			t.Errorf("sameCommand(%q, %q) = %v, want %v", c.readme, c.script, got, c.same)
		}
	}
}

// markedShellBlocks returns the body of each ```sh block that follows a line
// equal to marker (blank lines between them allowed).
func markedShellBlocks(text, marker string) []string {
	var blocks []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != marker {
			continue
		}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j >= len(lines) || strings.TrimSpace(lines[j]) != "```sh" {
			continue
		}
		var body []string
		for j++; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, lines[j])
		}
		blocks = append(blocks, strings.Join(body, "\n"))
		i = j
	}
	return blocks
}

// commandLines joins continuation lines and drops comments and blank lines.
func commandLines(text string) []string {
	var out []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur.WriteString(strings.TrimSuffix(line, `\`))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(line)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// normalise makes a README command and a tour.sh command comparable: the
// README's fixed addresses become the script's variables, quotes go, and
// curl's -sf (the script fails on an HTTP error) is the README's -s.
func normalise(cmd string) []string {
	if i := strings.Index(cmd, " #"); i >= 0 {
		cmd = cmd[:i] // a trailing comment
	}
	r := strings.NewReplacer(
		"127.0.0.1:8080", "$http",
		"127.0.0.1:4222", "$natsaddr",
		"127.0.0.1:8082", "$edgeaddr",
		"127.0.0.1:8084", "$bridgeaddr",
		"127.0.0.1:8085", "$adapteraddr",
		"127.0.0.1:9090", "$protectaddr",
		"127.0.0.1:9998", "$oidcaddr",
		`"`, "",
		`'`, "",
	)
	fields := strings.Fields(r.Replace(cmd))
	for i, f := range fields {
		f = strings.TrimSuffix(f, ";") // the script's "cmd; echo"
		fields[i] = f
		switch f {
		case "-sf":
			fields[i] = "-s"
		case "-sfN":
			fields[i] = "-sN"
		}
	}
	return fields
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// sameCommand reports whether the script's command runs what the README's
// shows: an assignment must be the same text; any other command must have the
// same command words (those before the first flag, pipe or redirect), every
// flag the README's has, and every URL the README's names.
func sameCommand(readme, script string) bool {
	rf, sf := normalise(readme), normalise(script)
	if len(rf) == 0 || len(sf) == 0 {
		return false
	}
	if assignment.MatchString(rf[0]) {
		return strings.Join(rf, " ") == strings.Join(sf, " ")
	}
	rw, sw := commandWords(rf), commandWords(sf)
	if strings.Join(rw, " ") != strings.Join(sw, " ") {
		return false
	}
	have := make(map[string]bool, len(sf))
	for _, f := range sf {
		have[f] = true
	}
	for _, f := range rf {
		if (strings.HasPrefix(f, "-") || strings.Contains(f, "://")) && !have[f] {
			return false
		}
	}
	return true
}

func commandWords(fields []string) []string {
	var words []string
	for _, f := range fields {
		if strings.HasPrefix(f, "-") || f == "|" || strings.HasPrefix(f, ">") || strings.HasPrefix(f, "<") || len(words) == 3 {
			break
		}
		words = append(words, f)
	}
	return words
}
