package broker

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/metaq-go/metaq/core/httpapi"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// The dashboard (docs/dashboard.md): server-rendered pages under /ui/,
// html/template and a little plain JavaScript, embedded. Pages read the
// same data as the admin API (admin_http.go) and act through the same
// functions; they are behind the same auth (needUser: a user to look, an
// admin for every POST). Actions are POST forms carrying a CSRF token
// (an HMAC of the user name under a key drawn at start), and a POST whose
// Origin, Referer or Sec-Fetch-Site names another site is refused.

//go:embed dashboard
var dashFS embed.FS

// dashPages are the templates, one per page, each with the layout.
var dashPages = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"bytes":     humanBytes,
		"rate":      func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
		"lagchart":  lagChart,
		"ratechart": rateChart,
		"ago":       func(t time.Time) string { return time.Since(t).Truncate(time.Second).String() },
		"deref":     func(p *int64) int64 { return *p },
	}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(dashFS, "dashboard/layout.html"))
	pages, err := fs.Glob(dashFS, "dashboard/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, p := range pages {
		name := strings.TrimSuffix(strings.TrimPrefix(p, "dashboard/"), ".html")
		if name == "layout" {
			continue
		}
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(dashFS, p))
	}
	return out
}()

// Browsing limits: at most dashMaxMessages records a page, bodies shown
// up to dashMaxShown bytes.
const (
	dashDefaultMessages = 20
	dashMaxMessages     = 100
	dashMaxShown        = 4096
	dashZKTimeout       = 3 * time.Second
)

// dashRoutes adds the dashboard's pages to the mux.
func (b *Broker) dashRoutes(mux *http.ServeMux, user, admin func(pattern string, h http.HandlerFunc)) {
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	static, _ := fs.Sub(dashFS, "dashboard/static")
	user("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)).ServeHTTP)
	user("GET /ui/{$}", b.uiCluster)
	user("GET /ui/topics", b.uiTopics)
	user("GET /ui/topics/{name}", b.uiTopic)
	user("GET /ui/topics/{name}/messages", b.uiMessages)
	user("GET /ui/groups", b.uiGroups)
	user("GET /ui/groups/{group}", b.uiGroup)
	// The configuration (every user's ACLs) and the plugins (names, pids,
	// errors) cannot be checked per topic or group: admin only, as stats
	// config and stats plugins are on the protocol port.
	admin("GET /ui/config", b.uiConfig)
	admin("GET /ui/plugins", b.uiPlugins)
	admin("POST /ui/topics", b.uiCSRF(b.uiCreateTopic))
	admin("POST /ui/topics/{name}/delete", b.uiCSRF(b.uiDeleteTopic))
	admin("POST /ui/topics/{name}/partitions", b.uiCSRF(b.uiAlterPartitions))
	admin("POST /ui/groups/{group}/reset", b.uiCSRF(b.uiReset))
	admin("POST /ui/groups/{group}/skip", b.uiCSRF(b.uiSkip))
	user("/ui/", func(w http.ResponseWriter, r *http.Request) {
		b.uiError(w, r, http.StatusNotFound, "no such page: "+shownName(r.Method)+" "+shownName(r.URL.Path))
	})
}

// dashPage is what every template gets.
type dashPage struct {
	Title    string
	Nav      string
	User     string
	Admin    bool
	CSRF     string
	BrokerID int
	Version  string
	Role     string
	Flash    string
	Error    string
	Data     any
}

func (b *Broker) role() string {
	switch {
	case b.replRole() == repl.RoleSlave:
		return "slave " + strconv.Itoa(b.slave.ID())
	case b.sync != nil:
		return "master (sync replication)"
	}
	return "master"
}

// render writes page name with data and code.
func (b *Broker) render(w http.ResponseWriter, r *http.Request, code int, name, title, nav string, data any, flash string) {
	p := dashPage{Title: title, Nav: nav, BrokerID: b.config().BrokerID, Version: Version, Role: b.role(), Flash: flash, Data: data, Admin: true}
	if u := requestUser(r); u != nil {
		p.User, p.Admin = u.Name, u.Admin
	}
	p.CSRF = b.csrfToken(p.User)
	var sb strings.Builder
	if err := dashPages[name].Execute(&sb, p); err != nil {
		b.logf("dashboard: render %s: %v", name, err)
		http.Error(w, "dashboard: cannot render the page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write([]byte(sb.String()))
}

// uiError answers a page saying what was wrong.
func (b *Broker) uiError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	msg = capMsg(msg)
	b.render(w, r, code, "error", strconv.Itoa(code)+" "+http.StatusText(code), "", map[string]any{"Code": code, "Status": http.StatusText(code), "Message": msg}, "")
}

// csrfToken is the token the forms of user's pages carry.
func (b *Broker) csrfToken(user string) string {
	d := &b.web.dash
	d.csrfOnce.Do(func() {
		d.csrfKey = make([]byte, 32)
		rand.Read(d.csrfKey)
	})
	m := hmac.New(sha256.New, d.csrfKey)
	m.Write([]byte("metaq-dashboard\x00" + user))
	return hex.EncodeToString(m.Sum(nil))
}

// uiCSRF refuses a POST from another site or without the user's token.
func (b *Broker) uiCSRF(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			b.uiError(w, r, http.StatusBadRequest, "bad form: "+err.Error())
			return
		}
		if why := crossSite(r); why != "" {
			b.uiError(w, r, http.StatusForbidden, "refused: "+why)
			return
		}
		user := ""
		if u := requestUser(r); u != nil {
			user = u.Name
		}
		if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(b.csrfToken(user))) {
			b.uiError(w, r, http.StatusForbidden, "refused: the form's CSRF token is missing or stale (reload the page and try again)")
			return
		}
		h(w, r)
	}
}

