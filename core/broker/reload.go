package broker

import (
	"fmt"
	"github.com/metaq-go/metaq/core/httpapi"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/registry"
)

// Reload (metaq-server's SIGHUP) applies a new configuration without
// dropping a connection. What can change live is applied; what needs a
// restart keeps its current value and is reported. See docs/operations.md.
//
// Live:
//   - [auth] users and their ACLs, failure_delay and the login limiter's
//     max_failures, lockout, max_lockout, failure_window (connections already
//     authenticated get the new rights of their user on their next
//     request, and lose access if the user was removed);
//   - [tls] certificate, key, client CA, require_client_cert and
//     min_version (new handshakes; established connections keep theirs);
//   - log_level and plugin_log_level;
//   - limits: max_connections, max_buffered_bytes, idle_timeout and
//     request_timeout (for connections accepted from now on),
//     max_group_members, max_memberships_per_connection,
//     tx_default_timeout, tx_max_bytes, tx_max_buffered_bytes,
//     disk_max_used_ratio, auth_timeout, max_unauthenticated_connections,
//     max_unauthenticated_per_address;
//   - auto_create_topics;
//   - per topic (and the top-level defaults they inherit): accept_publish,
//     accept_subscribe, stat, delete_policy.
//
// Everything else needs a restart. [[topic]] tables that are new, or gone,
// need the admin API or a restart: Reload does not open or close topics.

// liveKeys are the top-level keys Reload applies.
var liveKeys = map[string]bool{
	"log_level": true, "plugin_log_level": true,
	"max_connections": true, "max_buffered_bytes": true,
	"idle_timeout": true, "request_timeout": true,
	"max_group_members": true, "max_memberships_per_connection": true,
	"tx_default_timeout": true, "tx_max_bytes": true, "tx_max_buffered_bytes": true,
	"disk_max_used_ratio": true,
	"auth_timeout":        true, "max_unauthenticated_connections": true, "max_unauthenticated_per_address": true,
	"auto_create_topics": true,
	"accept_publish":     true, "accept_subscribe": true, "stat": true, "delete_policy": true,
}

// liveTopicKeys are the [[topic]] keys Reload applies to an open topic.
var liveTopicKeys = map[string]bool{
	"accept_publish": true, "accept_subscribe": true, "stat": true, "delete_policy": true,
}

// ReloadReport says what a Reload did.
type ReloadReport struct {
	// Applied are the settings that changed and now apply ("max_connections
	// 10000 -> 500", "auth users", "topic t accept_publish true -> false").
	Applied []string
	// NeedRestart are settings that changed in the file but keep their
	// current value until a restart (or, for topics, the admin API).
	NeedRestart []string
}

// Changed reports whether the new file differed in anything.
func (r ReloadReport) Changed() bool { return len(r.Applied)+len(r.NeedRestart) > 0 }

