package httpapi

import (
	"context"
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
}
