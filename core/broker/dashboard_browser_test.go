package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/metaq-go/metaq/core/httpapi"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// screenshotsEnv names a directory for TestDashboardBrowser's screenshots
// (docs/dashboard/); unset, none are written.
const screenshotsEnv = "METAQ_SCREENSHOTS"

// dashBroker starts broker id 0 (slave < 0: the master, else that slave)
// in cluster mode (no [auth]: replication does not authenticate yet,
// docs/replication.md; TestDashboardAuth covers auth), HTTP on a free port and topics orders (3
// partitions) and payments (2).
func dashBroker(t *testing.T, zkAddr, root string, slave int) *Broker {
	t.Helper()
	cfg := testConfig()
	cfg.Port = 0
	cfg.SlaveID = slave
	cfg.DataDir = t.TempDir()
	cfg.NumPartitions = 2
	cfg.Topics = []conf.Topic{{Name: "orders", NumPartitions: ptr(3)}, {Name: "payments"}}
	cfg.ZooKeeper.Connect = zkAddr
	cfg.ZooKeeper.Root = root
	cfg.ZooKeeper.SessionTimeout = 4000
	cfg.ZooKeeper.ConnectionTimeout = 5000
	cfg.SlaveMaxDelay = 40
	b, err := New(cfg, Options{Logf: func(string, ...any) {}})
	require.NoError(t, err)
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Close() })
	require.NotEmpty(t, b.HTTPAddr())
	return b
}

func ptr[T any](v T) *T { return &v }

// consume reads partition p of topic from offset as a consumer does (a
// get on the wire), takes n records, commits the offset after them for
// group, and returns that offset.
func consume(t *testing.T, c *authClient, group, topic string, p int32, from int64, n int) int64 {
	t.Helper()
	code, body := c.call(func(d []byte, op int32) []byte { return protocol.AppendGet(d, topic, group, p, from, 1<<20, op) })
	require.Equal(t, protocol.StatusOK, code, body)
	it := message.NewIterator([]byte(body), from, 0)
	next := from
	for i := 0; i < n && it.Next(); i++ {
		next = it.NextOffset()
	}
	require.NoError(t, it.Err())
	code, body = c.call(func(d []byte, op int32) []byte {
		return protocol.AppendCommit(d, group, []protocol.OffsetEntry{{Topic: topic, Partition: p, Offset: next, MsgID: -1}}, op)
	})
	require.Equal(t, protocol.StatusOK, code, body)
	return next
}

