package host

import "fmt"

// StatsLines are the broker's `stats plugins` lines (the broker frames
// them): one per supervised plugin,
//
//	<kind> <name> version <v> pid <pid> state <s> restarts <n> calls <n> errors <n>
//
// (pid 0 while the process is down).
func StatsLines(infos []Info, line func(string)) {
	for _, p := range infos {
		line(fmt.Sprintf("%s %s version %d pid %d state %s restarts %d calls %d errors %d",
			p.Kind, p.Name, p.Version, p.PID, p.State, p.Restarts, p.Calls, p.Errors))
	}
}
