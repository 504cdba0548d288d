package admin

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/metaq-go/metaq/sdk/message"
)

// FoundMessage is a message FindMessages found (GET /api/v1/messages):
// the shape of `metaq consume --json`'s objects, with Time the create
// time (unix ms), else the msgId's. Body, Key and header values are text
// when their Encoding is "utf8" (or empty), base64 when "base64".
type FoundMessage struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	MsgID     string `json:"msgId"`
	Time      int64  `json:"time"`
	message.JSONContent
}

// Found is FindMessages's answer: the messages (by topic, partition and
// offset), More when more matched than the limit, TimedOut when the
// broker's time budget (3 s) ended the lookup, Notes on what the broker
// could not use (a damaged index file, scanned instead).
type Found struct {
	Messages     []FoundMessage `json:"messages"`
	More         bool           `json:"more"`
	TimedOut     bool           `json:"timedOut"`
	Limit        int            `json:"limit"`
	Indexed      bool           `json:"indexed"`
	Candidates   int            `json:"candidates"`
	ScannedBytes int64          `json:"scannedBytes"`
	TookMs       float64        `json:"tookMs"`
	Notes        []string       `json:"notes,omitempty"`
}

// FindQuery is a lookup: by Key, or by ID (a msgId) when Key is nil; in
// Topic ("" every topic the user may read); at most Limit messages (0:
// the broker's default, 20).
type FindQuery struct {
	Topic string
	Key   []byte
	ID    int64
	Limit int
}

// FindMessages looks messages up by key or msgId through the broker's
// admin API (its key and id index).
func (a *Admin) FindMessages(ctx context.Context, q FindQuery) (Found, error) {
	v := url.Values{}
	if q.Key != nil {
		v.Set("key", string(q.Key))
	} else {
		v.Set("id", strconv.FormatInt(q.ID, 10))
	}
	if q.Topic != "" {
		v.Set("topic", q.Topic)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out Found
	err := a.apiCall(ctx, http.MethodGet, "/api/v1/messages?"+v.Encode(), nil, &out)
	return out, err
}