// Reload applies next (a validated configuration, flags applied as at
// start) as described above. On error (next does not validate, or the
// new TLS material cannot be loaded) nothing changes.
func (b *Broker) Reload(next *conf.Config) (ReloadReport, error) {
	b.reloadMu.Lock()
	defer b.reloadMu.Unlock()
	var rep ReloadReport
	if err := next.Validate(); err != nil {
		return rep, err
	}
	// Topic changes made through the admin API (topicadmin.go) are not
	// in server.toml: apply topics.toml over the new file as New does,
	// and hold adminMu so that no such change lands in between.
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	serverTopics := slices.Clone(next.Topics)
	if b.topicBook != nil {
		if err := next.ApplyTopics(b.topicBook.File()); err != nil {
			return rep, err
		}
	}
	cur := b.config()
	eff := *next // the configuration to run with: next, restart-only values kept

	// Top-level scalars.
	ev, cv := reflect.ValueOf(&eff).Elem(), reflect.ValueOf(cur).Elem()
	t := ev.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		key := f.Tag.Get("toml")
		if !f.IsExported() || key == "" || f.Type.Kind() == reflect.Struct ||
			f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
			continue
		}
		nv, ov := ev.Field(i), cv.Field(i)
		if reflect.DeepEqual(nv.Interface(), ov.Interface()) {
			continue
		}
		change := fmt.Sprintf("%s %v -> %v", key, show(ov), show(nv))
		if liveKeys[key] {
			rep.Applied = append(rep.Applied, change)
		} else {
			rep.NeedRestart = append(rep.NeedRestart, change)
			nv.Set(ov)
		}
	}
	// Tables.
	if !reflect.DeepEqual(eff.ZooKeeper, cur.ZooKeeper) {
		rep.NeedRestart = append(rep.NeedRestart, "[zookeeper]")
		eff.ZooKeeper = cur.ZooKeeper
	}
	if !reflect.DeepEqual(eff.Plugins, cur.Plugins) {
		rep.NeedRestart = append(rep.NeedRestart, "[[plugin]]")
		eff.Plugins = cur.Plugins
	}
	tlsChanged := false
	switch {
	case eff.TLS.Enabled() != cur.TLS.Enabled():
		rep.NeedRestart = append(rep.NeedRestart, "[tls] on/off")
		eff.TLS = cur.TLS
	case !reflect.DeepEqual(eff.TLS, cur.TLS):
		tlsChanged = true
	}
	switch {
	case eff.Auth.Enabled != cur.Auth.Enabled:
		rep.NeedRestart = append(rep.NeedRestart, fmt.Sprintf("auth.enabled %v -> %v", cur.Auth.Enabled, eff.Auth.Enabled))
		eff.Auth = cur.Auth
	default:
		if eff.Auth.FailureDelay != cur.Auth.FailureDelay {
			rep.Applied = append(rep.Applied, fmt.Sprintf("auth.failure_delay %d -> %d", cur.Auth.FailureDelay, eff.Auth.FailureDelay))
		}
		for _, k := range []struct {
			key      string
			from, to int
		}{{"max_failures", cur.Auth.MaxFailures, eff.Auth.MaxFailures}, {"lockout", cur.Auth.Lockout, eff.Auth.Lockout},
			{"max_lockout", cur.Auth.MaxLockout, eff.Auth.MaxLockout}, {"failure_window", cur.Auth.FailureWindow, eff.Auth.FailureWindow}} {
			if k.from != k.to { // the login limiter reads them at each attempt
				rep.Applied = append(rep.Applied, fmt.Sprintf("auth.%s %d -> %d", k.key, k.from, k.to))
			}
		}
		rep.Applied = append(rep.Applied, userChanges(cur.Auth.Users, eff.Auth.Users)...)
	}
	b.reloadTopics(cur, &eff, &rep)

	// Apply. TLS first: it is the one step that can fail.
	if b.tls != nil {
		if err := b.tls.ReloadFrom(eff.TLS); err != nil {
			return ReloadReport{}, err
		}
		what := "TLS certificates reloaded from " + eff.TLS.CertFile
		if tlsChanged {
			what = "[tls] settings changed; " + what
		}
		rep.Applied = append(rep.Applied, what)
	}
	b.mu.Lock()
	b.cfgp.Store(&eff)
	b.web.srv.Reload(httpapi.FromConf(&eff))
	b.topicBook.SetServer(serverTopics)
	b.mu.Unlock()
	b.setLogLevels(&eff)
	b.budget.setLimit(eff.MaxBufferedBytes)
	b.groups.Reload(groups.FromConf(&eff))
	if b.users != nil {
		b.users.Reload(&eff.Auth)
	}
	b.txm.Reload(b.txConfig(&eff))
	if eff.DiskMaxUsedRatio != cur.DiskMaxUsedRatio {
		b.disks.SetMax(eff.DiskMaxUsedRatio)
		b.disks.Wake()
	}
	b.mu.RLock()
	reg := b.reg
	for _, tp := range b.topics {
		tc, ok := eff.TopicConfig(tp.name)
		if !ok { // removed from the file: keeps its settings
			continue
		}
		old := tp.conf()
		// Restart-only attributes stay as the topic was opened.
		tc.NumPartitions, tc.UnflushThreshold, tc.UnflushInterval = old.NumPartitions, old.UnflushThreshold, old.UnflushInterval
		tc.DataDir, tc.Filters = old.DataDir, old.Filters
		if reflect.DeepEqual(&tc, old) {
			continue
		}
		tp.cfgp.Store(&tc)
		if reg != nil && (tc.AcceptPublish != old.AcceptPublish || tc.AcceptSubscribe != old.AcceptSubscribe) {
			reg.AddTopic(registry.TopicOf(tc))
		}
	}
	b.mu.RUnlock()
	return rep, nil
}

