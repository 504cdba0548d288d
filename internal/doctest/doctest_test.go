package doctest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const sample = "# Title\n" +
	"\n" +
	"```sh\n" +
	"echo not marked\n" +
	"```\n" +
	"\n" +
	"<!-- doctest: tour -->\n" +
	"```sh\n" +
	"make run    # starts it\n" +
	"# ... ready on 127.0.0.1:8123\n" +
	"\n" +
	"for id in 1 2; do\n" +
	"  echo $id \\\n" +
	"    more   # inside\n" +
	"done\n" +
	"sed 's#a#b#' f > g   # a # in quotes is not a comment\n" +
	"```\n" +
	"\n" +
	"1. A step:\n" +
	"\n" +
	"   <!-- doctest: tour -->\n" +
	"   ```bash\n" +
	"   $ printf 'stats\\r\\n' | nc -q1 127.0.0.1 8123\n" +
	"   result 200 319 2147483647\n" +
	"   ...\n" +
	"   END\n" +
	"   $ echo no output shown\n" +
	"   $ echo a \\\n" +
	"   b\n" +
	"   a b\n" +
	"\n" +
	"   ```\n" +
	"\n" +
	"<!-- doctest: other -->\n" +
	"~~~sh\n" +
	"true\n" +
	"~~~\n"

func TestParse(t *testing.T) {
	blocks, err := Parse("x.md", []byte(sample))
	require.NoError(t, err)
	require.Len(t, blocks, 3)
	require.Equal(t, "tour", blocks[0].Name)
	require.Equal(t, 7, blocks[0].Line)
	cmds := blocks[0].Commands
	require.Len(t, cmds, 3)
	require.Equal(t, Command{File: "x.md", Line: 9, Text: "make run    # starts it", Key: "make run",
		Comment: "starts it\n... ready on 127.0.0.1:8123"}, cmds[0])
	require.Equal(t, 12, cmds[1].Line)
	require.Equal(t, "for id in 1 2; do\n  echo $id \\\n    more   # inside\ndone", cmds[1].Text)
	require.Equal(t, "for id in 1 2; do", cmds[1].Key)
	require.Equal(t, "inside", cmds[1].Comment)
	require.Equal(t, "sed 's#a#b#' f > g", cmds[2].Key)
	require.Equal(t, "a # in quotes is not a comment", cmds[2].Comment)

	tr := blocks[1].Commands
	require.Equal(t, "tour", blocks[1].Name)
	require.Len(t, tr, 3)
	require.Equal(t, `printf 'stats\r\n' | nc -q1 127.0.0.1 8123`, tr[0].Text)
	require.Equal(t, 23, tr[0].Line)
	require.Equal(t, []string{"result 200 319 2147483647", "...", "END"}, tr[0].Output)
	require.Nil(t, tr[1].Output)
	require.Equal(t, "echo a \\\nb", tr[2].Text)
	require.Equal(t, []string{"a b"}, tr[2].Output, "trailing blank lines are not output")

	require.Equal(t, "other", blocks[2].Name)
	require.Len(t, Walkthrough(blocks, "tour"), 6)
	require.Len(t, Walkthrough(blocks, "none"), 0)
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"no fence", "<!-- doctest: a -->\ntext\n", "x.md:1: doctest marker not followed by a ```sh or ```bash fence"},
		{"blank line", "<!-- doctest: a -->\n\n```sh\ntrue\n```\n", "not followed by"},
		{"go fence", "<!-- doctest: a -->\n```go\nx\n```\n", "not followed by"},
		{"bad name", "<!-- doctest: A b -->\n```sh\ntrue\n```\n", `doctest name "A b"`},
		{"malformed", "<!-- doctest a -->\n```sh\ntrue\n```\n", "malformed doctest marker"},
		{"unclosed", "<!-- doctest: a -->\n```sh\ntrue\n", "unclosed fence"},
		{"at end", "<!-- doctest: a -->", "at the end of the file"},
		{"empty", "<!-- doctest: a -->\n```sh\n\n```\n", "has no command"},
		{"incomplete", "<!-- doctest: a -->\n```sh\nfor i in 1; do\n  true\n```\n", "x.md:3: not a complete bash command"},
		{"quote", "<!-- doctest: a -->\n```sh\necho 'x\n```\n", "x.md:3: not a complete bash command"},
		{"comment first", "<!-- doctest: a -->\n```sh\n# hi\ntrue\n```\n", "a comment before the first command"},
		{"output first", "<!-- doctest: a -->\n```sh\nout\n$ true\n```\n", "output before the first $ command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("x.md", []byte(tc.src))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// A marker quoted in prose is text, not a marker.
	blocks, err := Parse("x.md", []byte("A block runs when the line before it is `<!-- doctest: NAME -->`.\n"))
	require.NoError(t, err)
	require.Empty(t, blocks)
	// A marker inside another fence is text, not a marker.
	blocks, err = Parse("x.md", []byte("```\n<!-- doctest: a -->\n```\n"))
	require.NoError(t, err)
	require.Empty(t, blocks)
}

