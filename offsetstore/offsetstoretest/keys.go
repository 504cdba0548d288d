package offsetstoretest

import (
	"context"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// Key, Entry and Result spell a group's position in a store's own tests,
// so that one batch may mix groups; Commit and Load make the offsets.Store
// calls, one per group in order of first appearance.
type (
	Key struct {
		Group, Topic string
		BrokerID     int
		Partition    int32
	}
	Entry struct {
		Key           Key
		Offset, MsgID int64
	}
	Result struct {
		Entry
		Found bool
	}
)

func (k Key) position() message.Position {
	return message.Position{Topic: k.Topic, Partition: message.Partition{BrokerID: k.BrokerID, Partition: k.Partition}}
}

// byGroup splits n items (at(i): group and position) by group.
func byGroup(n int, at func(i int) (string, message.Position)) (groups []string, ps map[string][]message.Position, idx map[string][]int) {
	ps, idx = map[string][]message.Position{}, map[string][]int{}
	for i := range n {
		g, p := at(i)
		if _, ok := ps[g]; !ok {
			groups = append(groups, g)
		}
		ps[g] = append(ps[g], p)
		idx[g] = append(idx[g], i)
	}
	return groups, ps, idx
}

// Commit commits es to s, one call per group.
func Commit(ctx context.Context, s offsets.Store, es []Entry) error {
	groups, ps, _ := byGroup(len(es), func(i int) (string, message.Position) {
		p := es[i].Key.position()
		p.Offset, p.MsgID = es[i].Offset, es[i].MsgID
		return es[i].Key.Group, p
	})
	if len(es) == 0 {
		return s.Commit(ctx, "g", nil)
	}
	for _, g := range groups {
		if err := s.Commit(ctx, g, ps[g]); err != nil {
			return err
		}
	}
	return nil
}

// Load loads ks from s, one call per group, in the order of ks.
func Load(ctx context.Context, s offsets.Store, ks []Key) ([]Result, error) {
	groups, ps, idx := byGroup(len(ks), func(i int) (string, message.Position) { return ks[i].Group, ks[i].position() })
	out := make([]Result, len(ks))
	for _, g := range groups {
		res, err := s.Load(ctx, g, ps[g])
		if err != nil {
			return nil, err
		}
		for j, r := range res {
			i := idx[g][j]
			out[i] = Result{Entry: Entry{Key: ks[i], Offset: r.Offset, MsgID: r.MsgID}, Found: r.Offset >= 0}
		}
	}
	return out, nil
}
