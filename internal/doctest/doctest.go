// Package doctest (test helpers, not API) runs the shell walkthroughs of
// the project's Markdown documentation as tests, command by command as
// written (issue 23: documentation that is executed cannot rot).
//
// # Which blocks run
//
// Only a fenced sh or bash block whose opening fence is on the line right
// after a marker runs:
//
//	<!-- doctest: NAME -->
//	```sh
//	bin/metaq topics
//	```
//
// The marker is an HTML comment, so the Markdown renders as before. It may
// be indented like the fence (a block inside a list item). Blocks with the
// same NAME form one walkthrough, run in document order in one shell
// session (Walkthrough), so a later block sees what an earlier one started.
//
// # Commands
//
// A block is split into commands as bash reads them: a command ends at the
// first line where the text so far is a complete bash command (bash -n),
// so a loop or a backslash continuation stays whole. What runs is the text
// as written, comments included. A trailing comment ("cmd   # text") and
// the comment-only lines right after a command are its Comment: what the
// docs say about it. This package does not interpret comments; a test says
// which of them it checks and how.
//
// # Shown output
//
// In a block where commands are written as "$ cmd", the lines after a
// command up to the next "$ " line are its shown output (Command.Output),
// compared with what it printed by Match:
//
//   - a line "..." stands for any number of lines (none included); without
//     a final "...", the output must end where the shown lines end;
//   - other lines must equal the printed line, trailing blanks and \r
//     aside, except that each run of digits matches any run of digits
//     (message ids, pids, lengths, offsets, uptimes vary from run to run);
//   - but a status code stays exact: the first number of a line that
//     starts with "result " (the wire protocol's reply) or "HTTP/".
//
// A "$ " command with no line after it shows no output: its output is not
// compared.
//
// # Running
//
// Shell is one bash session (bash -s, in its own process group) that runs
// the commands one at a time, each with stdin from /dev/null and its
// output in a file, so that a process a command leaves in the background
// (cmd &) never holds a pipe the test waits on. Shell.Close stops the
// whole process group, bounded; Procs lists what a walkthrough left
// running.
package doctest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Command is one command of a marked block.
type Command struct {
	// File and Line locate the command's first line (1-based).
	File string
	Line int
	// Text is the command as written (without a "$ " prompt), lines
	// joined with "\n": what runs.
	Text string
	// Key is the command's first line without its trailing comment and
	// surrounding blanks: how a test names it.
	Key string
	// Comment is the text of its trailing comment and of the comment-only
	// lines after it, without "#" and surrounding blanks, joined with
	// "\n"; "" when there is none.
	Comment string
	// Output is the output shown after a "$ " command; nil when none is
	// shown.
	Output []string
}

// Where is "file:line".
func (c Command) Where() string { return fmt.Sprintf("%s:%d", c.File, c.Line) }

// Block is one marked fenced block.
type Block struct {
	// Name is the marker's NAME.
	Name string
	// File and Line locate the marker.
	File string
	Line int
	// Commands are the block's commands in order.
	Commands []Command
}

var (
	markerRE    = regexp.MustCompile(`^\s*<!--\s*doctest:\s*(.*?)\s*-->\s*$`)
	malformedRE = regexp.MustCompile(`^\s*<!--\s*doctest\b`)
	nameRE      = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	fenceRE     = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([A-Za-z0-9_-]*)\\s*$")
)