// TestDashboardBrowser opens every dashboard page in a real browser
// (Debian's chromium, headless, driven by chromedp) against a master and
// its slave in ZooKeeper holding data, and checks what a person sees:
// the brokers and their roles, the topic names, the messages, lag that
// changes after a consume, and the effect of each action (create and
// delete a topic, reset offsets after a dry run, skip a partition). With
// METAQ_SCREENSHOTS=dir it writes a PNG of each page there.
func TestDashboardBrowser(t *testing.T) {
	t.Parallel()
	chrome := testsvc.Chromium(t)
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/dash-%d", time.Now().UnixNano())
	m := dashBroker(t, zkAddr, root, -1)
	s := dashBroker(t, zkAddr, root, 1)
	shots := os.Getenv(screenshotsEnv)

	c := dialAuth(t, m.Addr(), nil)
	m.web.srv.Sample(time.Now().Add(-15 * time.Second)) // so that the puts below have rates
	for p := range int32(3) {
		for i := range 6 {
			mm := message.Message{Body: []byte(fmt.Sprintf(`order-%d-%d {"amount": %d}`, p, i, 10*i+1))}
			if i%2 == 0 {
				mm.Attribute, mm.HasAttribute = "type=order;region=eu", true
			}
			if p == 1 && i == 1 { // a key, create time, tags and headers (issue 26)
				mm.Key, mm.Timestamp, mm.Tags = []byte("customer-7"), time.UnixMilli(1_765_000_000_123), []string{"vip"}
				mm.Headers = message.Headers{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")},
					{Key: "sig", Value: []byte{0xde, 0xad, 0xbe, 0xef}}}
			}
			code, msg := c.call(func(d []byte, op int32) []byte {
				return protocol.AppendPut(d, "orders", p, mm.Flag(), -1, op, mm.AppendData(nil))
			})
			require.Equal(t, 200, code, msg)
		}
	}
	code, msg := c.call(func(d []byte, op int32) []byte {
		return protocol.AppendPut(d, "payments", 0, 0, -1, op, []byte{0, 1, 2, 0xfe, 0xff, 'p', 'a', 'y'})
	})
	require.Equal(t, 200, code, msg)
	l0 := m.topics.Get("orders").Parts[0]
	require.Eventually(t, func() bool {
		return l0.MessageCount() == 6 && s.topics.Get("orders").Parts[0].MaxOffset() == l0.MaxOffset()
	},
		15*time.Second, 10*time.Millisecond, "the slave copies orders")
	max0 := l0.MaxOffset()
	m.web.srv.Sample(time.Now())
	// The group consumes two messages of partition 0.
	at := consume(t, c, "billing", "orders", 0, 0, 2)
	m.web.srv.Sample(time.Now().Add(-45 * time.Minute)) // a trend to show: samples as if taken earlier

	// chromedp talks to the browser over a pipe (no debugging port);
	// the pages it loads are the broker's, on 127.0.0.1.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelC := chromedp.NewContext(actx)
	defer cancelC()
	require.NoError(t, chromedp.Do(bctx)) // starts the browser (no timeout on this first call)
	ctx, cancelT := context.WithTimeout(bctx, 90*time.Second)
	defer cancelT()
	// Confirmations (delete, skip) are accepted, as a person would.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()

	base := "http://" + m.HTTPAddr()
	run := func(actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		require.NoError(t, chromedp.Do(ctx, actions...))
	}
	css := func(sel string) chromedp.CSS { return chromedp.CSS(sel) }
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(css(sel)))
		require.NoError(t, err, sel)
		return s
	}
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(shots, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644))
	}
	open := func(path, sel string) {
		t.Helper()
		run(chromedp.Navigate(base+path), chromedp.WaitVisible(css(sel)))
	}
	// submit clicks sel, which posts a form answered by a redirect to a
	// URL containing want, and waits for that page's #flash: waiting for
	// #flash alone could match the flash of the page before the new one
	// loaded (a skip after a reset).
	submit := func(sel, want string) {
		t.Helper()
		run(chromedp.Click(css(sel)))
		require.Eventually(t, func() bool {
			loc, err := chromedp.Run(ctx, chromedp.Location())
			return err == nil && strings.Contains(loc, want)
		}, 15*time.Second, 20*time.Millisecond, "the page after %s", sel)
		run(chromedp.WaitVisible(css("#flash")))
	}

	// Cluster: broker 0's master and its slave 1, both registered.
	require.Eventually(t, func() bool {
		if chromedp.Do(ctx, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(css("#brokers"))) != nil {
			return false
		}
		s, err := chromedp.Run(ctx, chromedp.Text(css("#brokers")))
		return err == nil && strings.Contains(s, "meta://") && strings.Contains(s, "slave 1: meta://")
	}, 15*time.Second, 200*time.Millisecond, "the cluster page lists the master and its slave")
	require.Contains(t, text("#role"), "master")
	require.Contains(t, text("#ready"), "zookeeper")
	shot("cluster")
	// The slave's own page says what it copies from.
	run(chromedp.Navigate("http://"+s.HTTPAddr()+"/ui/"), chromedp.WaitVisible(css("#slave")))
	require.Contains(t, text("#role"), "slave 1")
	require.Contains(t, text("#slave"), "slave_master\t"+m.Addr())
	shot("cluster-slave")

	// Topics: the names, partitions and sizes.
	open("/ui/topics", "#topics")
	tt := text("#topics")
	require.Contains(t, tt, "orders\t3\t18")
	require.Contains(t, tt, "payments\t2\t1")
	require.NotContains(t, tt, "–", "rates are shown")
	shot("topics")

	// One topic, then its messages: attribute and body as text, then hex.
	open("/ui/topics/orders", "#partitions")
	require.Contains(t, text("#partitions"), "0\t0\t"+strconv.FormatInt(max0, 10)+"\t6")
	shot("topic")
	// The topic page's search box: the message with key customer-7,
	// found through the key index, shown as the messages page shows it.
	run(chromedp.SendKeys(css("#find-q"), "customer-7"), chromedp.Click(css("#find-submit")), chromedp.WaitVisible(css("#found")))
	ft := text("#found")
	for _, w := range []string{"customer-7", "order-1-1", "vip", "traceparent", "hex deadbeef"} {
		require.Contains(t, ft, w)
	}
	require.NotContains(t, ft, "order-1-0")
	shot("find")
	open("/ui/topics/orders/find?by=key&q=nobody", "#found-none")
	open("/ui/topics/orders/find?by=id&q=x", "#error")
	require.Contains(t, text("#error"), "id must be a msgId")
	open("/ui/topics/orders/messages?partition=1&offset=0&count=4", "#messages")
	mt := text("#messages")
	require.Contains(t, mt, `order-1-0 {"amount": 1}`)
	require.Contains(t, mt, "type=order;region=eu")
	require.Contains(t, mt, `order-1-3 {"amount": 31}`)
	for _, w := range []string{"customer-7", "2025-12-06T05:46:40.123Z", "vip", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "hex deadbeef"} {
		require.Contains(t, mt, w)
	}
	require.NotContains(t, mt, "order-1-4")
	shot("messages")
	run(chromedp.Click(css("#next")), chromedp.WaitVisible(css("#messages")))
	require.Contains(t, text("#messages"), "order-1-4")
	open("/ui/topics/payments/messages?partition=0&format=hex", "#messages")
	require.Contains(t, text("#messages"), "00 01 02 fe ff 70 61 79")
	// A bad offset: a clear page, not a record.
	open("/ui/topics/orders/messages?partition=0&offset=3", "#error")
	require.Contains(t, text("#error"), "not the start of a valid record")

	// Groups: the lag before and after the group consumes more.
	lag1 := max0 - at
	open("/ui/groups", "#groups")
	require.Contains(t, text("#groups"), "billing\torders")
	open("/ui/groups/billing", ".lag-total")
	require.Equal(t, strconv.FormatInt(lag1, 10), text(".lag-total"))
	at = consume(t, c, "billing", "orders", 0, at, 3)
	m.web.srv.Sample(time.Now().Add(-20 * time.Minute))
	lag2 := max0 - at
	require.Less(t, lag2, lag1)
	open("/ui/groups/billing", ".lag-total")
	require.Equal(t, strconv.FormatInt(lag2, 10), text(".lag-total"), "the lag changed after the consume")
	require.Contains(t, text(".gparts"), strconv.FormatInt(at, 10))
	m.web.srv.Sample(time.Now())
	open("/ui/groups/billing", "svg.chart")
	shot("group")

	// Reset every partition after a dry run: to earliest; the dry run
	// writes nothing.
	run(chromedp.SetValue(css(`form.reset select[name="to"]`), "earliest"),
		chromedp.Click(css("button.dryrun")), chromedp.WaitVisible(css("#changes")))
	require.Contains(t, text("#changes"), "0\t"+strconv.FormatInt(at, 10)+"\t0")
	require.Equal(t, at, committedOf(t, m, "billing", "orders", 0), "a dry run changes nothing")
	shot("reset")
	submit("#apply-reset", "?reset=")
	require.Contains(t, text("#flash"), "Offsets of topic orders reset")
	var sum int64
	for _, l := range m.topics.Get("orders").Parts {
		sum += l.MaxOffset()
	}
	require.Equal(t, strconv.FormatInt(sum, 10), text(".lag-total"))
	require.Equal(t, int64(0), committedOf(t, m, "billing", "orders", 0))

	// Skip partition 0 to its end: its lag goes to 0.
	submit("button.skip", "?skipped=")
	require.Contains(t, text("#flash"), "Skipped orders partition 0")
	require.Equal(t, strconv.FormatInt(sum-max0, 10), text(".lag-total"))
	require.Equal(t, max0, committedOf(t, m, "billing", "orders", 0))

	// Create a topic through the page, then see it listed.
	open("/ui/topics", "#create-topic")
	run(chromedp.SendKeys(css("#new-topic-name"), "made-in-browser"),
		chromedp.SendKeys(css("#new-topic-partitions"), "4"))
	submit("#create-topic-submit", "?created=")
	require.Contains(t, text("#flash"), "Topic made-in-browser created")
	require.Contains(t, text("#topics"), "made-in-browser\t4\t0")
	require.Len(t, m.topics.Get("made-in-browser").Parts, 4)
	// Creating it again: a clear error page.
	open("/ui/topics", "#create-topic")
	run(chromedp.SendKeys(css("#new-topic-name"), "made-in-browser"),
		chromedp.Click(css("#create-topic-submit")), chromedp.WaitVisible(css("#error")))
	require.Contains(t, text("#error"), "exists")

	// Delete it from its page.
	open("/ui/topics/made-in-browser", "#delete-topic")
	run(chromedp.SendKeys(css(`#delete-topic input[name="confirm"]`), "made-in-browser"))
	submit("#delete-topic button", "?deleted=")
	require.Contains(t, text("#flash"), "Topic made-in-browser deleted")
	require.NotContains(t, text("#topics"), "made-in-browser")
	m.mu.RLock()
	require.Nil(t, m.topics.Get("made-in-browser"))
	m.mu.RUnlock()

	// Config (secrets redacted) and plugins.
	open("/ui/config", "#config")
	ct := text("#config")
	require.Contains(t, ct, `connect = "<redacted>"`) // it may carry credentials
	require.NotContains(t, ct, zkAddr)
	shot("config")
	open("/ui/plugins", "#plugins")
	require.Contains(t, text("#plugins"), "no plugins configured")
	shot("plugins")

	// CSRF (issue 22, finding 2) without [auth]: a page of another origin
	// can reach the broker with no credentials at all; the Origin and
	// Sec-Fetch-Site checks are what refuses its forms and fetches.
	foreignCSRF(t, m, &browserTab{ctx: ctx}, base, "billing", "orders", []int64{max0, 0, 0})
}

