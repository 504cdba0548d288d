package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/message"
)

// The dashboard (docs/dashboard.md): server-rendered pages under /ui/,
// html/template and a little plain JavaScript, embedded. Pages read the
// same data as the admin API (admin.go) and act through the same
// functions; they are behind the same auth (needUser: a user to look, an
// admin for every POST). Actions are POST forms carrying a CSRF token
// (an HMAC of the user name under a key drawn at start), and a POST whose
// Origin, Referer or Sec-Fetch-Site names another site is refused.

//go:embed dashboard
var dashFS embed.FS

// dashPages are the templates, one per page, each with the layout.
var dashPages = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"bytes":     HumanBytes,
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

// Browsing limits: at most dashMaxMessages records a page (the broker
// shows bodies up to 4 KiB).
const (
	dashDefaultMessages = 20
	dashMaxMessages     = 100
)

// dashRoutes adds the dashboard's pages to the mux.
func (s *Server) dashRoutes(mux *http.ServeMux, user, admin func(pattern string, h http.HandlerFunc)) {
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusFound))
	static, _ := fs.Sub(dashFS, "dashboard/static")
	user("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)).ServeHTTP)
	user("GET /ui/{$}", s.uiCluster)
	user("GET /ui/topics", s.uiTopics)
	user("GET /ui/topics/{name}", s.uiTopic)
	user("GET /ui/topics/{name}/messages", s.uiMessages)
	user("GET /ui/topics/{name}/find", s.uiFind)
	user("GET /ui/groups", s.uiGroups)
	user("GET /ui/groups/{group}", s.uiGroup)
	user("GET /ui/dlq", s.uiDLQ)
	user("GET /ui/delayed", s.uiDelayed)
	// The configuration (every user's ACLs) and the plugins (names, pids,
	// errors) cannot be checked per topic or group: admin only, as stats
	// config and stats plugins are on the protocol port.
	admin("GET /ui/config", s.uiConfig)
	admin("GET /ui/plugins", s.uiPlugins)
	admin("POST /ui/topics", s.uiCSRF(s.uiCreateTopic))
	admin("POST /ui/topics/{name}/delete", s.uiCSRF(s.uiDeleteTopic))
	admin("POST /ui/topics/{name}/partitions", s.uiCSRF(s.uiAlterPartitions))
	admin("POST /ui/groups/{group}/reset", s.uiCSRF(s.uiReset))
	admin("POST /ui/groups/{group}/skip", s.uiCSRF(s.uiSkip))
	admin("POST /ui/dlq/{group}/replay", s.uiCSRF(s.uiDLQReplay))
	user("/ui/", func(w http.ResponseWriter, r *http.Request) {
		s.UIError(w, r, http.StatusNotFound, "no such page: "+ShownName(r.Method)+" "+ShownName(r.URL.Path))
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

// Render writes page name with data and code.
func (s *Server) Render(w http.ResponseWriter, r *http.Request, code int, name, title, nav string, data any, flash string) {
	p := dashPage{Title: title, Nav: nav, BrokerID: s.config().BrokerID, Version: s.be.Version(), Role: s.be.Role(), Flash: flash, Data: data, Admin: true}
	if u := User(r); u != nil {
		p.User, p.Admin = u.Name, u.Admin
	}
	p.CSRF = s.CSRFToken(p.User)
	var sb strings.Builder
	if err := dashPages[name].Execute(&sb, p); err != nil {
		s.logf("dashboard: render %s: %v", name, err)
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

// UIError answers a page saying what was wrong.
func (s *Server) UIError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	msg = CapMsg(msg)
	s.Render(w, r, code, "error", strconv.Itoa(code)+" "+http.StatusText(code), "", map[string]any{"Code": code, "Status": http.StatusText(code), "Message": msg}, "")
}

// CSRFToken is the token the forms of user's pages carry.
func (s *Server) CSRFToken(user string) string {
	d := &s.dash
	d.csrfOnce.Do(func() {
		d.csrfKey = make([]byte, 32)
		rand.Read(d.csrfKey)
	})
	m := hmac.New(sha256.New, d.csrfKey)
	m.Write([]byte("metaq-dashboard\x00" + user))
	return hex.EncodeToString(m.Sum(nil))
}

// uiCSRF refuses a POST from another site or without the user's token.
func (s *Server) uiCSRF(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			s.UIError(w, r, http.StatusBadRequest, "bad form: "+err.Error())
			return
		}
		if why := CrossSite(r); why != "" {
			s.UIError(w, r, http.StatusForbidden, "refused: "+why)
			return
		}
		user := ""
		if u := User(r); u != nil {
			user = u.Name
		}
		if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(s.CSRFToken(user))) {
			s.UIError(w, r, http.StatusForbidden, "refused: the form's CSRF token is missing or stale (reload the page and try again)")
			return
		}
		h(w, r)
	}
}

// ---- topics ----

type topicRow struct {
	TopicInfo
	Rate    topicRate
	HasRate bool
}

func (s *Server) uiTopics(w http.ResponseWriter, r *http.Request) {
	rates := s.topicRates()
	var rows []topicRow
	for _, t := range s.be.Topics(s.viewer(r)) {
		rt, ok := rates[t.Name]
		rows = append(rows, topicRow{t, rt, ok})
	}
	flash := ""
	q := r.URL.Query()
	if n := q.Get("created"); n != "" {
		flash = "Topic " + n + " created."
	} else if n := q.Get("deleted"); n != "" {
		flash = "Topic " + n + " deleted."
	}
	s.Render(w, r, http.StatusOK, "topics", "Topics", "topics", map[string]any{"Topics": rows, "Every": dashSampleEvery, "Throughput": s.rateTrendFor(s.viewer(r)),
		"MaxPartitions": conf.MaxPartitions, "Default": s.config().DefaultPartitions}, flash)
}

// uiTopicNamed returns the open topic of the path, if the user may do act
// to it (403 page otherwise, whether or not it exists), or answers 404.
func (s *Server) uiTopicNamed(w http.ResponseWriter, r *http.Request, act security.Action) (TopicInfo, bool) {
	name := r.PathValue("name")
	if err := s.viewer(r).Authorize(act, name); err != nil {
		s.UIError(w, r, http.StatusForbidden, err.Error())
		return TopicInfo{}, false
	}
	t, err := s.be.Topic(name)
	if err != nil {
		code, msg := statusOf(err)
		s.UIError(w, r, code, msg)
		return TopicInfo{}, false
	}
	return t, true
}

// uiTopic is a topic's page: its partitions' offsets, counts and rates,
// and the link to its messages. Like stats <topic> it needs the topic
// described (publish or subscribe).
func (s *Server) uiTopic(w http.ResponseWriter, r *http.Request) {
	t, ok := s.uiTopicNamed(w, r, security.Describe)
	if !ok {
		return
	}
	rt, ok := s.topicRates()[t.Name]
	flash := ""
	if a := r.URL.Query().Get("altered"); a == strconv.Itoa(t.Partitions) {
		flash = "Topic " + t.Name + " already has " + a + " partitions: nothing changed."
	} else if a != "" {
		flash = "Topic " + t.Name + " now has " + strconv.Itoa(t.Partitions) + " partitions (was " + a + "). Warning: " + KeyedOrderingWarning + "."
	}
	s.Render(w, r, http.StatusOK, "topic", "Topic "+t.Name, "topics", map[string]any{"Topic": t, "Rate": rt, "HasRate": ok, "Throughput": s.rateTrend(t.Name),
		"Warning": KeyedOrderingWarning, "MaxPartitions": conf.MaxPartitions,
		"Browse": s.viewer(r).Authorize(security.Subscribe, t.Name) == nil}, flash) // browse links only for a subscriber
}

// uiAlterPartitions gives a topic more partitions (Backend.AddPartitions, as
// POST /api/v1/topics/{name}/partitions): the form must carry the
// acknowledgement of the keyed-ordering warning.
func (s *Server) uiAlterPartitions(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	ps := strings.TrimSpace(r.PostForm.Get("partitions"))
	n, err := strconv.Atoi(ps)
	if err != nil || n < 1 || n > conf.MaxPartitions {
		s.UIError(w, r, http.StatusBadRequest, "partitions must be 1.."+strconv.Itoa(conf.MaxPartitions)+", got "+quoteName(ps))
		return
	}
	if r.PostForm.Get("ack_ordering") != "yes" {
		s.UIError(w, r, http.StatusBadRequest, "tick the box that acknowledges the warning to change the partition count of "+
			quoteName(name)+": "+KeyedOrderingWarning)
		return
	}
	old, err := s.be.AddPartitions(ActorOf(r), name, n)
	if err != nil {
		code, msg := statusOf(err)
		s.UIError(w, r, code, "cannot change the partitions of topic "+quoteName(name)+": "+msg)
		return
	}
	http.Redirect(w, r, "/ui/topics/"+url.PathEscape(name)+"?altered="+strconv.Itoa(old), http.StatusSeeOther)
}

// ShownMessage is one record on the messages page.
type ShownMessage struct {
	Offset, ID, Next int64
	Flag             int32
	Size             int
	Attribute        string
	HasAttribute     bool
	Body             string // text, or a hex dump
	Hex              bool   // Body is hex (asked for, or not UTF-8)
	Cut              int    // bytes not shown
	// The properties (docs/protocol.md), zero for a message without them.
	Key       *ShownBytes // nil: no key
	Timestamp string      // the create time sent (RFC 3339, ms), "" when none
	Tags      []string
	Headers   []ShownHeader
}

// ShownHeader is one header of a message on the messages page.
type ShownHeader struct {
	Key   string
	Value *ShownBytes // nil: a null value
}

// ShownBytes is a key or header value as the page shows it: text when it
// is printable UTF-8, else hex (Hex set, the page marks it); at most
// maxShownValue bytes of it, Cut the rest.
type ShownBytes struct {
	Text string
	Hex  bool
	Cut  int
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

// uiMessages browses a partition's records: it reads messages, so it
// needs subscribe, as get does.
func (s *Server) uiMessages(w http.ResponseWriter, r *http.Request) {
	t, ok := s.uiTopicNamed(w, r, security.Subscribe)
	if !ok {
		return
	}
	bq, err := parseBrowse(r.URL.Query(), t.Partitions)
	if err != nil {
		s.UIError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	page, err := s.be.Messages(t.Name, bq.Partition, bq.Offset, bq.Count, bq.Hex)
	if err != nil {
		code, msg := statusOf(err)
		s.UIError(w, r, code, msg)
		return
	}
	bq.Offset = page.Offset
	format := "text"
	if bq.Hex {
		format = "hex"
	}
	s.Render(w, r, http.StatusOK, "messages", "Messages of "+t.Name, "topics", map[string]any{
		"Topic": t.Name, "Partitions": t.Partitions, "Q": bq, "Format": format, "Messages": page.Messages, "Next": page.Next,
		"Min": page.Min, "Max": page.Max, "AtEnd": page.Next >= page.Max, "Stopped": page.Stopped,
	}, "")
}

// MessagePage is what the messages page shows of a partition.
type MessagePage struct {
	// Min and Max are the partition's offsets; Offset is where the page
	// starts (Min when none was asked for) and Next where the next does.
	Min, Max, Offset, Next int64
	Messages               []ShownMessage
	// Stopped says why the page ends early (a record that does not
	// parse), "" when it does not.
	Stopped string
}

func (s *Server) uiCreateTopic(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.PostForm.Get("name"))
	t := conf.Topic{Name: name}
	if ps := r.PostForm.Get("partitions"); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > conf.MaxPartitions {
			s.UIError(w, r, http.StatusBadRequest, "partitions must be 1.."+strconv.Itoa(conf.MaxPartitions)+", got "+quoteName(ps))
			return
		}
		t.NumPartitions = &n
	}
	if err := s.be.CreateTopic(ActorOf(r), t); err != nil {
		code, msg := statusOf(err)
		s.UIError(w, r, code, "cannot create topic "+quoteName(name)+": "+msg)
		return
	}
	http.Redirect(w, r, "/ui/topics?created="+url.QueryEscape(name), http.StatusSeeOther)
}

func (s *Server) uiDeleteTopic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if c := r.PostForm.Get("confirm"); c != name {
		s.UIError(w, r, http.StatusBadRequest, "type the topic's name ("+quoteName(name)+") to confirm the delete; got "+quoteName(c))
		return
	}
	if err := s.be.DeleteTopic(ActorOf(r), name, r.PostForm.Get("delete_data") == "true"); err != nil {
		code, msg := statusOf(err)
		s.UIError(w, r, code, "cannot delete topic "+quoteName(name)+": "+msg)
		return
	}
	http.Redirect(w, r, "/ui/topics?deleted="+url.QueryEscape(name), http.StatusSeeOther)
}

