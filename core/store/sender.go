package store

import (
	"io"
	"os"
	"sync"
)

// Sender writes views' bytes to one connection: with sendfile on plain
// TCP (io.Copy from an *os.File to a *net.TCPConn), through a pooled
// buffer where there is no sendfile (TLS), from memory for a journaled
// segment's tail. It keeps its own handle on the segment file it last
// sent from, opened by path when the path changes, so that its file
// position (which sendfile uses) is private to the connection. Not safe
// for concurrent use: the connection's writer lock covers it.
type Sender struct {
	f    *os.File
	path string
	// scratch is the buffer of a view copied from its own descriptor.
	scratch []byte
}

// Send writes v's bytes to w. bufs, when not nil, gives the *[]byte to
// copy through instead of sendfile (io.Copy would allocate 32 KiB per
// reply). A file gone (retention) or unreadable by path is copied from
// the view's own descriptor.
func (s *Sender) Send(w io.Writer, v View, bufs *sync.Pool) error {
	if v.Mem != nil { // a journaled segment's in-memory tail
		_, err := w.Write(v.Mem)
		return err
	}
	if f := s.file(v.Path); f != nil {
		if _, err := f.Seek(v.Pos, io.SeekStart); err == nil {
			lr := &io.LimitedReader{R: f, N: int64(v.Len)}
			var n int64
			if bufs != nil {
				bp := bufs.Get().(*[]byte)
				n, err = io.CopyBuffer(w, lr, *bp)
				bufs.Put(bp)
			} else {
				n, err = io.Copy(w, lr)
			}
			if err != nil || n != int64(v.Len) {
				return errShortSend(err)
			}
			return nil
		}
	}
	s.scratch = s.scratch[:0]
	buf, err := v.ReadAll(s.scratch)
	if err != nil || len(buf) != v.Len {
		return errShortSend(err)
	}
	s.scratch = buf[:0]
	_, err = w.Write(buf)
	return err
}

func errShortSend(err error) error {
	if err == nil {
		return io.ErrShortWrite
	}
	return err
}

// file returns the handle on the segment file at path, opening it when
// the path changes; nil if it cannot be opened.
func (s *Sender) file(path string) *os.File {
	if s.f != nil && s.path == path {
		return s.f
	}
	s.Close()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	s.f, s.path = f, path
	return f
}

// Close closes the file handle, so that a segment deleted by retention
// gives its disk space back now rather than at GC. The Sender may be
// used again.
func (s *Sender) Close() {
	if s.f != nil {
		s.f.Close()
		s.f, s.path = nil, ""
	}
}
