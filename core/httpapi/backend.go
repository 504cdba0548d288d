package httpapi

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
)

// Backend is what the HTTP side needs of the broker. core/broker
// implements it in httpbackend.go; handlers see nothing else of it.
type Backend interface {
	// Version is the broker's version.
	Version() string

	// Logins is the failed-login limiter the wire protocol uses too.
	Logins() *security.LoginLimiter
	// CheckPassword checks a basic-auth login from remote ("ip:port")
	// through the login limiter: the user, or retry > 0 when the limiter
	// refused it unchecked, or why for the log.
	CheckPassword(name, password, remote string) (u *conf.User, retry time.Duration, why string)
	// AuthFailed counts a failed HTTP login (throttled: refused by the
	// limiter without a password check).
	AuthFailed(throttled bool)

	// Readiness evaluates /readyz's checks.
	Readiness() []ReadyCheck

	// MetricsHandler serves every series (an admin's scrape).
	MetricsHandler() http.Handler
	// Metrics gathers every series, for the filtered scrapes.
	Metrics() prometheus.Gatherer

	// Topics lists the open topics v may see, without their partitions.
	Topics(v security.Viewer) []TopicInfo
	// Topic describes an open topic with its partitions (a 404
	// *RequestError when there is none).
	Topic(name string) (TopicInfo, error)
	// CreateTopic, DeleteTopic and AddPartitions change the topics for
	// a (audited). Refusals are *RequestError carrying the status and the
	// broker's text.
	CreateTopic(a Actor, t conf.Topic) error
	DeleteTopic(a Actor, name string, deleteData bool) error
	AddPartitions(a Actor, name string, n int) (old int, err error)

	// Groups lists the groups and topics known here that v may see.
	Groups(v security.Viewer) []*GroupEntry
	// GroupTopics are the topics group committed here or is coordinated
	// here for, sorted.
	GroupTopics(group string) []string
	// DescribeGroup reads group's committed offsets and lag on topics
	// (a 404 *RequestError for a topic not open here, 502 for the offset
	// store failing).
	DescribeGroup(ctx context.Context, group string, topics []string) ([]GroupTopic, error)
	// PlanReset checks a reset and returns what it changes; ApplyReset
	// writes it for a (to is req.To, or SkipTo). Refusals are
	// *RequestError.
	PlanReset(ctx context.Context, group string, req ResetRequest) (*ResetPlan, error)
	ApplyReset(ctx context.Context, a Actor, group, to string, plan *ResetPlan) error

	// Summary is the broker's counters, topics counted as v sees them.
	Summary(v security.Viewer) Summary
	// Cluster is the broker's place in its cluster.
	Cluster() ClusterInfo
	// Plugins lists the plugin processes.
	Plugins() []PluginInfo

	// Role is the broker's role for the dashboard's header ("master",
	// "slave 1", ...).
	Role() string
	// Traffic is each open topic's traffic counters; Lags each group's
	// lag on the open topics, for the dashboard's samples.
	Traffic() []TopicTraffic
	Lags() []GroupLag
	// Messages reads up to n records of partition p of topic from offset
	// (-1: the partition's min offset), bodies as hex dumps when asHex,
	// for the messages page. Refusals are *RequestError.
	Messages(topic string, p int, offset int64, n int, asHex bool) (MessagePage, error)
	// FindMessages looks q up in the partitions of topics (find.go),
	// through the key and id index, within a time budget.
	FindMessages(topics []string, q FindQuery) (FindResult, error)
	// Config is the configuration page's text.
	Config() ConfigText
	// ClusterPage, GroupsPage and GroupPage are those pages' data as v
	// may see them (ClusterPage's read of ZooKeeper unfiltered: the
	// console built from it here filters it). GroupPage describes group on topics (and, in cluster
	// mode without an explicit topic, the topics ZooKeeper has for it that
	// v may subscribe to); refusals are *RequestError.
	ClusterPage(v security.Viewer) ClusterPage
	GroupsPage(v security.Viewer) GroupsPage
	GroupPage(ctx context.Context, v security.Viewer, group string, topics []string, explicit bool) (GroupPage, error)

	// DataConn opens an in-process protocol connection for the data
	// plane (dataconn.go), authenticated as u (nil with [auth] off), for
	// the HTTP client at remote. The caller closes it.
	DataConn(u *conf.User, remote string) (net.Conn, error)
	// Partitions is the number of partitions of topic, 0 when it is not
	// open here.
	Partitions(topic string) int
	// CountMessages counts the messages of partition p of topic from
	// offset from (a record start) to its end; false when the count is
	// not known exactly (dlq.go).
	CountMessages(topic string, p int, from int64) (int64, bool)
	// AuditDLQReplay audits a replay of group's dead letters by a: count
	// sent to (to) "origin" or "retry" (dlq.go).
	AuditDLQReplay(a Actor, group, to string, count int)
	// DelayedPage is the pending delayed messages by due-time bucket
	// (DelayedBuckets) and the timer's counters (dlq.go).
	DelayedPage(ctx context.Context) DelayedPage
}