// ---- cluster ----

type clusterView struct {
	Mode, Addr, TLSAddr, HTTPAddr, ZKRoot string
	Registered, Serving                   bool
	Replication                           string
	Slave                                 [][2]string // the slave's stats lines
	Sync                                  [][2]string // a sync master's
	Console                               clusterConsole
	Ready                                 []readyCheck
	Throughput                            []ratePoint
}

func kvLines(f func(kv func(k string, v any))) [][2]string {
	var out [][2]string
	f(func(k string, v any) { out = append(out, [2]string{k, fmt.Sprint(v)}) })
	return out
}

func (b *Broker) uiCluster(w http.ResponseWriter, r *http.Request) {
	v := clusterView{Mode: "local", HTTPAddr: b.HTTPAddr(), Serving: b.serving.Load(), Registered: b.Registered(),
		Replication: b.config().Replication, Ready: b.readiness()}
	if b.serving.Load() {
		v.Addr, v.TLSAddr = b.Addr(), b.TLSAddr()
	}
	if b.replRole() == repl.RoleSlave {
		v.Slave = kvLines(func(kv func(k string, v any)) { slaveStatsLines(b.slave.Status(), kv) })
	}
	if b.sync != nil {
		v.Sync = kvLines(func(kv func(k string, v any)) { syncStatsLines(b.sync.Status(), kv) })
	}
	if b.config().ZooKeeper.Enabled() {
		v.Mode, v.ZKRoot = "cluster", b.config().ZooKeeper.Root
		v.Console = b.clusterConsole(b.httpViewer(r), time.Now())
	}
	v.Throughput = b.rateTrendFor(b.httpViewer(r))
	b.render(w, r, http.StatusOK, "cluster", "Cluster", "cluster", v, "")
}

// ---- topics ----

type topicRow struct {
	httpapi.TopicInfo
	Rate    topicRate
	HasRate bool
}

func (b *Broker) uiTopics(w http.ResponseWriter, r *http.Request) {
	rates := b.topicRates()
	var rows []topicRow
	for _, t := range b.visibleTopics(b.httpViewer(r)) {
		rt, ok := rates[t.name]
		rows = append(rows, topicRow{b.topicJSON(t, false), rt, ok})
	}
	flash := ""
	q := r.URL.Query()
	if n := q.Get("created"); n != "" {
		flash = "Topic " + n + " created."
	} else if n := q.Get("deleted"); n != "" {
		flash = "Topic " + n + " deleted."
	}
	b.render(w, r, http.StatusOK, "topics", "Topics", "topics", map[string]any{"Topics": rows, "Every": dashSampleEvery, "Throughput": b.rateTrendFor(b.httpViewer(r)),
		"MaxPartitions": conf.MaxPartitions, "Default": b.config().NumPartitions}, flash)
}