// reloadTopics compares the [[topic]] tables: new and removed topics, and
// changes to restart-only attributes, are reported and left out of eff;
// changes to live attributes of open topics are reported as applied.
func (b *Broker) reloadTopics(cur, eff *conf.Config, rep *ReloadReport) {
	curT := map[string]conf.Topic{}
	for _, tp := range cur.Topics {
		curT[tp.Name] = tp
	}
	var topics []conf.Topic
	seen := map[string]bool{}
	for _, tp := range eff.Topics {
		seen[tp.Name] = true
		old, ok := curT[tp.Name]
		if !ok {
			rep.NeedRestart = append(rep.NeedRestart, fmt.Sprintf("topic %s is new: it needs the admin API or a restart", tp.Name))
			continue
		}
		if !reflect.DeepEqual(tp.Filters, old.Filters) {
			rep.NeedRestart = append(rep.NeedRestart, fmt.Sprintf("topic %s filters", tp.Name))
			tp.Filters = old.Filters
		}
		nv, ov := reflect.ValueOf(&tp).Elem(), reflect.ValueOf(old)
		for i := 0; i < nv.NumField(); i++ {
			key := nv.Type().Field(i).Tag.Get("toml")
			if key == "name" || key == "filter" || reflect.DeepEqual(nv.Field(i).Interface(), ov.Field(i).Interface()) {
				continue
			}
			change := fmt.Sprintf("topic %s %s %v -> %v", tp.Name, key, show(ov.Field(i)), show(nv.Field(i)))
			if liveTopicKeys[key] {
				rep.Applied = append(rep.Applied, change)
			} else {
				rep.NeedRestart = append(rep.NeedRestart, change)
				nv.Field(i).Set(ov.Field(i))
			}
		}
		topics = append(topics, tp)
	}
	for _, tp := range cur.Topics {
		if !seen[tp.Name] {
			rep.NeedRestart = append(rep.NeedRestart, fmt.Sprintf("topic %s was removed: it needs the admin API or a restart (it keeps running)", tp.Name))
			topics = append(topics, tp)
		}
	}
	eff.Topics = topics
}

// userChanges describes the differences between two [[auth.user]] lists
// (names only, never password hashes).
func userChanges(cur, next []conf.User) []string {
	cm := map[string]conf.User{}
	for _, u := range cur {
		cm[u.Name] = u
	}
	var added, removed, changed []string
	nm := map[string]bool{}
	for _, u := range next {
		nm[u.Name] = true
		o, ok := cm[u.Name]
		switch {
		case !ok:
			added = append(added, u.Name)
		case !reflect.DeepEqual(o, u):
			changed = append(changed, u.Name)
		}
	}
	for _, u := range cur {
		if !nm[u.Name] {
			removed = append(removed, u.Name)
		}
	}
	var out []string
	for _, x := range []struct {
		what  string
		names []string
	}{{"added", added}, {"removed", removed}, {"changed", changed}} {
		if len(x.names) > 0 {
			sort.Strings(x.names)
			out = append(out, fmt.Sprintf("auth users %s: %s", x.what, strings.Join(x.names, ", ")))
		}
	}
	return out
}

// show renders a config value for a reload log line (pointers
// dereferenced, unset as "(unset)", strings quoted).
func show(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "(unset)"
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.String {
		return fmt.Sprintf("%q", v.String())
	}
	return fmt.Sprint(v.Interface())
}
