package main

import (
	"io"
	"os"
	"testing"
)

// TestProgressNotATerminal: to a pipe (or a buffer) the progress line
// writes nothing, so logs get no control characters.
func TestProgressNotATerminal(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, stderr := range []io.Writer{w, io.Discard} {
		p := newProgress(&env{stderr: stderr}, "op")
		p.update("%d done", 1)
		p.done()
	}
	var nilP *progress
	nilP.update("x")
	nilP.done()
	w.Close()
	if b, _ := io.ReadAll(r); len(b) != 0 {
		t.Fatalf("wrote %q to a pipe", b)
	}
}
