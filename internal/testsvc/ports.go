package testsvc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// StablePorts returns n distinct ports of 127.0.0.1, free a moment ago,
// for processes that must get their port again after releasing it: one
// started by a script a while after the port was chosen, or one killed
// and started again on its port. A port from a listen on ":0" does not do
// for them: while nothing holds it, the kernel hands it out again, to the
// next bind to port 0 or connect of any test running alongside, and the
// process then exits with "address already in use".
//
// These ports are taken, at random, from below the kernel's ephemeral
// range (net.ipv4.ip_local_port_range), which bind and connect never pick
// by themselves. The test binary never returns a port twice; another
// process choosing the same one at random while it is free is the one
// chance of a clash left (and a listener of a real service there is
// skipped).
func StablePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := stablePorts(n)
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	return ports
}

// stablePorts is StablePorts.
func stablePorts(n int) ([]int, error) {
	lo, hi, err := stableRange()
	if err != nil {
		return nil, err
	}
	stable.Lock()
	defer stable.Unlock()
	var out []int
	for tries := 0; len(out) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("no %d free ports in %d..%d", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo+1)
		if stable.given[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		stable.given[p] = true
		out = append(out, p)
	}
	return out, nil
}

var stable = struct {
	sync.Mutex
	given map[int]bool
}{given: make(map[int]bool)}

// stableRange is the range StablePorts picks from: up to 20000 ports
// below the ephemeral range, above the privileged ports, or above the
// ephemeral range when it starts too low to leave room below it.
func stableRange() (lo, hi int, err error) {
	eLo, eHi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, errA := strconv.Atoi(f[0])
			z, errZ := strconv.Atoi(f[1])
			if errA == nil && errZ == nil && a <= z {
				eLo, eHi = a, z
			}
		}
	}
	if eLo-1 >= 1024+1000 {
		return max(1024, eLo-20000), eLo - 1, nil
	}
	if eHi+1 <= 65535-1000 {
		return eHi + 1, 65535, nil
	}
	return 0, 0, fmt.Errorf("the ephemeral port range %d..%d leaves no room for StablePorts", eLo, eHi)
}
