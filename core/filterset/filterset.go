// Package filterset opens the server-side filters configured per topic and
// consumer group (MetaQ's group.<g>=<class>, reference §11): builtins in
// process, filter plugins through the plugin supervisor. The broker looks
// a filter up per get (Set.Lookup, allocation-free) and runs it.
package filterset

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"time"
	"unsafe"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/attr"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/sdk/message"
)

// Builtins are the in-process filters a [[topic.filter]] may name, listed
// here explicitly (conf.BuiltinFilters holds the same names).
var Builtins = map[string]func() filters.Filter{
	attr.Name: attr.New,
	expr.Name: expr.New,
}

// OpenTimeout bounds opening every configured filter (launching plugins
// and their Init).
const OpenTimeout = 30 * time.Second

// Set holds the filters of every topic and group, and counts the gets
// judged with them. It is built before the broker serves and is
// read-only afterwards (but for its Counters).
type Set struct {
	byTopic map[string]map[string]*filters.Instance // topic -> group -> instance
	all     []*filters.Instance
	cnt     Counters
}

// NewScratch returns a connection's scratch for filtered gets, counting
// into s's Counters.
func (s *Set) NewScratch() Scratch { return NewScratch(&s.cnt) }

// Counters is the counts of the gets judged with s's filters (and the
// consumers' own).
func (s *Set) Counters() *Counters { return &s.cnt }

// Lookup returns the filter of a topic and group, or nil.
func (s *Set) Lookup(topic string, group []byte) *filters.Instance {
	if s == nil || s.byTopic == nil {
		return nil
	}
	return s.byTopic[topic][string(group)]
}

// Len is the number of filters.
func (s *Set) Len() int { return len(s.all) }

// Open opens every [[topic.filter]] of cfg: a builtin in process, or a
// filter plugin launched through sup (once per plugin, shared by all its
// topics and groups). A plugin's [plugin.config] is the base of each
// instance's config; the topic filter's config overrides it. On error
// what was opened is closed again.
func Open(cfg *conf.Config, sup *host.Supervisor, logf func(string, ...any)) (*Set, error) {
	ctx, cancel := context.WithTimeout(context.Background(), OpenTimeout)
	defer cancel()
	launched := map[string]*host.Plugin{}
	s := &Set{}
	for _, name := range cfg.TopicNames() {
		tc, ok := cfg.TopicConfig(name)
		if !ok {
			continue
		}
		for _, tf := range tc.Filters {
			in, err := open(ctx, cfg, sup, logf, name, tf, launched)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("topic %s group %s: %w", name, tf.Group, err)
			}
			if s.byTopic == nil {
				s.byTopic = make(map[string]map[string]*filters.Instance)
			}
			if s.byTopic[name] == nil {
				s.byTopic[name] = make(map[string]*filters.Instance)
			}
			if old := s.byTopic[name][tf.Group]; old != nil {
				old.Close() // conf rejects duplicates; keep the last one regardless
			}
			s.byTopic[name][tf.Group] = in
			s.all = append(s.all, in)
		}
	}
	return s, nil
}

func open(ctx context.Context, cfg *conf.Config, sup *host.Supervisor, logf func(string, ...any), topic string, tf conf.TopicFilter, launched map[string]*host.Plugin) (*filters.Instance, error) {
	policy, err := filters.ParseFailurePolicy(cfg.FilterFailurePolicy(tf))
	if err != nil {
		return nil, err
	}
	opts := filters.OpenOptions{
		Name: tf.Filter, Topic: topic, Group: tf.Group, Config: tf.Config,
		Builtins: Builtins, FailurePolicy: policy, Logf: logf,
	}
	if _, builtin := Builtins[tf.Filter]; !builtin {
		pc, ok := cfg.PluginByName(conf.PluginKindFilter, tf.Filter)
		if !ok {
			return nil, fmt.Errorf("%w: %q is neither a builtin filter nor a filter [[plugin]]", filters.ErrUnknownFilter, tf.Filter)
		}
		p := launched[pc.Name]
		if p == nil {
			p, err = filters.LaunchPlugin(sup, host.Spec{
				Kind: plugins.KindFilter, Name: pc.Name, Path: cfg.PluginPath(pc), SHA256: pc.SHA256,
				Args: pc.Args, Env: pc.Env, Config: pc.Config,
			})
			if err != nil {
				return nil, err
			}
			launched[pc.Name] = p
		}
		opts.Launched = p
		if len(pc.Config) > 0 {
			c := maps.Clone(pc.Config)
			maps.Copy(c, tf.Config)
			opts.Config = c
		}
	}
	return filters.Open(ctx, opts)
}

// Close closes every filter; the set is empty afterwards.
func (s *Set) Close() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, in := range s.all {
		errs = append(errs, in.Close())
	}
	s.all, s.byTopic = nil, nil
	return errors.Join(errs...)
}

// Check opens the builtin topic filters of cfg in process (their config
// parsed, an expr compiled) and closes them again, returning what failed
// (metaq-server --check-config). Filter plugins are not started.
func Check(cfg *conf.Config) []string {
	var probs []string
	for _, name := range cfg.TopicNames() {
		tc, _ := cfg.TopicConfig(name)
		for _, tf := range tc.Filters {
			if _, ok := Builtins[tf.Filter]; !ok {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), OpenTimeout)
			in, err := filters.Open(ctx, filters.OpenOptions{Name: tf.Filter, Topic: name, Group: tf.Group, Config: tf.Config, Builtins: Builtins})
			cancel()
			if err != nil {
				probs = append(probs, fmt.Sprintf("topic %s group %s: filter %s: %v", name, tf.Group, tf.Filter, err))
				continue
			}
			in.Close()
		}
	}
	return probs
}

// ScanRecords appends the whole records of buf (which starts at offset
// base) to recs and returns them and the offset after the last one. Their
// attributes and bodies (bodies only if asked for) alias buf.
func ScanRecords(recs []filters.Record, buf []byte, base int64, bodies bool) ([]filters.Record, int64) {
	it := message.NewIterator(buf, base, 0)
	for it.Next() {
		rec := it.Record()
		fr := filters.Record{Offset: rec.Offset, MsgID: rec.ID, Flag: rec.Flag, Size: len(rec.Data)}
		a, has, props, payload := splitAttr(rec.Flag, rec.Data)
		fr.Properties = props
		if has {
			// Aliases buf: valid for the Accept call (filters.Filter's contract).
			fr.Attribute, fr.HasAttribute = unsafe.String(unsafe.SliceData(a), len(a)), true
		}
		if bodies {
			fr.Body = payload[:len(payload):len(payload)]
		}
		recs = append(recs, fr)
	}
	return recs, it.NextOffset()
}

// splitAttr is message.SplitData without allocating the attribute string
// or checking the properties block (the broker validates both on put): a
// malformed attribute reads as none. props is the properties block (flag
// bit 1) after its length prefix, nil without one; the payload excludes
// it, as the Go consumer's does.
func splitAttr(flag int32, data []byte) (attr []byte, has bool, props, payload []byte) {
	payload = data
	if flag&message.FlagHasAttribute != 0 && len(data) >= 4 {
		if n := binary.BigEndian.Uint32(data); uint64(n) <= uint64(len(data)-4) {
			attr, has, payload = data[4:4+n], true, data[4+n:]
		}
	}
	if flag&message.FlagHasProperties != 0 && len(payload) >= 4 {
		if n := binary.BigEndian.Uint32(payload); uint64(n) <= uint64(len(payload)-4) {
			props, payload = payload[4:4+n:4+n], payload[4+n:]
		}
	}
	return attr, has, props, payload
}
