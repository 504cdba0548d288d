package store

import (
	"bytes"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSender: a view's bytes are sent from the Sender's handle on its
// segment (kept while the path stays, through a pooled buffer when given
// one), from the view's own descriptor once the file is gone by path,
// and a Sender closed opens the file again.
func TestSender(t *testing.T) {
	t.Parallel()
	l := openLog(t, t.TempDir(), Options{})
	mustAppend(t, l, []byte("one"), []byte("two"), []byte("three"))
	v, err := l.Read(0, 1<<20)
	require.NoError(t, err)
	defer v.Release()
	want, err := v.ReadAll(nil)
	require.NoError(t, err)
	require.Nil(t, v.Mem, "the test wants a view of the file")

	var s Sender
	defer s.Close()
	var w bytes.Buffer
	require.NoError(t, s.Send(&w, v, nil))
	require.Equal(t, want, w.Bytes())
	f := s.f
	require.NotNil(t, f)
	bufs := &sync.Pool{New: func() any { b := make([]byte, 7); return &b }}
	w.Reset()
	require.NoError(t, s.Send(&w, v, bufs))
	require.Equal(t, want, w.Bytes())
	require.Same(t, f, s.f, "the handle is kept while the path stays")

	s.Close()
	require.NoError(t, os.Rename(v.Path, v.Path+".gone")) // retention took it
	w.Reset()
	require.NoError(t, s.Send(&w, v, nil))
	require.Equal(t, want, w.Bytes(), "copied from the view's descriptor")
	require.Nil(t, s.f)
	require.NoError(t, os.Rename(v.Path+".gone", v.Path))

	short := v
	short.Len += 10 // more than the file holds
	require.Error(t, s.Send(&w, short, nil))
}