// uiTopicNamed returns the open topic of the path, if the user may do act
// to it (403 page otherwise, whether or not it exists), or answers 404.
func (b *Broker) uiTopicNamed(w http.ResponseWriter, r *http.Request, act security.Action) *topic {
	name := r.PathValue("name")
	if err := b.httpViewer(r).authorize(act, name); err != nil {
		b.uiError(w, r, http.StatusForbidden, err.Error())
		return nil
	}
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if t == nil {
		b.uiError(w, r, http.StatusNotFound, "no such topic: "+quoteName(name))
	}
	return t
}

// uiTopic is a topic's page: its partitions' offsets, counts and rates,
// and the link to its messages. Like stats <topic> it needs the topic
// described (publish or subscribe).
func (b *Broker) uiTopic(w http.ResponseWriter, r *http.Request) {
	t := b.uiTopicNamed(w, r, security.Describe)
	if t == nil {
		return
	}
	rt, ok := b.topicRates()[t.name]
	flash := ""
	if s := r.URL.Query().Get("altered"); s == strconv.Itoa(len(t.parts)) {
		flash = "Topic " + t.name + " already has " + s + " partitions: nothing changed."
	} else if s != "" {
		flash = "Topic " + t.name + " now has " + strconv.Itoa(len(t.parts)) + " partitions (was " + s + "). Warning: " + httpapi.KeyedOrderingWarning + "."
	}
	b.render(w, r, http.StatusOK, "topic", "Topic "+t.name, "topics", map[string]any{"Topic": b.topicJSON(t, true), "Rate": rt, "HasRate": ok, "Throughput": b.rateTrend(t.name),
		"Warning": httpapi.KeyedOrderingWarning, "MaxPartitions": conf.MaxPartitions,
		"Browse": b.httpViewer(r).authorize(security.Subscribe, t.name) == nil}, flash) // browse links only for a subscriber
}

// uiAlterPartitions gives a topic more partitions (b.AddPartitions, as
// POST /api/v1/topics/{name}/partitions): the form must carry the
// acknowledgement of the keyed-ordering warning.
func (b *Broker) uiAlterPartitions(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	s := strings.TrimSpace(r.PostForm.Get("partitions"))
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > conf.MaxPartitions {
		b.uiError(w, r, http.StatusBadRequest, "partitions must be 1.."+strconv.Itoa(conf.MaxPartitions)+", got "+quoteName(s))
		return
	}
	if r.PostForm.Get("ack_ordering") != "yes" {
		b.uiError(w, r, http.StatusBadRequest, "tick the box that acknowledges the warning to change the partition count of "+
			quoteName(name)+": "+httpapi.KeyedOrderingWarning)
		return
	}
	old, err := b.AddPartitions(name, n)
	if err != nil {
		b.uiError(w, r, topicErrCode(err), "cannot change the partitions of topic "+quoteName(name)+": "+err.Error())
		return
	}
	b.auditAlter(httpapi.ActorOf(r), name, old, n)
	http.Redirect(w, r, "/ui/topics/"+url.PathEscape(name)+"?altered="+strconv.Itoa(old), http.StatusSeeOther)
}

// shownMessage is one record on the messages page.
type shownMessage struct {
	Offset, ID, Next int64
	Flag             int32
	Size             int
	Attribute        string
	HasAttribute     bool
	Body             string // text, or a hex dump
	Hex              bool   // Body is hex (asked for, or not UTF-8)
	Cut              int    // bytes not shown
}

// browseQuery is the messages page's query: ?partition=&offset=&count=&format=.
type browseQuery struct {
	Partition int
	Offset    int64 // -1: the partition's min
	Count     int
	Hex       bool
}