// Parse returns the marked blocks of a Markdown document; file names it in
// Command.File and in errors. A marker that is not right before a sh or
// bash fence, a bad name, an unclosed fence and a block that does not
// parse as bash are errors.
func Parse(file string, src []byte) ([]Block, error) {
	lines := strings.Split(strings.ReplaceAll(string(src), "\r\n", "\n"), "\n")
	var blocks []Block
	fence := "" // inside an unmarked fence: its opening run
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if fence != "" {
			if closes(line, fence) {
				fence = ""
			}
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			fence = m[2]
			continue
		}
		m := markerRE.FindStringSubmatch(line)
		if m == nil {
			if malformedRE.MatchString(line) {
				return nil, fmt.Errorf("%s:%d: malformed doctest marker %q (want <!-- doctest: NAME -->)", file, i+1, strings.TrimSpace(line))
			}
			continue
		}
		name := m[1]
		if !nameRE.MatchString(name) {
			return nil, fmt.Errorf("%s:%d: doctest name %q: want lower-case letters, digits and dashes", file, i+1, name)
		}
		if i+1 >= len(lines) {
			return nil, fmt.Errorf("%s:%d: doctest marker at the end of the file", file, i+1)
		}
		f := fenceRE.FindStringSubmatch(lines[i+1])
		if f == nil || (f[3] != "sh" && f[3] != "bash") {
			return nil, fmt.Errorf("%s:%d: doctest marker not followed by a ```sh or ```bash fence", file, i+1)
		}
		indent, run := f[1], f[2]
		start := i + 2 // first content line (0-based)
		end := -1
		for j := start; j < len(lines); j++ {
			if closes(lines[j], run) {
				end = j
				break
			}
		}
		if end < 0 {
			return nil, fmt.Errorf("%s:%d: unclosed fence of doctest %q", file, i+2, name)
		}
		body := make([]string, 0, end-start)
		for _, l := range lines[start:end] {
			body = append(body, strings.TrimPrefix(l, indent))
		}
		cmds, err := splitCommands(file, start+1, body)
		if err != nil {
			return nil, err
		}
		if len(cmds) == 0 {
			return nil, fmt.Errorf("%s:%d: doctest %q has no command", file, i+1, name)
		}
		blocks = append(blocks, Block{Name: name, File: file, Line: i + 1, Commands: cmds})
		i = end
	}
	if fence != "" {
		return nil, fmt.Errorf("%s: unclosed fence", file)
	}
	return blocks, nil
}

// closes reports whether line closes a fence opened with run: the same
// character, at least as many times, and nothing else.
func closes(line, run string) bool {
	t := strings.TrimSpace(line)
	return strings.HasPrefix(t, run) && strings.Trim(t, run[:1]) == ""
}

// Walkthrough returns the commands of the blocks named name, in order.
func Walkthrough(blocks []Block, name string) []Command {
	var cmds []Command
	for _, b := range blocks {
		if b.Name == name {
			cmds = append(cmds, b.Commands...)
		}
	}
	return cmds
}