// browserTab is a tab of its own browser context (its own HTTP auth cache)
// that answers basic-auth challenges as user, through the Fetch domain:
// the first challenge is cancelled (the page then shows the 401), every
// later one gets user's credentials. JavaScript confirmations are
// accepted.
type browserTab struct {
	ctx    context.Context
	mu     sync.Mutex
	asked  []*fetch.AuthChallenge
	cancel bool // cancel the next challenge
}

func (tb *browserTab) challenges() []*fetch.AuthChallenge {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return slices.Clone(tb.asked)
}

func newBrowserTab(t *testing.T, bctx context.Context, user, password string) *browserTab {
	t.Helper()
	tctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(tctx)) // opens the tab
	ctx, cancelT := context.WithTimeout(tctx, 90*time.Second)
	t.Cleanup(cancelT)
	tb := &browserTab{ctx: ctx, cancel: true}
	auths := chromedp.Events(ctx, fetch.AuthRequired)
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range auths {
			if err != nil {
				return
			}
			tb.mu.Lock()
			tb.asked = append(tb.asked, ev.AuthChallenge)
			resp := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: user, Password: password}
			if tb.cancel {
				resp, tb.cancel = &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}, false
			}
			tb.mu.Unlock()
			chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID, AuthChallengeResponse: resp})
		}
	}()
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	_, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: ptr(true)})
	require.NoError(t, err)
	return tb
}