// parseBrowse parses the messages page's query; parts is the topic's
// partition count. Errors are for a 400 page.
func parseBrowse(q url.Values, parts int) (browseQuery, error) {
	bq := browseQuery{Offset: -1, Count: dashDefaultMessages}
	if s := q.Get("partition"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < 0 || p >= parts {
			return bq, fmt.Errorf("partition must be a number 0..%d, got %s", parts-1, quoteName(s))
		}
		bq.Partition = p
	}
	if s := q.Get("offset"); s != "" {
		o, err := strconv.ParseInt(s, 10, 64)
		if err != nil || o < 0 {
			return bq, fmt.Errorf("offset must be a byte offset (a number >= 0), got %s", quoteName(s))
		}
		bq.Offset = o
	}
	if s := q.Get("count"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > dashMaxMessages {
			return bq, fmt.Errorf("count must be 1..%d, got %s", dashMaxMessages, quoteName(s))
		}
		bq.Count = n
	}
	switch f := q.Get("format"); f {
	case "", "text":
	case "hex":
		bq.Hex = true
	default:
		return bq, fmt.Errorf("format must be text or hex, got %s", quoteName(f))
	}
	return bq, nil
}

// errNotRecord is browse's error for an offset that does not start a
// valid record.
var errNotRecord = errors.New("not the start of a valid record")

// browse reads up to n records of l from offset. It stops before a
// record that does not parse (corrupt, or offset is not a record
// boundary): such bytes are never shown; err says so when nothing could
// be shown.
func (b *Broker) browse(l *store.Log, topic string, part int32, offset int64, n int, asHex bool) ([]shownMessage, int64, error) {
	maxMsg := b.config().MaxMessageSize
	chunk := 64 << 10
	var out []shownMessage
	cur := offset
	var buf []byte
	for len(out) < n {
		v, err := l.Read(cur, chunk)
		if errors.Is(err, store.ErrNoData) {
			break
		}
		if err != nil {
			if len(out) > 0 {
				break
			}
			return nil, cur, err
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			return out, cur, err
		}
		it := message.NewIterator(buf, cur, maxMsg)
		got := 0
		for len(out) < n && it.Next() {
			rec := it.Record()
			m, err := rec.Message(topic, part)
			if err != nil {
				return out, rec.Offset, fmt.Errorf("%w at offset %d: %v", errNotRecord, rec.Offset, err)
			}
			size := message.HeaderSize + len(rec.Data)
			sm := shownMessage{Offset: rec.Offset, ID: rec.ID, Flag: rec.Flag, Size: size, Next: rec.Offset + int64(size),
				Attribute: m.Attribute, HasAttribute: m.HasAttribute}
			body := m.Body
			if len(body) > dashMaxShown {
				sm.Cut = len(body) - dashMaxShown
				body = body[:dashMaxShown]
			}
			if asHex || !utf8.Valid(body) {
				sm.Body, sm.Hex = hex.Dump(body), true
			} else {
				sm.Body = string(body)
			}
			out = append(out, sm)
			cur = sm.Next
			got++
		}
		if err := it.Err(); err != nil {
			return out, cur, fmt.Errorf("%w at offset %d: %v", errNotRecord, cur, err)
		}
		if got == 0 {
			// The record at cur is longer than the chunk (or the bytes
			// there are not a record): read more, up to one whole record.
			if chunk >= maxMsg+message.HeaderSize || len(buf) < chunk {
				return out, cur, fmt.Errorf("%w at offset %d", errNotRecord, cur)
			}
			chunk = min(chunk*4, maxMsg+message.HeaderSize)
		}
	}
	return out, cur, nil
}

