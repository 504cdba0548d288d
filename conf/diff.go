package conf

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// What a running broker can apply from a new configuration without a
// restart (metaq-server's SIGHUP; see docs/operations.md):
//
//   - [auth] users and their ACLs, failure_delay and the login limiter's
//     max_failures, lockout, max_lockout, failure_window;
//   - [tls] certificate, key, client CA, require_client_cert and
//     min_version (turning TLS on or off needs a restart);
//   - log_level and plugin_log_level;
//   - limits: max_connections, max_buffered_bytes, idle_timeout and
//     request_timeout, max_group_members, max_memberships_per_connection,
//     tx_default_timeout, tx_max_bytes, tx_max_buffered_bytes,
//     disk_max_used_ratio, auth_timeout, max_unauthenticated_connections,
//     max_unauthenticated_per_address;
//   - auto_create_topics;
//   - per topic (and the top-level defaults they inherit): accept_publish,
//     accept_subscribe, stat, delete_policy.
//
// Everything else needs a restart. [[topic]] tables that are new, or gone,
// need the admin API or a restart: a reload does not open or close topics.

// liveKeys are the top-level keys a reload applies.
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

// liveTopicKeys are the [[topic]] keys a reload applies to an open topic.
var liveTopicKeys = map[string]bool{
	"accept_publish": true, "accept_subscribe": true, "stat": true, "delete_policy": true,
}

// Report says what a reload did.
type Report struct {
	// Applied are the settings that changed and now apply ("max_connections
	// 10000 -> 500", "auth users", "topic t accept_publish true -> false").
	Applied []string
	// NeedRestart are settings that changed in the file but keep their
	// current value until a restart (or, for topics, the admin API).
	NeedRestart []string
}

// Changed reports whether the new file differed in anything.
func (r Report) Changed() bool { return len(r.Applied)+len(r.NeedRestart) > 0 }

// Diff is the comparison of a running configuration with the next one.
type Diff struct {
	// Report lists the changes, applied and needing a restart.
	Report
	// Effective is the configuration to run with: next, with the
	// restart-only values (and the topics it added or removed) kept as
	// they run.
	Effective *Config
	// TLS is set when live [tls] settings changed (the certificate
	// material itself is reloaded on every reload).
	TLS bool
	// Disk is set when disk_max_used_ratio changed.
	Disk bool
}

// Diff compares c, the running configuration, with next (validated,
// with its topics file applied). Neither is modified.
func (c *Config) Diff(next *Config) Diff {
	var d Diff
	eff := *next
	d.Effective = &eff

	// Top-level scalars.
	ev, cv := reflect.ValueOf(&eff).Elem(), reflect.ValueOf(c).Elem()
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
			d.Applied = append(d.Applied, change)
		} else {
			d.NeedRestart = append(d.NeedRestart, change)
			nv.Set(ov)
		}
	}
	d.Disk = eff.DiskMaxUsedRatio != c.DiskMaxUsedRatio
	// Tables.
	if !reflect.DeepEqual(eff.ZooKeeper, c.ZooKeeper) {
		d.NeedRestart = append(d.NeedRestart, "[zookeeper]")
		eff.ZooKeeper = c.ZooKeeper
	}
	if !reflect.DeepEqual(eff.Plugins, c.Plugins) {
		d.NeedRestart = append(d.NeedRestart, "[[plugin]]")
		eff.Plugins = c.Plugins
	}
	switch {
	case eff.TLS.Enabled() != c.TLS.Enabled():
		d.NeedRestart = append(d.NeedRestart, "[tls] on/off")
		eff.TLS = c.TLS
	case !reflect.DeepEqual(eff.TLS, c.TLS):
		d.TLS = true
	}
	switch {
	case eff.Auth.Enabled != c.Auth.Enabled:
		d.NeedRestart = append(d.NeedRestart, fmt.Sprintf("auth.enabled %v -> %v", c.Auth.Enabled, eff.Auth.Enabled))
		eff.Auth = c.Auth
	default:
		if eff.Auth.FailureDelay != c.Auth.FailureDelay {
			d.Applied = append(d.Applied, fmt.Sprintf("auth.failure_delay %d -> %d", c.Auth.FailureDelay, eff.Auth.FailureDelay))
		}
		for _, k := range []struct {
			key      string
			from, to int
		}{{"max_failures", c.Auth.MaxFailures, eff.Auth.MaxFailures}, {"lockout", c.Auth.Lockout, eff.Auth.Lockout},
			{"max_lockout", c.Auth.MaxLockout, eff.Auth.MaxLockout}, {"failure_window", c.Auth.FailureWindow, eff.Auth.FailureWindow}} {
			if k.from != k.to { // the login limiter reads them at each attempt
				d.Applied = append(d.Applied, fmt.Sprintf("auth.%s %d -> %d", k.key, k.from, k.to))
			}
		}
		d.Applied = append(d.Applied, userChanges(c.Auth.Users, eff.Auth.Users)...)
	}
	d.diffTopics(c, &eff)
	return d
}

// diffTopics compares the [[topic]] tables: new and removed topics, and
// changes to restart-only attributes, are reported and left out of eff;
// changes to live attributes of open topics are reported as applied.
func (d *Diff) diffTopics(cur, eff *Config) {
	curT := map[string]Topic{}
	for _, tp := range cur.Topics {
		curT[tp.Name] = tp
	}
	var topics []Topic
	seen := map[string]bool{}
	for _, tp := range eff.Topics {
		seen[tp.Name] = true
		old, ok := curT[tp.Name]
		if !ok {
			d.NeedRestart = append(d.NeedRestart, fmt.Sprintf("topic %s is new: it needs the admin API or a restart", tp.Name))
			continue
		}
		if !reflect.DeepEqual(tp.Filters, old.Filters) {
			d.NeedRestart = append(d.NeedRestart, fmt.Sprintf("topic %s filters", tp.Name))
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
				d.Applied = append(d.Applied, change)
			} else {
				d.NeedRestart = append(d.NeedRestart, change)
				nv.Field(i).Set(ov.Field(i))
			}
		}
		topics = append(topics, tp)
	}
	for _, tp := range cur.Topics {
		if !seen[tp.Name] {
			d.NeedRestart = append(d.NeedRestart, fmt.Sprintf("topic %s was removed: it needs the admin API or a restart (it keeps running)", tp.Name))
			topics = append(topics, tp)
		}
	}
	eff.Topics = topics
}

// userChanges describes the differences between two [[auth.user]] lists
// (names only, never password hashes).
func userChanges(cur, next []User) []string {
	cm := map[string]User{}
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

// KeepRestartOnly returns t, the settings a reload gives an open topic,
// with the restart-only attributes kept as old, the topic as it was
// opened, has them: only the live ones (see liveTopicKeys) change.
func (t TopicConfig) KeepRestartOnly(old *TopicConfig) TopicConfig {
	t.NumPartitions, t.UnflushThreshold, t.UnflushInterval = old.NumPartitions, old.UnflushThreshold, old.UnflushInterval
	t.DataDir, t.Filters = old.DataDir, old.Filters
	return t
}
