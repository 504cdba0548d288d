package testsvc

import (
	"net"
	"strconv"
	"testing"
)

// TestStablePorts: distinct, free, outside the ephemeral range, and never
// given twice by the test binary.
func TestStablePorts(t *testing.T) {
	lo, hi, err := stableRange()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for range 3 {
		for _, p := range StablePorts(t, 4) {
			if p < lo || p > hi {
				t.Fatalf("port %d outside %d..%d", p, lo, hi)
			}
			if seen[p] {
				t.Fatalf("port %d given twice", p)
			}
			seen[p] = true
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d not free: %v", p, err)
			}
			ln.Close()
		}
	}
}