// uiMessages browses a partition's records: it reads messages, so it
// needs subscribe, as get does.
func (b *Broker) uiMessages(w http.ResponseWriter, r *http.Request) {
	t := b.uiTopicNamed(w, r, security.Subscribe)
	if t == nil {
		return
	}
	bq, err := parseBrowse(r.URL.Query(), len(t.parts))
	if err != nil {
		b.uiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	l := t.parts[bq.Partition]
	minOff, maxOff := l.MinOffset(), l.MaxOffset()
	if bq.Offset < 0 {
		bq.Offset = minOff
	}
	if bq.Offset < minOff || bq.Offset > maxOff {
		b.uiError(w, r, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("offset %d is outside partition %d's offsets %d..%d", bq.Offset, bq.Partition, minOff, maxOff))
		return
	}
	msgs, next, err := b.browse(l, t.name, int32(bq.Partition), bq.Offset, bq.Count, bq.Hex)
	stopped := ""
	if err != nil {
		var oor *store.OffsetOutOfRangeError
		switch {
		case errors.As(err, &oor):
			b.uiError(w, r, http.StatusRequestedRangeNotSatisfiable, err.Error())
			return
		case errors.Is(err, store.ErrClosed) && len(msgs) == 0:
			b.uiError(w, r, http.StatusNotFound, "topic "+quoteName(t.name)+" was deleted or is being changed: reload its page")
			return
		case errors.Is(err, errNotRecord) && len(msgs) == 0:
			b.uiError(w, r, http.StatusUnprocessableEntity, fmt.Sprintf("offset %d of partition %d is not the start of a valid record "+
				"(not a record boundary, or the bytes there are corrupt): start from an offset the partition table or a Next link gives (%v)",
				bq.Offset, bq.Partition, err))
			return
		case len(msgs) == 0:
			b.uiError(w, r, http.StatusInternalServerError, "reading partition "+strconv.Itoa(bq.Partition)+": "+err.Error())
			return
		}
		stopped = err.Error()
	}
	format := "text"
	if bq.Hex {
		format = "hex"
	}
	b.render(w, r, http.StatusOK, "messages", "Messages of "+t.name, "topics", map[string]any{
		"Topic": t.name, "Partitions": len(t.parts), "Q": bq, "Format": format, "Messages": msgs, "Next": next,
		"Min": minOff, "Max": maxOff, "AtEnd": next >= maxOff, "Stopped": stopped,
	}, "")
}

func (b *Broker) uiCreateTopic(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PostForm.Get("name"))
	t := conf.Topic{Name: name}
	if s := r.PostForm.Get("partitions"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > conf.MaxPartitions {
			b.uiError(w, r, http.StatusBadRequest, "partitions must be 1.."+strconv.Itoa(conf.MaxPartitions)+", got "+quoteName(s))
			return
		}
		t.NumPartitions = &n
	}
	if err := b.CreateTopic(t); err != nil {
		b.uiError(w, r, topicErrCode(err), "cannot create topic "+quoteName(name)+": "+err.Error())
		return
	}
	b.auditCreate(httpapi.ActorOf(r), name)
	http.Redirect(w, r, "/ui/topics?created="+url.QueryEscape(name), http.StatusSeeOther)
}