// resetForm parses the reset and skip forms into a request.
func resetForm(f url.Values) (ResetRequest, error) {
	req := ResetRequest{Topic: f.Get("topic"), To: f.Get("to")}
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
func planDigest(group string, p *ResetPlan) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s", group, p.Topic)
	for _, c := range p.Changes {
		fmt.Fprintf(h, "\x00%d:%d:%d", c.Partition, c.From, c.To)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

func (s *Server) resetErrPage(w http.ResponseWriter, r *http.Request, err error) {
	code, msg := statusOf(err)
	s.UIError(w, r, code, msg)
}

func (s *Server) uiReset(w http.ResponseWriter, r *http.Request) {
	group, ok := s.GroupName(w, r)
	if !ok {
		return
	}
	req, err := resetForm(r.PostForm)
	if err != nil {
		s.UIError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), OffsetCallTimeout)
	defer cancel()
	plan, err := s.be.PlanReset(ctx, group, req)
	if err != nil {
		s.resetErrPage(w, r, err)
		return
	}
	digest := planDigest(group, plan)
	code, msg := http.StatusOK, ""
	if r.PostForm.Get("action") == "apply" {
		if r.PostForm.Get("plan") == digest {
			if err := s.be.ApplyReset(ctx, ActorOf(r), group, req.To, plan); err != nil {
				s.resetErrPage(w, r, err)
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
	s.Render(w, r, code, "reset", "Reset offsets of "+group, "groups", map[string]any{
		"Group": group, "Topic": plan.Topic, "Partition": part, "To": req.To, "Offset": off,
		"Changes": plan.Changes, "Plan": digest, "Note": ResetNote, "Warn": msg,
	}, "")
}

func (s *Server) uiSkip(w http.ResponseWriter, r *http.Request) {
	group, ok := s.GroupName(w, r)
	if !ok {
		return
	}
	req, err := resetForm(r.PostForm)
	if err != nil {
		s.UIError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if req.Partition == nil {
		s.UIError(w, r, http.StatusBadRequest, "partition is required (skip moves one partition to its end)")
		return
	}
	req.To, req.Offset = "latest", nil
	ctx, cancel := context.WithTimeout(r.Context(), OffsetCallTimeout)
	defer cancel()
	plan, err := s.be.PlanReset(ctx, group, req)
	if err == nil {
		err = s.be.ApplyReset(ctx, ActorOf(r), group, SkipTo, plan)
	}
	if err != nil {
		s.resetErrPage(w, r, err)
		return
	}
	http.Redirect(w, r, "/ui/groups/"+url.PathEscape(group)+"?skipped="+url.QueryEscape(plan.Topic+" partition "+strconv.Itoa(*req.Partition)), http.StatusSeeOther)
}

// ---- config, plugins ----

func (s *Server) uiConfig(w http.ResponseWriter, r *http.Request) {
	c := s.be.Config()
	s.Render(w, r, http.StatusOK, "config", "Config", "config", map[string]any{"Config": c.Text,
		"Path": c.Path, "Checksum": c.Checksum}, "")
}

// ConfigText is the configuration page's: server.toml redacted (no
// secrets), its path and checksum.
type ConfigText struct {
	Text, Path string
	Checksum   uint32
}

func (s *Server) uiPlugins(w http.ResponseWriter, r *http.Request) {
	s.Render(w, r, http.StatusOK, "plugins", "Plugins", "plugins", map[string]any{"Plugins": s.be.Plugins()}, "")
}

// GroupName checks the path's group: 400 for a malformed name, 403
// without the group's rights (a page saying so; ok false).
func (s *Server) GroupName(w http.ResponseWriter, r *http.Request) (string, bool) {
	group := r.PathValue("group")
	if err := message.ValidateGroup(group); err != nil {
		s.UIError(w, r, http.StatusBadRequest, "group "+quoteName(group)+": "+err.Error())
		return "", false
	}
	if err := s.viewer(r).Authorize(security.UseGroup, group); err != nil {
		s.UIError(w, r, http.StatusForbidden, err.Error())
		return "", false
	}
	return group, true
}

// ---- helpers ----

// HumanBytes renders n bytes for a person, as the dashboard shows them
// (1 KiB = 1024 B).
func HumanBytes(n int64) string {
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
