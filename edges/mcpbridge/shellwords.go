package mcpbridge

import (
	"errors"
	"strings"
)

// SplitCommand splits a command line into words as a POSIX shell does,
// without expanding anything: words are separated by unquoted blanks;
// single quotes keep everything up to the next single quote; double quotes
// keep everything but a backslash before $, `, ", \ or a newline; an
// unquoted backslash keeps the next character (and drops a newline). An
// unterminated quote or a trailing backslash is an error, and so is an
// empty line. Variables, globs, ~ and operators (| ; &) are not special:
// the command is run directly, never through a shell.
func SplitCommand(line string) ([]string, error) {
	var (
		words []string
		cur   strings.Builder
		in    bool // a word has started (so '' is an empty word)
	)
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\\':
			if i+1 >= len(rs) {
				return nil, errors.New("split command: trailing backslash")
			}
			i++
			if rs[i] != '\n' {
				cur.WriteRune(rs[i])
			}
			in = true
		case c == '\'':
			end := indexRune(rs, i+1, '\'')
			if end < 0 {
				return nil, errors.New("split command: unterminated single quote")
			}
			cur.WriteString(string(rs[i+1 : end]))
			i, in = end, true
		case c == '"':
			j := i + 1
			for ; j < len(rs) && rs[j] != '"'; j++ {
				if rs[j] == '\\' && j+1 < len(rs) && strings.ContainsRune("$`\"\\\n", rs[j+1]) {
					j++
					if rs[j] == '\n' {
						continue
					}
				}
				cur.WriteRune(rs[j])
			}
			if j >= len(rs) {
				return nil, errors.New("split command: unterminated double quote")
			}
			i, in = j, true
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, errors.New("split command: no command")
	}
	return words, nil
}

func indexRune(rs []rune, from int, r rune) int {
	for i := from; i < len(rs); i++ {
		if rs[i] == r {
			return i
		}
	}
	return -1
}