// topicErrCode is topicErr's status for err.
func topicErrCode(err error) int {
	switch {
	case errors.Is(err, errTopicExists):
		return http.StatusConflict
	case errors.Is(err, partition.ErrNoTopic):
		return http.StatusNotFound
	case errors.Is(err, errTopicInvalid):
		return http.StatusBadRequest
	case errors.Is(err, errBrokerClosed):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func (b *Broker) uiDeleteTopic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if c := r.PostForm.Get("confirm"); c != name {
		b.uiError(w, r, http.StatusBadRequest, "type the topic's name ("+quoteName(name)+") to confirm the delete; got "+quoteName(c))
		return
	}
	if err := b.DeleteTopic(name, r.PostForm.Get("delete_data") == "true"); err != nil {
		b.uiError(w, r, topicErrCode(err), "cannot delete topic "+quoteName(name)+": "+err.Error())
		return
	}
	b.httpAudit(r, auditTopicDelete, "topic", name, "delete_data", r.PostForm.Get("delete_data") == "true")
	http.Redirect(w, r, "/ui/topics?deleted="+url.QueryEscape(name), http.StatusSeeOther)
}

// ---- groups ----

func (b *Broker) uiGroups(w http.ResponseWriter, r *http.Request) {
	type row struct {
		*httpapi.GroupEntry
		Lag    int64
		HasLag bool
		// ZooKeeper's members subscribing the topic and owners of its
		// partitions (cluster mode).
		ZKMembers, ZKOwners int
		AllMembers          int
	}
	v := b.httpViewer(r)
	var rows []row
	lags := b.lagsNow()
	for _, g := range b.groupListFor(v) { // the user's groups, on topics they may subscribe to
		x := row{GroupEntry: g}
		x.Lag, x.HasLag = lags[groupTopic{Group: g.Group, Topic: g.Topic}]
		x.AllMembers = g.Members
		rows = append(rows, x)
	}
	zkErr, zkTrunc := "", false
	var zkGroups []zkGroupView
	if b.config().ZooKeeper.Enabled() {
		type read struct {
			groups    []zkGroupView
			truncated bool
		}
		var x read
		x, zkErr = readZK(b, func(c *zk.Conn, root string) (read, error) {
			var x read
			var err error
			x.groups, x.truncated, err = readZKGroups(c, root, dashMaxZKGroups)
			return x, err
		})
		zkGroups, zkTrunc = x.groups, x.truncated
		at := map[groupTopic]int{}
		for i, x := range rows {
			at[groupTopic{Group: x.Group, Topic: x.Topic}] = i
		}
		for _, g := range zkGroups {
			for _, t := range g.Topics {
				if !v.groupTopic(g.Group, t) {
					continue
				}
				k := groupTopic{Group: g.Group, Topic: t}
				i, ok := at[k]
				if !ok {
					rows = append(rows, row{GroupEntry: &httpapi.GroupEntry{Group: g.Group, Topic: t, Note: "in ZooKeeper; its partitions are on other brokers"}})
					i = len(rows) - 1
					at[k] = i
				}
				for _, m := range g.Members {
					if slices.Contains(m.Topics, t) {
						rows[i].ZKMembers++
					}
				}
				for _, o := range g.Owners {
					if o.Topic == t {
						rows[i].ZKOwners++
					}
				}
			}
		}
		for i := range rows {
			rows[i].AllMembers = rows[i].Members + rows[i].ZKMembers
		}
		slices.SortFunc(rows, func(a, c row) int {
			return cmp.Or(strings.Compare(a.Group, c.Group), strings.Compare(a.Topic, c.Topic))
		})
	}
	b.render(w, r, http.StatusOK, "groups", "Consumer groups", "groups", map[string]any{"Groups": rows, "Every": dashSampleEvery,
		"ZooKeeper": b.config().ZooKeeper.Enabled(), "ZKEvery": groups.ZKOffsetsEvery, "Truncated": b.committed.ZKTruncated(),
		"MaxGroups": groups.ZKOffsetsMaxGroups, "MaxReads": groups.ZKOffsetsMaxReads, "ZKErr": zkErr, "ZKTruncated": zkTrunc, "ZKMax": dashMaxZKGroups}, "")
}

// lagsNow is each group/topic's lag in bytes now, from the committed
// offsets known (committed.go), for the open topics.
func (b *Broker) lagsNow() map[groupTopic]int64 {
	out := map[groupTopic]int64{}
	for _, g := range b.committed.Snapshot() {
		b.mu.RLock()
		t := b.topics[g.Topic]
		b.mu.RUnlock()
		if t == nil {
			continue
		}
		var lag int64
		for p, off := range g.Offsets {
			if off >= 0 && p < len(t.parts) {
				lag += max(t.parts[p].MaxOffset()-off, 0)
			}
		}
		out[groupTopic{Group: g.Group, Topic: g.Topic}] = lag
	}
	return out
}

// uiGroupName checks the path's group: 400 for a malformed name, 403
// without the group's rights.
func (b *Broker) uiGroupName(w http.ResponseWriter, r *http.Request) (string, bool) {
	group := r.PathValue("group")
	if err := message.ValidateGroup(group); err != nil {
		b.uiError(w, r, http.StatusBadRequest, "group "+quoteName(group)+": "+err.Error())
		return "", false
	}
	if err := b.httpViewer(r).authorize(security.UseGroup, group); err != nil {
		b.uiError(w, r, http.StatusForbidden, err.Error())
		return "", false
	}
	return group, true
}

type groupTopicView struct {
	httpapi.GroupTopic
	Trend []lagPoint
}

func (b *Broker) uiGroup(w http.ResponseWriter, r *http.Request) {
	group, ok := b.uiGroupName(w, r)
	if !ok {
		return
	}
	topics, err := b.groupTopics(r, group) // ?topic= needs subscribe on it; the others are filtered
	if err != nil {
		b.uiError(w, r, http.StatusForbidden, err.Error())
		return
	}
	// Cluster mode: the group as ZooKeeper holds it; its topics open here
	// are described too (as those it committed here are).
	var zg *zkGroupView
	zkErr := ""
	if b.config().ZooKeeper.Enabled() {
		zg, zkErr = b.zkGroupOf(group)
		if zg != nil && r.URL.Query().Get("topic") == "" {
			v := b.httpViewer(r)
			for _, t := range zg.Topics {
				if !slices.Contains(topics, t) && b.topicOpen(t) && v.authorize(security.Subscribe, t) == nil {
					topics = append(topics, t)
				}
			}
			slices.Sort(topics)
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), groups.CallTimeout)
	defer cancel()
	desc, err := b.describeGroup(ctx, group, topics)
	switch {
	case errors.Is(err, partition.ErrNoTopic):
		b.uiError(w, r, http.StatusNotFound, err.Error())
		return
	case err != nil:
		b.uiError(w, r, http.StatusBadGateway, "offset store "+b.offsets.Name()+": "+groups.Reason(err))
		return
	}
	var views []groupTopicView
	for _, d := range desc {
		views = append(views, groupTopicView{d, b.lagTrend(group, d.Topic)})
	}
	// Cluster mode: the members and owners ZooKeeper holds (the owners of
	// this broker's partitions go in the partition tables, the others in
	// a table of their own).
	var zkMembers []zkMember
	var elsewhere []zkOwner
	if zg != nil {
		v, self := b.httpViewer(r), b.config().BrokerID
		for _, m := range zg.Members {
			var ts []string
			for _, t := range m.Topics {
				if v.authorize(security.Subscribe, t) == nil {
					ts = append(ts, t)
				}
			}
			m.Topics = ts
			zkMembers = append(zkMembers, m)
		}
		for _, o := range zg.Owners {
			if v.authorize(security.Subscribe, o.Topic) != nil {
				continue
			}
			placed := false
			if o.BrokerID == self {
				for i := range views {
					if views[i].Topic != o.Topic {
						continue
					}
					for j := range views[i].Partitions {
						if p := &views[i].Partitions[j]; p.Partition == int(o.Partition) && p.Owner == "" {
							p.Owner, placed = o.Owner, true
						}
					}
				}
			}
			if !placed {
				elsewhere = append(elsewhere, o)
			}
		}
	}
	flash := ""
	q := r.URL.Query()
	if t := q.Get("reset"); t != "" {
		flash = "Offsets of topic " + t + " reset. " + httpapi.ResetNote + "."
	} else if s := q.Get("skipped"); s != "" {
		flash = "Skipped " + s + " to its end. " + httpapi.ResetNote + "."
	}
	b.render(w, r, http.StatusOK, "group", "Group "+group, "groups", map[string]any{"Group": group, "Topics": views, "Every": dashSampleEvery,
		"ZooKeeper": b.config().ZooKeeper.Enabled(), "ZKMembers": zkMembers, "Elsewhere": elsewhere, "ZKErr": zkErr}, flash)
}

// resetForm parses the reset and skip forms into a request.
func resetForm(f url.Values) (httpapi.ResetRequest, error) {
	req := httpapi.ResetRequest{Topic: f.Get("topic"), To: f.Get("to")}
	if s := f.Get("partition"); s != "" && s != "all" {
		p, err := strconv.Atoi(s)
		if err != nil {
			return req, fmt.Errorf("partition must be a number or all, got %s", quoteName(s))
		}
		req.Partition = &p
	}
	if s := strings.TrimSpace(f.Get("offset")); s != "" && req.To == "offset" {
		o, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return req, fmt.Errorf("offset must be a number, got %s", quoteName(s))
		}
		req.Offset = &o
	}
	return req, nil
}

