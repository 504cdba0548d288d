package pluginrpc

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var (
	errA = errors.New("a")
	errB = errors.New("b")
	errC = errors.New("c")
)

// TestCodes: an error crosses as its first entry's code (and reason), and
// comes back as that entry's error: by reason with a domain, else by code;
// an entry without a reason only reads the code back.
func TestCodes(t *testing.T) {
	withDomain := &Codes{Domain: "metaq.test", Table: []Code{
		{Err: errA, Code: codes.FailedPrecondition, Reason: "A"},
		{Err: errB, Code: codes.FailedPrecondition, Reason: "B"},
		{Err: context.Canceled, Code: codes.Canceled},
		{Err: errC, Code: codes.Unavailable, Reason: "C"},
		{Err: errC, Code: codes.Unavailable},
	}}
	codeOnly := &Codes{Table: []Code{
		{Err: errA, Code: codes.InvalidArgument},
		{Err: errB, Code: codes.InvalidArgument},
		{Err: errC, Code: codes.NotFound},
	}}
	for _, tc := range []struct {
		c        *Codes
		err      error
		code     codes.Code
		sentinel error
	}{
		{withDomain, fmt.Errorf("x: %w", errB), codes.FailedPrecondition, errB},
		{withDomain, context.Canceled, codes.Canceled, context.Canceled},
		{withDomain, errC, codes.Unavailable, errC},
		{withDomain, errors.New("other"), codes.Internal, nil},
		{codeOnly, errB, codes.InvalidArgument, errA}, // a code stands for its first error
		{codeOnly, errC, codes.NotFound, errC},
	} {
		se := tc.c.ToStatus(tc.err)
		if got := status.Code(se); got != tc.code {
			t.Errorf("%v: code %v, want %v", tc.err, got, tc.code)
		}
		st, sentinel := tc.c.FromStatus(se)
		if st == nil || st.Message() != tc.err.Error() || sentinel != tc.sentinel {
			t.Errorf("%v: back as %v %v, want %v", tc.err, st, sentinel, tc.sentinel)
		}
	}
	// Without its reason, a code is read back only through an entry
	// without one.
	if _, s := withDomain.FromStatus(status.Error(codes.FailedPrecondition, "x")); s != nil {
		t.Errorf("FailedPrecondition without a reason: %v", s)
	}
	if _, s := withDomain.FromStatus(status.Error(codes.Unavailable, "x")); s != errC {
		t.Errorf("Unavailable without a reason: %v", s)
	}
	if st, s := withDomain.FromStatus(errors.New("conn reset")); st != nil || s != nil {
		t.Errorf("not a status: %v %v", st, s)
	}
}

type countObs struct{ calls, errs int }

func (o *countObs) Observe(err error) {
	o.calls++
	if err != nil {
		o.errs++
	}
}

func TestGuard(t *testing.T) {
	obs := &countObs{}
	g := &Guard{Obs: obs, Timeout: time.Hour}
	ctx, cancel := g.Context(context.Background())
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > time.Hour {
		t.Fatalf("deadline %v %v", dl, ok)
	}
	cancel()
	early, cancelEarly := context.WithTimeout(context.Background(), time.Minute)
	defer cancelEarly()
	if ctx, cancel := g.Context(early); ctx != early {
		t.Fatal("an earlier deadline of the caller is kept as is")
	} else {
		cancel()
	}
	if g.Observe(nil) != nil || g.Observe(errA) != errA || obs.calls != 2 || obs.errs != 1 {
		t.Fatalf("observed %+v", obs)
	}
	if g.Closed() || !g.Close() || g.Close() || !g.Closed() {
		t.Fatal("Close reports the first close only")
	}
	var zero Guard
	if ctx, cancel := zero.Context(context.Background()); ctx != context.Background() {
		t.Fatal("no timeout: ctx as is")
	} else {
		cancel()
	}
	_ = zero.Observe(errA)
}