func TestMatch(t *testing.T) {
	put := []string{"result 200 24 7", "2066273807781330944 0 25"}
	for _, tc := range []struct {
		name string
		want []string
		got  string
		ok   bool
	}{
		{"numbers vary", put, "result 200 24 7\r\n2066277503806210048 0 0", true},
		{"length varies", put, "result 200 23 7\r\n2066277503806210048 0 0\r\n", true},
		{"status exact", put, "result 500 24 7\r\n2066277503806210048 0 25", false},
		{"digits are not letters", put, "result 200 x 7\r\n2066277503806210048 0 25", false},
		{"text exact", put, "result 200 24 7\r\n2066277503806210048 0 25 more", false},
		{"too long", put, "result 200 24 7\r\n2066277503806210048 0 25\r\nmore", false},
		{"too short", put, "result 200 24 7", false},
		{"dots", []string{"a", "...", "END"}, "a\nb\nc\nEND\n", true},
		{"dots none", []string{"a", "...", "END"}, "a\nEND", true},
		{"dots end", []string{"a", "..."}, "a\nb", true},
		{"dots missing end", []string{"a", "...", "END"}, "a\nb", false},
		{"dots first", []string{"...", "[1, 2, 3]"}, "Connecting\n[1, 2, 3]", true},
		{"http status", []string{"HTTP/1.1 200 OK"}, "HTTP/1.1 503 OK", false},
		{"empty", nil, "", true},
		{"blanks", []string{"a  "}, "a\t", true},
		{"meta", []string{"x (y) [z]."}, "x (y) [z].", true},
		{"meta literal", []string{"a.b"}, "axb", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Match(tc.want, tc.got)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				require.Contains(t, err.Error(), "--- shown in the docs:")
			}
		})
	}
}

func TestShell(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	s, err := StartShell(dir, out, os.Environ())
	require.NoError(t, err)
	defer s.Close(time.Second)

	r, err := s.Run("echo hi; echo err >&2", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "hi\nerr\n", r.Output)
	require.Equal(t, 0, r.Exit)

	r, err = s.Run("false", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, r.Exit)

	// State carries over: $!, variables, the working directory.
	_, err = s.Run("sleep 60 &", 10*time.Second)
	require.NoError(t, err)
	r, err = s.Run("echo $! > pid\nx=1", 10*time.Second)
	require.NoError(t, err)
	r, err = s.Run("cat pid; echo x=$x; pwd", 10*time.Second)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(r.Output), "\n")
	require.Len(t, lines, 3, r.Output)
	require.Equal(t, "x=1", lines[1])
	require.Equal(t, dir, lines[2])
	_, err = os.Stat(filepath.Join(dir, "pid"))
	require.NoError(t, err)

	// A command never reads the session's script.
	r, err = s.Run("cat", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "", r.Output)

	// Multi-line commands run whole.
	r, err = s.Run("for i in 1 2; do\n  echo $i \\\n    x\ndone", 10*time.Second)
	require.NoError(t, err)
	require.Equal(t, "1 x\n2 x\n", r.Output)

	// The background sleep is in the session's group.
	ps := s.Procs()
	require.Len(t, ps, 1, "%v", ps)
	require.Contains(t, ps[0].Args, "sleep 60")

	// A command that does not end is an error, not a hang.
	start := time.Now()
	_, err = s.Run("sleep 30", 300*time.Millisecond)
	require.ErrorContains(t, err, "not finished within")
	require.Less(t, time.Since(start), 10*time.Second)

	left, err := s.Close(time.Second)
	require.NoError(t, err)
	require.NotEmpty(t, left)
	require.Empty(t, GroupProcs(s.Pgid()))
}

func TestStopGroupKills(t *testing.T) {
	// A process that ignores SIGTERM is killed after the grace period.
	dir, out := t.TempDir(), t.TempDir()
	s, err := StartShell(dir, out, os.Environ())
	require.NoError(t, err)
	_, err = s.Run("bash -c 'trap \"\" TERM; sleep 60' &", 10*time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(s.Procs()) >= 1 }, 5*time.Second, 10*time.Millisecond)
	start := time.Now()
	_, err = s.Close(300 * time.Millisecond)
	require.NoError(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Empty(t, GroupProcs(s.Pgid()))
}