// planDigest names a plan: Apply carries the dry run's, and is refused if
// the offsets moved meanwhile.
func planDigest(group string, p *httpapi.ResetPlan) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s", group, p.Topic)
	for _, c := range p.Changes {
		fmt.Fprintf(h, "\x00%d:%d:%d", c.Partition, c.From, c.To)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func (b *Broker) resetErrPage(w http.ResponseWriter, r *http.Request, err error) {
	var re *httpapi.RequestError
	if errors.As(err, &re) {
		b.uiError(w, r, re.Status, re.Msg)
		return
	}
	b.uiError(w, r, http.StatusInternalServerError, err.Error())
}

func (b *Broker) uiReset(w http.ResponseWriter, r *http.Request) {
	group, ok := b.uiGroupName(w, r)
	if !ok {
		return
	}
	req, err := resetForm(r.PostForm)
	if err != nil {
		b.uiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), groups.CallTimeout)
	defer cancel()
	plan, err := b.planReset(ctx, group, req)
	if err != nil {
		b.resetErrPage(w, r, err)
		return
	}
	digest := planDigest(group, plan)
	code, msg := http.StatusOK, ""
	if r.PostForm.Get("action") == "apply" {
		if r.PostForm.Get("plan") == digest {
			if err := b.applyReset(ctx, httpapi.ActorOf(r), group, req.To, plan); err != nil {
				b.resetErrPage(w, r, err)
				return
			}
			http.Redirect(w, r, "/ui/groups/"+url.PathEscape(group)+"?reset="+url.QueryEscape(plan.Topic), http.StatusSeeOther)
			return
		}
		code, msg = http.StatusConflict, "The offsets changed since the dry run (or there was none): nothing was written. Here is the dry run again."
	}
	off := ""
	if req.Offset != nil {
		off = strconv.FormatInt(*req.Offset, 10)
	}
	part := "all"
	if req.Partition != nil {
		part = strconv.Itoa(*req.Partition)
	}
	b.render(w, r, code, "reset", "Reset offsets of "+group, "groups", map[string]any{
		"Group": group, "Topic": plan.Topic, "Partition": part, "To": req.To, "Offset": off,
		"Changes": plan.Changes, "Plan": digest, "Note": httpapi.ResetNote, "Warn": msg,
	}, "")
}

