package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
)

// Topic changes go through a broker's HTTP admin API (docs/http.md): the
// broker persists them in <data_dir>/topics.toml and, in cluster mode,
// registers them in ZooKeeper.

// defaultHTTPPort is the broker's default http_port.
const defaultHTTPPort = "8120"

// APIError is a refusal of the HTTP admin API: a reply of 400 or more.
type APIError struct {
	// Method and Path are the request's ("POST", "/api/v1/topics").
	Method, Path string
	// StatusCode is the HTTP status code, Status its line ("409 Conflict").
	StatusCode int
	Status     string
	// Message is the API's explanation (its JSON "error"), or "".
	Message string
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return fmt.Sprintf("%s %s: %d: %s", e.Method, e.Path, e.StatusCode, e.Message)
	}
	return fmt.Sprintf("%s %s: %s", e.Method, e.Path, e.Status)
}

// SetHTTPAddr makes the topic calls use the admin API at httpAddr
// ("host:port") instead of the one the broker reports.
func (a *Admin) SetHTTPAddr(httpAddr string) {
	a.mu.Lock()
	a.httpAddr = httpAddr
	a.mu.Unlock()
}

// HTTPAddr asks the broker at addr where its admin API is (the http_addr
// line of its stats), so that a topic call acts on that broker and no
// other: a broker that does not answer is an error, and so is one with
// http_port = 0. A listener bound to every address (0.0.0.0, ::) is
// reached at addr's host; a broker from before http_addr at its default
// port 8120.
func (a *Admin) HTTPAddr(ctx context.Context, addr string) (string, error) {
	st, err := a.Stats(ctx, addr, "")
	if err != nil {
		return "", fmt.Errorf("asking the broker at %s for its admin API address: %w", addr, err)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("bad broker address %q: %v", addr, err)
	}
	h, ok := st.Value("http_addr")
	switch {
	case !ok:
		return net.JoinHostPort(host, defaultHTTPPort), nil
	case h == "-":
		return "", fmt.Errorf("the broker at %s serves no admin API (http_port = 0 in its server.toml)", addr)
	}
	hh, p, err := net.SplitHostPort(h)
	if err != nil {
		return "", fmt.Errorf("the broker at %s gave a bad http_addr %q", addr, h)
	}
	if ip := net.ParseIP(hh); hh == "" || ip != nil && ip.IsUnspecified() {
		hh = host
	}
	return net.JoinHostPort(hh, p), nil
}

// apiAddr is the admin API the topic calls use: SetHTTPAddr's, else the
// one of the Admin's broker (client.Brokers with one address).
func (a *Admin) apiAddr(ctx context.Context) (string, error) {
	a.mu.Lock()
	h, closed := a.httpAddr, a.closed
	a.mu.Unlock()
	switch {
	case closed:
		return "", ErrClosed
	case h != "":
		return h, nil
	case len(a.direct) != 1:
		return "", errors.New("admin: topic changes need one broker (client.Brokers with one address) or SetHTTPAddr")
	}
	return a.HTTPAddr(ctx, a.direct[0])
}

// apiCall sends one admin API request with body (JSON, nil for none) and
// decodes the reply into out (nil: ignored). A reply of 400 or more is an
// *APIError.
func (a *Admin) apiCall(ctx context.Context, method, path string, body, out any) error {
	api, err := a.apiAddr(ctx)
	if err != nil {
		return err
	}
	var data []byte
	if body != nil {
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	resp, reply, err := a.cl.AdminHTTP(ctx, api, method, path, data)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 400 {
		ae := &APIError{Method: method, Path: path, StatusCode: resp.StatusCode, Status: resp.Status}
		var m struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(reply, &m) == nil {
			ae.Message = m.Error
		}
		return ae
	}
	if out != nil {
		if err := json.Unmarshal(reply, out); err != nil {
			return fmt.Errorf("admin API reply: %w", err)
		}
	}
	return nil
}

// CreatedTopic is the topic CreateTopic made.
type CreatedTopic struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
}

// CreateTopic creates topic name with partitions partitions (0: the
// broker's num_partitions).
func (a *Admin) CreateTopic(ctx context.Context, name string, partitions int) (CreatedTopic, error) {
	if partitions < 0 {
		return CreatedTopic{}, fmt.Errorf("admin: partitions must not be negative, got %d", partitions)
	}
	req := map[string]any{"name": name}
	if partitions > 0 {
		req["num_partitions"] = partitions
	}
	var out CreatedTopic
	err := a.apiCall(ctx, http.MethodPost, "/api/v1/topics", req, &out)
	return out, err
}

// DeleteTopic deletes topic name and, with deleteData, its messages
// (without, the partition directories stay on disk and creating the topic
// again reopens them).
func (a *Admin) DeleteTopic(ctx context.Context, name string, deleteData bool) error {
	path := "/api/v1/topics/" + url.PathEscape(name) + "?delete_data=" + strconv.FormatBool(deleteData)
	return a.apiCall(ctx, http.MethodDelete, path, nil, nil)
}

// AlteredTopic is what AddPartitions did.
type AlteredTopic struct {
	Old int `json:"old_partitions"`
	New int `json:"partitions"`
	// Warning, if not "", is to be shown: with keyed producing a key's
	// partition changes with the count.
	Warning string `json:"warning"`
}

// AddPartitions gives topic name partitions partitions in all; fewer
// than it has are refused, as many is no change (Old == New).
func (a *Admin) AddPartitions(ctx context.Context, name string, partitions int) (AlteredTopic, error) {
	if partitions < 1 {
		return AlteredTopic{}, fmt.Errorf("admin: partitions must be positive, got %d", partitions)
	}
	var out AlteredTopic
	path := "/api/v1/topics/" + url.PathEscape(name) + "/partitions"
	err := a.apiCall(ctx, http.MethodPost, path, map[string]any{"num_partitions": partitions}, &out)
	return out, err
}
