package conf

import (
	"fmt"
	"strconv"
	"strings"
)

// keyLines maps each key defined in a TOML document to the 1-based line that
// defines it, so problems can point at the file. Keys of the n-th [[topic]]
// table are named "topic[n].key" (0-based), those of the m-th [[topic.filter]]
// in it "topic[n].filter[m].key", and likewise for every array of tables;
// other keys are dot-joined paths.
// BurntSushi/toml does not export key positions, hence this small scanner.
// It runs only on input the TOML parser accepted, and on anything it does not
// understand it stops and returns what it has (callers treat a missing line
// as 0 = unknown).
func keyLines(data []byte) map[string]int {
	s := &scanner{b: data, line: 1}
	if strings.HasPrefix(string(data), "\uFEFF") {
		s.i = 3
	}
	out := map[string]int{}
	set := func(k string, l int) {
		if _, ok := out[k]; !ok {
			out[k] = l
		}
	}
	// arrays counts the tables of each array of tables, by resolved path
	// ("topic", "topic[0].filter"): the index of the current one.
	prefix, arrays := "", map[string]int{}
	for {
		s.skipBlank()
		if s.eof() {
			return out
		}
		line := s.line
		if s.b[s.i] == '[' { // table header
			arr := s.peek(1) == '['
			s.i++
			if arr {
				s.i++
			}
			path, ok := s.key()
			if !ok || s.peek(0) != ']' || (arr && s.peek(1) != ']') {
				return out
			}
			s.i++
			if arr {
				s.i++
			}
			prefix = ""
			for i, part := range path {
				if prefix != "" {
					prefix += "."
				}
				prefix += part
				n, seen := arrays[prefix]
				if arr && i == len(path)-1 {
					if !seen {
						n = -1
					}
					n++
					arrays[prefix] = n
					seen = true
				}
				if seen {
					prefix = fmt.Sprintf("%s[%d]", prefix, n)
				}
			}
			set(prefix, line)
			continue
		}
		path, ok := s.key()
		if !ok || s.peek(0) != '=' {
			return out
		}
		s.i++
		k := strings.Join(path, ".")
		if prefix != "" {
			k = prefix + "." + k
		}
		set(k, line)
		if !s.skipValue() {
			return out
		}
	}
}

type scanner struct {
	b    []byte
	i    int
	line int
}

func (s *scanner) eof() bool { return s.i >= len(s.b) }

func (s *scanner) peek(n int) byte {
	if s.i+n < len(s.b) {
		return s.b[s.i+n]
	}
	return 0
}

func (s *scanner) skipSpace() {
	for !s.eof() && (s.b[s.i] == ' ' || s.b[s.i] == '\t') {
		s.i++
	}
}

// skipBlank skips whitespace, newlines and comments.
func (s *scanner) skipBlank() {
	for !s.eof() {
		switch s.b[s.i] {
		case ' ', '\t', '\r':
			s.i++
		case '\n':
			s.i++
			s.line++
		case '#':
			for !s.eof() && s.b[s.i] != '\n' {
				s.i++
			}
		default:
			return
		}
	}
}

// key reads a dotted key of bare and quoted parts, and the spaces after it.
func (s *scanner) key() ([]string, bool) {
	var path []string
	for {
		s.skipSpace()
		var part string
		switch s.peek(0) {
		case '"', '\'':
			q := s.b[s.i]
			start := s.i
			if !s.skipString() {
				return nil, false
			}
			part = string(s.b[start+1 : s.i-1])
			if q == '"' {
				if u, err := strconv.Unquote(`"` + part + `"`); err == nil {
					part = u
				}
			}
		default:
			start := s.i
			for !s.eof() && isBare(s.b[s.i]) {
				s.i++
			}
			if s.i == start {
				return nil, false
			}
			part = string(s.b[start:s.i])
		}
		path = append(path, part)
		s.skipSpace()
		if s.peek(0) != '.' {
			return path, true
		}
		s.i++
	}
}

func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// skipString skips a basic, literal or multi-line string starting at s.i,
// counting newlines. It reports false at an unterminated string.
func (s *scanner) skipString() bool {
	q := s.b[s.i]
	multi := s.peek(1) == q && s.peek(2) == q
	if multi {
		s.i += 3
	} else {
		s.i++
	}
	for !s.eof() {
		c := s.b[s.i]
		switch {
		case c == '\\' && q == '"':
			if s.peek(1) == '\n' {
				s.line++
			}
			s.i += 2
			continue
		case c == '\n':
			if !multi {
				return false
			}
			s.line++
		case c == q && !multi:
			s.i++
			return true
		case c == q && s.peek(1) == q && s.peek(2) == q:
			s.i += 3
			for n := 0; n < 2 && s.peek(0) == q; n++ { // up to two quotes may end the content
				s.i++
			}
			return true
		}
		s.i++
	}
	return false
}

// skipValue skips a value up to and including the end of its line, following
// strings, arrays and inline tables across lines.
func (s *scanner) skipValue() bool {
	depth := 0
	for !s.eof() {
		switch c := s.b[s.i]; c {
		case '"', '\'':
			if !s.skipString() {
				return false
			}
			continue
		case '[', '{':
			depth++
		case ']', '}':
			depth--
		case '#':
			for !s.eof() && s.b[s.i] != '\n' {
				s.i++
			}
			continue
		case '\n':
			s.i++
			s.line++
			if depth <= 0 {
				return true
			}
			continue
		}
		s.i++
	}
	return true
}