// splitCommands splits a block's lines (first at line first of file) into
// commands.
func splitCommands(file string, first int, lines []string) ([]Command, error) {
	transcript := false
	for _, l := range lines {
		if strings.HasPrefix(l, "$ ") {
			transcript = true
			break
		}
	}
	var cmds []Command
	if transcript {
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			if !strings.HasPrefix(l, "$ ") {
				if strings.TrimSpace(l) == "" && len(cmds) == 0 {
					continue
				}
				if len(cmds) == 0 {
					return nil, fmt.Errorf("%s:%d: output before the first $ command", file, first+i)
				}
				c := &cmds[len(cmds)-1]
				c.Output = append(c.Output, l)
				continue
			}
			text := strings.TrimPrefix(l, "$ ")
			line := first + i
			for strings.HasSuffix(text, `\`) && i+1 < len(lines) {
				i++
				text += "\n" + lines[i]
			}
			if err := complete(text); err != nil {
				return nil, fmt.Errorf("%s:%d: %v", file, line, err)
			}
			cmds = append(cmds, newCommand(file, line, text))
		}
		// Blank lines at the end of an output are not part of it.
		for i := range cmds {
			o := cmds[i].Output
			for len(o) > 0 && strings.TrimSpace(o[len(o)-1]) == "" {
				o = o[:len(o)-1]
			}
			cmds[i].Output = o
		}
		return cmds, nil
	}
	var cur []string
	curLine := 0
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if len(cur) == 0 {
			switch {
			case t == "":
				continue
			case strings.HasPrefix(t, "#"):
				if len(cmds) == 0 {
					return nil, fmt.Errorf("%s:%d: a comment before the first command (say it in the prose)", file, first+i)
				}
				c := &cmds[len(cmds)-1]
				c.Comment = joinComment(c.Comment, strings.TrimSpace(strings.TrimPrefix(t, "#")))
				continue
			}
			curLine = first + i
		}
		cur = append(cur, l)
		text := strings.Join(cur, "\n")
		if strings.HasSuffix(l, `\`) {
			continue
		}
		if complete(text) != nil {
			continue
		}
		cmds = append(cmds, newCommand(file, curLine, text))
		cur = nil
	}
	if len(cur) > 0 {
		text := strings.Join(cur, "\n")
		if err := complete(text); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", file, curLine, err)
		}
		return nil, fmt.Errorf("%s:%d: command continues past the end of the block", file, curLine)
	}
	return cmds, nil
}

func newCommand(file string, line int, text string) Command {
	c := Command{File: file, Line: line, Text: text}
	lines := strings.Split(text, "\n")
	code, _ := splitComment(lines[0])
	c.Key = strings.TrimSpace(code)
	for _, l := range lines {
		if _, cm := splitComment(l); cm != "" {
			c.Comment = joinComment(c.Comment, cm)
		}
	}
	return c
}

func joinComment(a, b string) string {
	if a == "" {
		return b
	}
	return a + "\n" + b
}

// splitComment splits one line of shell into its code and the text of its
// trailing comment: a # at the start of a word, outside quotes.
func splitComment(line string) (code, comment string) {
	var quote byte
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case quote == '\'':
			if ch == '\'' {
				quote = 0
			}
		case quote == '"':
			if ch == '\\' {
				i++
			} else if ch == '"' {
				quote = 0
			}
		case ch == '\\':
			i++
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return line[:i], strings.TrimSpace(line[i+1:])
		}
	}
	return line, ""
}

// complete reports (nil) whether text parses as whole bash commands.
func complete(text string) error {
	cmd := exec.Command("bash", "-n", "-c", text)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("not a complete bash command: %s", strings.TrimSpace(out.String()))
		}
		return fmt.Errorf("bash -n: %v", err)
	}
	return nil
}

var (
	digitsRE = regexp.MustCompile(`[0-9]+`)
	statusRE = regexp.MustCompile(`^(result |HTTP/[0-9.]+ )([0-9]+)`)
)

// Match compares what a command printed with the output the docs show
// (see the package comment for the rules). It returns nil when they match,
// else an error that shows both.
func Match(want []string, got string) error {
	gl := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if got == "" {
		gl = nil
	}
	for i := range gl {
		gl[i] = strings.TrimRight(gl[i], " \t\r")
	}
	pats := make([]*regexp.Regexp, len(want))
	for i, w := range want {
		if strings.TrimSpace(w) == "..." {
			continue
		}
		pats[i] = linePattern(strings.TrimRight(w, " \t\r"))
	}
	if matchFrom(want, pats, gl, 0, 0, map[[2]int]bool{}) {
		return nil
	}
	return fmt.Errorf("output differs from the docs\n--- shown in the docs:\n%s\n--- printed:\n%s", strings.Join(want, "\n"), strings.Join(gl, "\n"))
}

// linePattern turns a shown line into a regexp: digit runs match any
// digits, except a status code.
func linePattern(w string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	rest := w
	if m := statusRE.FindStringSubmatch(w); m != nil {
		b.WriteString(regexp.QuoteMeta(m[0]))
		rest = w[len(m[0]):]
	}
	last := 0
	for _, loc := range digitsRE.FindAllStringIndex(rest, -1) {
		b.WriteString(regexp.QuoteMeta(rest[last:loc[0]]))
		b.WriteString("[0-9]+")
		last = loc[1]
	}
	b.WriteString(regexp.QuoteMeta(rest[last:]))
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

func matchFrom(want []string, pats []*regexp.Regexp, got []string, i, j int, seen map[[2]int]bool) bool {
	if seen[[2]int{i, j}] {
		return false
	}
	seen[[2]int{i, j}] = true
	if i == len(want) {
		return j == len(got)
	}
	if pats[i] == nil { // "...": skip any number of printed lines
		for k := j; k <= len(got); k++ {
			if matchFrom(want, pats, got, i+1, k, seen) {
				return true
			}
		}
		return false
	}
	return j < len(got) && pats[i].MatchString(got[j]) && matchFrom(want, pats, got, i+1, j+1, seen)
}

// Shell is one bash session that runs a walkthrough's commands.
type Shell struct {
	dir, outDir string
	env         []string
	cmd         *exec.Cmd
	stdin       io.WriteCloser
	status      chan string
	exited      chan struct{}
	n           int
}

// Result is what one command did.
type Result struct {
	// Output is its standard output and error, interleaved as written.
	Output string
	// Exit is its exit status.
	Exit int
	// Elapsed is how long it ran.
	Elapsed time.Duration
}

// StartShell starts a bash session working in dir, with env as its
// environment; command outputs are kept in outDir. The session has a
// process group of its own: every process a command starts, in the
// background too, belongs to it unless it makes its own.
func StartShell(dir, outDir string, env []string) (*Shell, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer w.Close()
	cmd := exec.Command("bash", "--noprofile", "--norc", "-s")
	cmd.Dir = dir
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{w} // fd 3: one status line per command
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(outDir, "shell.log"))
	if err != nil {
		r.Close()
		return nil, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		r.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		return nil, err
	}
	s := &Shell{dir: dir, outDir: outDir, env: env, cmd: cmd, stdin: stdin, status: make(chan string, 1), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			s.status <- sc.Text()
		}
		r.Close()
	}()
	go func() {
		cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

// Env is the session's environment.
func (s *Shell) Env() []string { return append([]string(nil), s.env...) }

// Pgid is the session's process group.
func (s *Shell) Pgid() int { return s.cmd.Process.Pid }

// Run runs text (one command, as written) in the session and waits for it
// to finish, at most timeout. A command that does not finish in time is
// an error (the session is then unusable: Close it).
func (s *Shell) Run(text string, timeout time.Duration) (Result, error) {
	s.n++
	out := filepath.Join(s.outDir, fmt.Sprintf("cmd-%03d.out", s.n))
	// The command runs in the session itself (a { } group, not a
	// subshell), so $! and the jobs it starts stay the session's; fd 3,
	// the status pipe, is closed for it so that nothing it leaves running
	// holds the pipe.
	script := fmt.Sprintf("{ %s\n} >%s 2>&1 </dev/null 3>&-\necho \"%d $?\" >&3\n", text, shQuote(out), s.n)
	start := time.Now()
	if _, err := s.stdin.Write([]byte(script)); err != nil {
		return Result{}, fmt.Errorf("write to the shell: %w", err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line := <-s.status:
			n, code, ok := strings.Cut(line, " ")
			if !ok || n != strconv.Itoa(s.n) {
				continue // an earlier, timed-out command's status
			}
			b, _ := os.ReadFile(out)
			exit, _ := strconv.Atoi(code)
			return Result{Output: string(b), Exit: exit, Elapsed: time.Since(start)}, nil
		case <-s.exited:
			b, _ := os.ReadFile(out)
			return Result{Output: string(b), Exit: -1, Elapsed: time.Since(start)}, fmt.Errorf("the shell exited (the command ran exit?); output:\n%s", b)
		case <-timer.C:
			b, _ := os.ReadFile(out)
			return Result{Output: string(b), Exit: -1, Elapsed: time.Since(start)}, fmt.Errorf("not finished within %v; output so far:\n%s", timeout, b)
		}
	}
}

// Procs lists the processes of the session's group still running, the
// session's bash aside.
func (s *Shell) Procs() []Proc {
	var ps []Proc
	for _, p := range GroupProcs(s.Pgid()) {
		if p.Pid != s.cmd.Process.Pid {
			ps = append(ps, p)
		}
	}
	return ps
}

// Close ends the session: SIGTERM to its process group, SIGKILL to what
// is left after grace, then waits (bounded) until the group is gone. It
// returns the processes that were still running when it was called (the
// session's bash aside) and an error if any process outlived SIGKILL.
func (s *Shell) Close(grace time.Duration) ([]Proc, error) {
	left := s.Procs()
	s.stdin.Close()
	err := StopGroup(s.Pgid(), grace)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		if err == nil {
			err = errors.New("the session's bash was not reaped within 10 s")
		}
	}
	return left, err
}

// Proc is a running process.
type Proc struct {
	Pid  int
	Args string
}

func (p Proc) String() string { return fmt.Sprintf("%d %s", p.Pid, p.Args) }

// GroupProcs lists the live (not zombie) processes of process group pgid.
func GroupProcs(pgid int) []Proc {
	ents, _ := os.ReadDir("/proc")
	var ps []Proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
		i := bytes.LastIndexByte(st, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(st[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g != pgid {
			continue
		}
		args, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		ps = append(ps, Proc{Pid: pid, Args: strings.TrimSpace(strings.ReplaceAll(string(args), "\x00", " "))})
	}
	return ps
}

// StopGroup stops process group pgid: SIGTERM, then SIGKILL after grace,
// then waits up to 10 s for it to be gone. It returns an error naming what
// is still running after that.
func StopGroup(pgid int, grace time.Duration) error {
	if len(GroupProcs(pgid)) == 0 {
		return nil
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	if WaitGroupGone(pgid, grace) {
		return nil
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	if WaitGroupGone(pgid, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("process group %d still running after SIGKILL: %v", pgid, GroupProcs(pgid))
}

// WaitGroupGone waits up to d for process group pgid to have no live
// process, and reports whether it has none.
func WaitGroupGone(pgid int, d time.Duration) bool {
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if len(GroupProcs(pgid)) == 0 {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// shQuote quotes s for bash.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