func (b *Broker) uiSkip(w http.ResponseWriter, r *http.Request) {
	group, ok := b.uiGroupName(w, r)
	if !ok {
		return
	}
	req, err := resetForm(r.PostForm)
	if err != nil {
		b.uiError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if req.Partition == nil {
		b.uiError(w, r, http.StatusBadRequest, "partition is required (skip moves one partition to its end)")
		return
	}
	req.To, req.Offset = "latest", nil
	ctx, cancel := context.WithTimeout(r.Context(), groups.CallTimeout)
	defer cancel()
	plan, err := b.planReset(ctx, group, req)
	if err == nil {
		err = b.applyReset(ctx, httpapi.ActorOf(r), group, httpapi.SkipTo, plan)
	}
	if err != nil {
		b.resetErrPage(w, r, err)
		return
	}
	http.Redirect(w, r, "/ui/groups/"+url.PathEscape(group)+"?skipped="+url.QueryEscape(plan.Topic+" partition "+strconv.Itoa(*req.Partition)), http.StatusSeeOther)
}

// ---- config, plugins ----

func (b *Broker) uiConfig(w http.ResponseWriter, r *http.Request) {
	cfg := b.config()
	b.render(w, r, http.StatusOK, "config", "Config", "config", map[string]any{"Config": string(cfg.Redacted()),
		"Path": cfg.Path(), "Checksum": b.configChecksum()}, "")
}

func (b *Broker) uiPlugins(w http.ResponseWriter, r *http.Request) {
	var infos any
	if b.plugins != nil {
		infos = b.plugins.List()
	}
	b.render(w, r, http.StatusOK, "plugins", "Plugins", "plugins", map[string]any{"Plugins": infos}, "")
}

// ---- helpers ----

// humanBytes renders n bytes for a person (1 KiB = 1024 B).
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	f, i := float64(n), 0
	for (f >= unit || f <= -unit) && i < 6 {
		f /= unit
		i++
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + "BKMGTPE"[i:i+1] + "iB"
}

// groupTopics returns the topics to describe for group: ?topic= (which
// needs subscribe on it: err is security.Authorize's refusal) or those
// the group committed here or is coordinated here for that the viewer
// may subscribe to.
func (b *Broker) groupTopics(r *http.Request, group string) ([]string, error) {
	v := b.httpViewer(r)
	if t := r.URL.Query().Get("topic"); t != "" {
		if err := v.authorize(security.Subscribe, t); err != nil {
			return nil, err
		}
		return []string{t}, nil
	}
	var out []string
	for _, t := range b.knownGroupTopics(group) {
		if v.authorize(security.Subscribe, t) == nil {
			out = append(out, t)
		}
	}
	return out, nil
}
