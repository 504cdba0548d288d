package security

import (
	"errors"
	"strconv"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Action is what a request does to a resource.
type Action int

// The actions. Publish, Subscribe and Describe name a topic, UseGroup a
// consumer group; Admin's name is the operation in words ("run stats
// config", "GET /ui/config").
const (
	// Publish is putting messages to a topic (conf.User.Publish).
	Publish Action = iota + 1
	// Subscribe is reading a topic's messages and its consumers'
	// positions: get, offset, message browsing, group lag and offsets,
	// message counts from an offset (conf.User.Subscribe).
	Subscribe
	// UseGroup is committing, fetching, joining and looking at a
	// consumer group (conf.User.Groups).
	UseGroup
	// Describe is seeing a topic at all: that it exists, its partitions,
	// offsets, size and message count. Publish or Subscribe grants it.
	Describe
	// Admin is an operation only an admin user may run.
	Admin
)

// String names the action as the denial text does.
func (a Action) String() string {
	switch a {
	case Publish:
		return "publish"
	case Subscribe:
		return "subscribe"
	case UseGroup:
		return "use group"
	case Describe:
		return "describe"
	case Admin:
		return "admin"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// ErrUnauthenticated is Authorize's error when auth is on and there is no
// user. Each door answers it with its own 401 text (how to log in differs
// between the protocol port and HTTP).
var ErrUnauthenticated = errors.New("authentication required")

// Denied is Authorize's refusal: User may not do Action to Name. Every
// door answers it with 403 and Error()'s text, e.g.
//
//	user "alice" may not subscribe to topic "secret"
//
// The user name is quoted whole (it is a configured name); topic and
// group names come from the client and are quoted with at most 64 bytes
// shown (protocol.Printable), as the protocol port has always done.
type Denied struct {
	User   string
	Action Action
	// Name is the topic or group, or for Admin the operation.
	Name string
	// Note, for Admin, is added inside the parenthesis after "admin
	// only" (": a sync master's replication_user").
	Note string
}

func (d *Denied) Error() string {
	s := "user " + strconv.Quote(d.User) + " may not "
	n := protocol.Printable([]byte(d.Name))
	switch d.Action {
	case Publish:
		return s + "publish to topic " + n
	case Subscribe:
		return s + "subscribe to topic " + n
	case UseGroup:
		return s + "use group " + n
	case Describe:
		return s + "see topic " + n + " (it needs publish or subscribe)"
	case Admin:
		return s + d.Name + " (admin only" + d.Note + ")"
	}
	return s + d.Action.String() + " " + n
}

// Authorize decides whether user u may do act to name. With auth off
// (authOn false) everything is allowed. Otherwise a nil user is
// ErrUnauthenticated, a right the user lacks is a *Denied, and an admin
// may do everything.
func Authorize(authOn bool, u *conf.User, act Action, name string) error {
	if !authOn {
		return nil
	}
	if u == nil {
		return ErrUnauthenticated
	}
	if u.Admin {
		return nil
	}
	ok := false
	switch act {
	case Publish:
		ok = u.CanPublish(name)
	case Subscribe:
		ok = u.CanSubscribe(name)
	case UseGroup:
		ok = u.CanUseGroup(name)
	case Describe:
		ok = u.CanPublish(name) || u.CanSubscribe(name)
	case Admin:
		ok = false
	}
	if ok {
		return nil
	}
	return &Denied{User: u.Name, Action: act, Name: name}
}

// Allowed is Authorize's verdict as a bool, for filtering lists: a list
// shows only what its reader may see, and says nothing of the rest.
func Allowed(authOn bool, u *conf.User, act Action, name string) bool {
	return Authorize(authOn, u, act, name) == nil
}

// GroupTopic decides whether u may see group's positions on topic (its
// committed offsets, lag and members): the group's right and subscribe
// on the topic, the pair join, commit and fetch need.
func GroupTopic(authOn bool, u *conf.User, group, topic string) error {
	if err := Authorize(authOn, u, UseGroup, group); err != nil {
		return err
	}
	return Authorize(authOn, u, Subscribe, topic)
}

// Viewer is the reader of a list: whether auth is on and who reads. Every
// door (the protocol port's stats, the HTTP API, the dashboard, /metrics)
// filters its lists with it, so that a list never names what its reader
// could not ask for.
type Viewer struct {
	On   bool
	User *conf.User
}

// All says whether the viewer sees everything (auth off, or an admin).
func (v Viewer) All() bool { return !v.On || (v.User != nil && v.User.Admin) }

// Authorize is Authorize for this viewer.
func (v Viewer) Authorize(act Action, name string) error { return Authorize(v.On, v.User, act, name) }

// Topic says whether the viewer may see topic (publish or subscribe).
func (v Viewer) Topic(name string) bool { return v.Authorize(Describe, name) == nil }

// GroupTopic says whether the viewer may see group's positions on topic.
func (v Viewer) GroupTopic(group, topic string) bool {
	return GroupTopic(v.On, v.User, group, topic) == nil
}

// LoginFailed is the reply to every failed login, wire and HTTP.
func LoginFailed(name string) string {
	return "authentication failed for user " + protocol.Printable([]byte(name))
}
