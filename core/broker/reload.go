package broker

import (
	"reflect"
	"slices"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/registry"
)

// Reload (metaq-server's SIGHUP) applies a new configuration without
// dropping a connection. What can change live (conf/diff.go lists it) is
// applied; what needs a restart keeps its current value and is reported.
// See docs/operations.md. Connections already authenticated get the new
// rights of their user on their next request, and lose access if the user
// was removed; new [tls] settings apply to new handshakes; limits on
// connections apply to connections accepted from now on.

// ReloadReport says what a Reload did.
type ReloadReport = conf.Report

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
	d := cur.Diff(next)
	rep, eff := d.Report, d.Effective

	// Apply. TLS first: it is the one step that can fail.
	if b.tls != nil {
		if err := b.tls.ReloadFrom(eff.TLS); err != nil {
			return ReloadReport{}, err
		}
		what := "TLS certificates reloaded from " + eff.TLS.CertFile
		if d.TLS {
			what = "[tls] settings changed; " + what
		}
		rep.Applied = append(rep.Applied, what)
	}
	b.mu.Lock()
	b.cfgp.Store(eff)
	b.web.srv.Reload(httpapi.FromConf(eff))
	b.topicBook.SetServer(serverTopics)
	b.mu.Unlock()
	b.setLogLevels(eff)
	b.budget.SetLimit(eff.MaxBufferedBytes)
	b.groups.Reload(groups.FromConf(eff))
	if b.users != nil {
		b.users.Reload(&eff.Auth)
	}
	b.txm.Reload(b.txConfig(eff))
	if d.Disk {
		b.disks.SetMax(eff.DiskMaxUsedRatio)
		b.disks.Wake()
	}
	b.mu.RLock()
	reg := b.reg
	for _, tp := range b.topics.List() {
		tc, ok := eff.TopicConfig(tp.Name())
		if !ok { // removed from the file: keeps its settings
			continue
		}
		old := tp.Conf()
		tc = tc.KeepRestartOnly(old)
		if reflect.DeepEqual(&tc, old) {
			continue
		}
		tp.SetConf(&tc)
		if reg != nil && (tc.AcceptPublish != old.AcceptPublish || tc.AcceptSubscribe != old.AcceptSubscribe) {
			reg.AddTopic(registry.TopicOf(tc))
		}
	}
	b.mu.RUnlock()
	return rep, nil
}