func (tb *browserTab) run(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	require.NoError(t, chromedp.Do(tb.ctx, actions...))
}

// waitText is the text of sel once it holds want, or after 5 s: a click
// on a page already showing sel may find the old page's before the
// answer loads.
func (tb *browserTab) waitText(t *testing.T, sel, want string) string {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if s := tb.text(t, sel); strings.Contains(s, want) || time.Now().After(end) {
			return s
		}
	}
}

// text is the text of sel. A read can race with the browser replacing
// the document's nodes just after a form's answer loaded ("No node with
// given id found"): it is retried, for at most 5 s.
func (tb *browserTab) text(t *testing.T, sel string) string {
	t.Helper()
	var s string
	var err error
	for end := time.Now().Add(5 * time.Second); ; {
		if err = chromedp.Do(tb.ctx, chromedp.WaitVisible(chromedp.CSS(sel))); err == nil {
			s, err = chromedp.Run(tb.ctx, chromedp.Text(chromedp.CSS(sel)))
		}
		if err == nil || time.Now().After(end) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err, sel)
	return s
}

func (tb *browserTab) open(t *testing.T, url, sel string) {
	t.Helper()
	tb.run(t, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(sel)))
}

// TestDashboardBrowserAuth drives the dashboard of a broker with [auth]
// in a real browser: the pages ask for HTTP basic auth; alice (not an
// admin) sees the pages and every action form, and each action she
// submits (create, alter and delete a topic, a reset's dry run, a skip)
// is refused with a page that says so and changes nothing; root (an
// admin) does each of them, including changing the partition count.
func TestDashboardBrowserAuth(t *testing.T) {
	t.Parallel()
	chrome := testsvc.Chromium(t)
	// alice may publish and subscribe to t here: the dashboard shows a
	// user only the topics they may use (TestDashboardAuthz).
	users := slices.Clone(hashedUsers(t))
	for i := range users {
		if users[i].Name == "alice" {
			users[i].Publish = append(slices.Clone(users[i].Publish), "t")
			users[i].Subscribe = append(slices.Clone(users[i].Subscribe), "t")
		}
	}
	b := startBroker(t, 0, func(c *conf.Config) {
		c.Auth = conf.Auth{Enabled: true, FailureDelay: 10, Users: users}
	})
	c := dialAuth(t, b.Addr(), nil)
	code, msg := c.login("root", "root-pw")
	require.Equal(t, 200, code, msg)
	for p := range int32(2) {
		for i := range 4 {
			code, msg := c.call(func(d []byte, op int32) []byte {
				return protocol.AppendPut(d, "t", p, 0, -1, op, []byte(fmt.Sprintf("msg-%d-%d", p, i)))
			})
			require.Equal(t, 200, code, msg)
		}
	}
	require.Eventually(t, func() bool { return b.topics.Get("t").Parts[1].MessageCount() == 4 }, 10*time.Second, 5*time.Millisecond)
	at := consume(t, c, "billing-web", "t", 0, 0, 1)
	max0, max1 := b.topics.Get("t").Parts[0].MaxOffset(), b.topics.Get("t").Parts[1].MaxOffset()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	require.NoError(t, chromedp.Do(bctx)) // starts the browser
	base := "http://" + b.HTTPAddr()

	// alice: asked for credentials; without them, a 401 page.
	alice := newBrowserTab(t, bctx, "alice", "alice-pw")
	alice.open(t, base+"/ui/topics", "#error")
	require.Contains(t, alice.text(t, "#error"), "authentication required")
	alice.open(t, base+"/ui/topics", "#topics")
	asked := alice.challenges()
	require.GreaterOrEqual(t, len(asked), 2)
	require.Equal(t, "basic", strings.ToLower(asked[0].Scheme))
	require.Equal(t, "metaq", asked[0].Realm)
	require.Contains(t, alice.text(t, "header .who"), "alice")
	require.Contains(t, alice.text(t, "#topics"), "t\t2\t8")
	refused := func(action string) {
		t.Helper()
		require.Contains(t, alice.text(t, "#error"), `user "alice" may not POST `+action+` (admin only)`)
	}
	// Create: the form is there, with a note; submitting is refused.
	require.Contains(t, alice.text(t, ".adminonly"), "Only an admin can do this")
	alice.run(t, chromedp.SendKeys(chromedp.CSS("#new-topic-name"), "by-alice"),
		chromedp.Click(chromedp.CSS("#create-topic-submit")), chromedp.WaitVisible(chromedp.CSS("#error")))
	refused("/ui/topics")
	// Alter and delete, from the topic's page.
	alice.open(t, base+"/ui/topics/t", "#alter-topic")
	require.Contains(t, alice.text(t, "#ordering-warning"), httpapi.KeyedOrderingWarning)
	alice.run(t, chromedp.SetValue(chromedp.CSS("#alter-partitions"), "4"), chromedp.Click(chromedp.CSS("#alter-ack")),
		chromedp.Click(chromedp.CSS("#alter-submit")), chromedp.WaitVisible(chromedp.CSS("#error")))
	refused("/ui/topics/t/partitions")
	alice.open(t, base+"/ui/topics/t", "#delete-topic")
	alice.run(t, chromedp.SendKeys(chromedp.CSS(`#delete-topic input[name="confirm"]`), "t"),
		chromedp.Click(chromedp.CSS("#delete-topic button")), chromedp.WaitVisible(chromedp.CSS("#error")))
	refused("/ui/topics/t/delete")
	// The group (alice has billing-*): its lag, then a refused reset and skip.
	alice.open(t, base+"/ui/groups/billing-web", ".lag-total")
	require.Equal(t, strconv.FormatInt(max0-at, 10), alice.text(t, ".lag-total"))
	alice.run(t, chromedp.SetValue(chromedp.CSS(`form.reset select[name="to"]`), "earliest"),
		chromedp.Click(chromedp.CSS("button.dryrun")), chromedp.WaitVisible(chromedp.CSS("#error")))
	refused("/ui/groups/billing-web/reset")
	alice.open(t, base+"/ui/groups/billing-web", "button.skip")
	alice.run(t, chromedp.Click(chromedp.CSS("button.skip")), chromedp.WaitVisible(chromedp.CSS("#error")))
	refused("/ui/groups/billing-web/skip")
	// Nothing changed.
	b.mu.RLock()
	require.Nil(t, b.topics.Get("by-alice"))
	require.Len(t, b.topics.Get("t").Parts, 2)
	b.mu.RUnlock()
	require.Equal(t, at, committedOf(t, b, "billing-web", "t", 0))

	// root, an admin: every action works.
	root := newBrowserTab(t, bctx, "root", "root-pw")
	root.open(t, base+"/ui/topics/t", "#error") // the first challenge is cancelled
	root.open(t, base+"/ui/topics/t", "#alter-topic")
	require.Contains(t, root.text(t, "header .who"), "root (admin)")
	root.run(t, chromedp.SetValue(chromedp.CSS("#alter-partitions"), "4"), chromedp.Click(chromedp.CSS("#alter-ack")),
		chromedp.Click(chromedp.CSS("#alter-submit")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, root.text(t, "#flash"), "Topic t now has 4 partitions (was 2). Warning: "+httpapi.KeyedOrderingWarning)
	require.Contains(t, root.text(t, "#partitions"), "3\t0\t0\t0")
	b.mu.RLock()
	require.Len(t, b.topics.Get("t").Parts, 4)
	b.mu.RUnlock()
	req, err := http.NewRequest("GET", base+"/api/v1/topics/t", nil)
	require.NoError(t, err)
	req.SetBasicAuth("alice", "alice-pw")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var tj httpapi.TopicInfo
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&tj))
	resp.Body.Close()
	require.Equal(t, 4, tj.Partitions, "the API sees the new count")
	// The partitions' count on the wire (as a producer reads it).
	code, msg = c.stats("topics")
	require.Equal(t, 200, code, msg)
	require.Contains(t, msg, "t partitions 4 ")

	root.open(t, base+"/ui/topics", "#create-topic")
	root.run(t, chromedp.SendKeys(chromedp.CSS("#new-topic-name"), "by-root"),
		chromedp.Click(chromedp.CSS("#create-topic-submit")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, root.text(t, "#flash"), "Topic by-root created")
	root.open(t, base+"/ui/groups/billing-web", "button.dryrun")
	root.run(t, chromedp.SetValue(chromedp.CSS(`form.reset select[name="to"]`), "latest"),
		chromedp.Click(chromedp.CSS("button.dryrun")), chromedp.WaitVisible(chromedp.CSS("#changes")))
	require.Equal(t, at, committedOf(t, b, "billing-web", "t", 0), "a dry run changes nothing")
	root.run(t, chromedp.Click(chromedp.CSS("#apply-reset")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, root.text(t, "#flash"), "Offsets of topic t reset")
	require.Equal(t, max0, committedOf(t, b, "billing-web", "t", 0))
	require.Equal(t, max1, committedOf(t, b, "billing-web", "t", 1))
	root.run(t, chromedp.Click(chromedp.CSS("button.skip")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	// The reset's page shows a #flash too: wait for the skip's.
	require.Contains(t, root.waitText(t, "#flash", "Skipped"), "Skipped t partition 0")
	root.open(t, base+"/ui/topics/by-root", "#delete-topic")
	root.run(t, chromedp.SendKeys(chromedp.CSS(`#delete-topic input[name="confirm"]`), "by-root"),
		chromedp.Click(chromedp.CSS("#delete-topic button")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, root.text(t, "#flash"), "Topic by-root deleted")

	// CSRF (issue 22, finding 2): root is signed in; a page of another
	// origin (another port of 127.0.0.1) posts text/plain forms whose
	// bodies parse as JSON with a duplicate key, and fetch()es the API
	// with and without JSON. Every request is refused; nothing changes.
	foreignCSRF(t, b, root, base, "billing-web", "t", []int64{max0, max1})
}

// csrfPage is a page of another site that drives the API of the broker at
// BASE: two text/plain forms (the reproducer: the form's one field
// makes {"name":"=","name":"csrf-form"}) and attack(), which fetch()es.
const csrfPage = `<!doctype html><html><head><title>foreign</title></head><body>
<form id="f1" method="post" enctype="text/plain" action="BASE/api/v1/topics"><input name='{"name":"' value='","name":"csrf-form"}'><button>go</button></form>
<form id="f2" method="post" enctype="text/plain" action="BASE/api/v1/groups/GROUP/offsets"><input name='{"to":"x' value='","to":"earliest","topic":"TOPIC"}'><button>go</button></form>
<script>
async function attack() {
  const out = [];
  for (const [path, body] of [["/api/v1/topics", '{"name":"csrf-fetch"}'], ["/api/v1/groups/GROUP/offsets", '{"topic":"TOPIC","to":"earliest"}']]) {
    try {
      await fetch("BASE" + path, {method: "POST", mode: "no-cors", credentials: "include", headers: {"Content-Type": "text/plain"}, body});
      out.push("sent");
    } catch (e) { out.push("error " + e); }
  }
  try {
    const r = await fetch("BASE/api/v1/topics", {method: "POST", credentials: "include", headers: {"Content-Type": "application/json"}, body: '{"name":"csrf-cors"}'});
    out.push("status " + r.status);
  } catch (e) { out.push("blocked"); }
  return out.join(",");
}
</script></body></html>`

// foreignCSRF serves csrfPage on another port and runs it in tab (signed
// in to the broker at base, if it has [auth]): both forms and the fetches are
// refused by the broker, no topic is created, and group's committed
// offsets of topic stay want (by partition).
func foreignCSRF(t *testing.T, b *Broker, tab *browserTab, base, group, topic string, want []int64) {
	t.Helper()
	foreign := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, strings.NewReplacer("BASE", base, "GROUP", group, "TOPIC", topic).Replace(csrfPage))
	}))
	t.Cleanup(foreign.Close)
	require.NotEqual(t, base, foreign.URL)
	var mu sync.Mutex
	statuses := map[string][]int64{} // API responses the browser got, by path
	resps := chromedp.Events(tab.ctx, network.ResponseReceived)
	go func() {
		for ev, err := range resps {
			if err != nil {
				return
			}
			if p, ok := strings.CutPrefix(ev.Response.URL, base); ok && strings.HasPrefix(p, "/api/") {
				mu.Lock()
				statuses[p] = append(statuses[p], ev.Response.Status)
				mu.Unlock()
			}
		}
	}()
	// The forms: each submit navigates to the broker's refusal.
	for _, form := range []string{"f1", "f2"} {
		tab.open(t, foreign.URL+"/", "#"+form)
		tab.run(t, chromedp.Evaluate[chromedp.Void](`document.getElementById("`+form+`").submit()`))
		var shown string
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			v, err := chromedp.Run(tab.ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText`))
			if err == nil {
				shown = v
			}
			if strings.HasPrefix(shown, base) && strings.Contains(shown, `"status"`) {
				break
			}
		}
		require.True(t, strings.HasPrefix(shown, base), "form %s did not reach the broker: %s", form, shown)
		require.Contains(t, shown, `"status": 403`, "form %s", form)
		require.Contains(t, shown, "refused: cross-site request", "form %s", form)
	}
	// fetch(): no-cors text/plain bodies are sent and refused; a JSON
	// body needs a preflight, which the broker refuses too.
	tab.open(t, foreign.URL+"/", "#f1")
	out, err := chromedp.Run(tab.ctx, chromedp.Evaluate[string](`attack()`, chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Equal(t, "sent,sent,blocked", out)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(statuses["/api/v1/topics"]) >= 2 && len(statuses["/api/v1/groups/"+group+"/offsets"]) >= 2
	}, 10*time.Second, 20*time.Millisecond, "the browser sent the forms and the fetches")
	mu.Lock()
	for p, codes := range statuses {
		for _, c := range codes {
			require.Equal(t, int64(403), c, "%s: %v", p, statuses)
		}
	}
	mu.Unlock()
	b.mu.RLock()
	for _, n := range []string{"csrf-form", "csrf-fetch", "csrf-cors", "="} {
		require.Nil(t, b.topics.Get(n), n)
	}
	b.mu.RUnlock()
	for p, off := range want {
		require.Equal(t, off, committedOf(t, b, group, topic, p), "offsets of partition %d unchanged", p)
	}
}
