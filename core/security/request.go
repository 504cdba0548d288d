package security

import (
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The rights a protocol request needs (the TCP and TLS ports, docs/security.md).
// With auth on, a connection may send version, auth and quit before it
// authenticates; everything else needs a user (ErrUnauthenticated, 401)
// and the rights CheckRequest lists (*Denied, 403).

// StatsItems names the stats items whose rights are not a topic's: the
// broker's (its stats and failover items).
type StatsItems struct {
	// Admin and AdminPrefixes are the items that need admin: they reveal
	// the configuration, change state, list other users' transactions or
	// belong to replication and failover (bound to a sync master's
	// replication_user, which is an admin).
	Admin, AdminPrefixes []string
	// Lists are the items that are not a topic name: the summary and the
	// lists, which their writers filter per user, and help.
	Lists []string
	// Count is the prefix of the count items, which need subscribe on
	// their topic (they count from a consumer's position); CountTopic
	// returns the topic of a count item's argument, false when it is
	// malformed (the handler answers 400).
	Count      string
	CountTopic func(arg string) (string, bool)
}

// check is one right a request needs: act on name (for Admin, name is
// the operation and note is added to the denial).
type check struct {
	act  Action
	name string
	note string
}

// CheckRequest decides whether u (nil before authentication) may run r,
// with auth on; items are the broker's stats items. It returns nil,
// ErrUnauthenticated or the first missing right's *Denied.
func CheckRequest(u *conf.User, r *protocol.Request, items *StatsItems) error {
	if u == nil {
		return ErrUnauthenticated
	}
	for _, ck := range requestChecks(r, items) {
		if err := Authorize(true, u, ck.act, ck.name); err != nil {
			if d, ok := err.(*Denied); ok {
				d.Note = ck.note
			}
			return err
		}
	}
	return nil
}

// requestChecks lists the rights r needs, in the order they are checked
// (the first missing one is the denial). Requests not listed need only an
// authenticated user; stats items are StatsItems.checks'.
func requestChecks(r *protocol.Request, items *StatsItems) []check {
	switch r.Op {
	case protocol.OpPut, protocol.OpMPut:
		return []check{{act: Publish, name: string(r.Topic)}}
	case protocol.OpGet, protocol.OpOffset, protocol.OpFilter:
		return []check{{act: Subscribe, name: string(r.Topic)}}
	case protocol.OpCommit, protocol.OpFetch:
		cks := []check{{act: UseGroup, name: string(r.Group)}}
		// A body that does not parse is answered 400 by the handler.
		lines, _ := protocol.ParseOffsetLines(r.Body, r.Op == protocol.OpCommit)
		for _, l := range lines {
			cks = append(cks, check{act: Subscribe, name: l.Topic})
		}
		return cks
	case protocol.OpJoin, protocol.OpHeartbeat, protocol.OpLeave:
		return []check{{act: UseGroup, name: string(r.Group)}, {act: Subscribe, name: string(r.Topic)}}
	case protocol.OpTransaction:
		if r.TxType == protocol.TxHeuristicCommit || r.TxType == protocol.TxHeuristicRollback {
			return []check{{act: Admin, name: "complete transactions heuristically"}}
		}
	case protocol.OpSync:
		return []check{{act: Admin, name: "ship syncs", note: ": a sync master's replication_user"}}
	case protocol.OpStats:
		return items.checks(string(r.Item))
	}
	return nil
}

// checks lists the rights a stats item needs: admin for the admin items,
// subscribe for a count item's topic, nothing more for the lists (their
// writers filter them), and for `stats <topic>` the topic described
// (publish or subscribe).
func (s *StatsItems) checks(item string) []check {
	if s.admin(item) {
		return []check{{act: Admin, name: "run stats " + statsItemText(item)}}
	}
	if arg, ok := strings.CutPrefix(item, s.Count); ok {
		if name, ok := s.CountTopic(arg); ok { // malformed: 400 from the handler
			return []check{{act: Subscribe, name: name}}
		}
		return nil
	}
	for _, l := range s.Lists {
		if item == l {
			return nil
		}
	}
	return []check{{act: Describe, name: item}}
}

// admin reports whether a stats item needs admin.
func (s *StatsItems) admin(item string) bool {
	for _, a := range s.Admin {
		if item == a {
			return true
		}
	}
	for _, p := range s.AdminPrefixes {
		if strings.HasPrefix(item, p) {
			return true
		}
	}
	return false
}

// statsItemText is item for a denial: fixed items as they are, others
// (prefixed items carrying client bytes) quoted and cut.
func statsItemText(item string) string {
	if len(item) <= 64 && protocol.Printable([]byte(item)) == strconv.Quote(item) {
		return item
	}
	return protocol.Printable([]byte(item))
}
