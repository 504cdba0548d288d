package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// openAPI is the part of docs/openapi.json the test reads.
type openAPI struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"schemas"`
	} `json:"components"`
}

type openAPIOp struct {
	OperationID string `json:"operationId"`
	RequestBody *struct {
		Content map[string]struct {
			Example json.RawMessage `json:"example"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]struct {
		Content map[string]struct {
			Example json.RawMessage `json:"example"`
		} `json:"content"`
	} `json:"responses"`
}

// openAPITypes are the server's types of the data plane's bodies, by
// schema name.
var openAPITypes = map[string]any{
	"ProduceRequest": ProduceRequest{}, "ProduceRecord": ProduceRecord{}, "ProduceResult": ProduceResult{}, "ProduceReply": ProduceReply{},
	"Header": RecordHeader{}, "ConsumedRecord": ConsumedRecord{}, "ReadReply": ReadReply{},
	"CreateConsumerRequest": CreateConsumerRequest{}, "CreateConsumerReply": CreateConsumerReply{}, "SubscribeRequest": SubscribeRequest{},
	"TopicPartition": TopicPartition{}, "AssignmentsReply": AssignmentsReply{}, "CommitOffset": CommitOffset{},
	"CommitRequest": CommitRequest{}, "CommitReply": CommitReply{}, "Error": apiError{},
}

// openAPIBodies are the request and 200 reply types of the operations
// with JSON examples.
var openAPIBodies = map[string][2]any{
	"produce":          {&ProduceRequest{}, &ProduceReply{}},
	"producePartition": {&ProduceRequest{}, &ProduceReply{}},
	"read":             {nil, &ReadReply{}},
	"createConsumer":   {&CreateConsumerRequest{}, &CreateConsumerReply{}},
	"subscribe":        {&SubscribeRequest{}, nil},
	"assignments":      {nil, &AssignmentsReply{}},
	"consumerRecords":  {nil, &ReadReply{}},
	"commit":           {&CommitRequest{}, &CommitReply{}},
}

// TestOpenAPIRoutes checks docs/openapi.json against the listener: every
// route of the probes, /metrics, the admin API and the data plane is an
// operation there and every operation is a route (a route for any method,
// MetaQ's /put, /get and /offset, matches the operations of its path); the
// schemas of the data plane have the fields of the server's types; the
// examples decode into those types as the server decodes bodies (unknown
// fields refused).
func TestOpenAPIRoutes(t *testing.T) {
	raw, err := os.ReadFile("../../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc openAPI
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	// The server's routes.
	routes := []string{"GET /healthz", "GET /readyz", "GET /metrics"}
	rec := func(pattern string, _ http.HandlerFunc) { routes = append(routes, pattern) }
	s := New(Config{}, nil, Options{})
	s.adminRoutes(rec, rec)
	for _, rt := range dataRouteTable {
		routes = append(routes, rt.pattern)
	}
	anyMethod := map[string]bool{}
	want := map[string]bool{}
	for _, r := range routes {
		m, p, ok := strings.Cut(r, " ")
		if !ok {
			anyMethod[r] = true
			continue
		}
		want[strings.ToLower(m)+" "+p] = true
	}
	ops := map[string]openAPIOp{}
	var documented []string
	for p, item := range doc.Paths {
		for m, body := range item {
			if m == "parameters" {
				continue
			}
			var op openAPIOp
			if err := json.Unmarshal(body, &op); err != nil {
				t.Fatalf("%s %s: %v", m, p, err)
			}
			if op.OperationID == "" {
				t.Errorf("%s %s: no operationId", m, p)
			}
			if _, dup := ops[op.OperationID]; dup {
				t.Errorf("operationId %s twice", op.OperationID)
			}
			ops[op.OperationID] = op
			key := m + " " + p
			documented = append(documented, key)
			if !want[key] && !anyMethod[p] {
				t.Errorf("docs/openapi.json: %s is no route of the listener", key)
			}
		}
	}
	sort.Strings(documented)
	for r := range want {
		if !slices.Contains(documented, r) {
			t.Errorf("docs/openapi.json lacks the route %s", r)
		}
	}
	for p := range anyMethod {
		if doc.Paths[p] == nil {
			t.Errorf("docs/openapi.json lacks the route %s", p)
		}
	}

	// Schemas: the fields of the server's types.
	for name, v := range openAPITypes {
		sc, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("docs/openapi.json: no schema %s", name)
			continue
		}
		var fields []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if tag != "" && tag != "-" {
				fields = append(fields, tag)
			}
		}
		var props []string
		for k := range sc.Properties {
			props = append(props, k)
		}
		sort.Strings(fields)
		sort.Strings(props)
		if !slices.Equal(fields, props) {
			t.Errorf("schema %s has properties %v, the server's %T has %v", name, props, v, fields)
		}
	}

	// Examples decode into the server's types.
	strict := func(where string, ex json.RawMessage, into any) {
		if len(ex) == 0 {
			t.Errorf("%s: no example", where)
			return
		}
		if err := jsonDupKeys(ex); err != nil {
			t.Errorf("%s: %v", where, err)
		}
		dec := json.NewDecoder(bytes.NewReader(ex))
		dec.DisallowUnknownFields()
		if err := dec.Decode(into); err != nil {
			t.Errorf("%s: the example does not decode into %T: %v", where, into, err)
		}
	}
	for id, types := range openAPIBodies {
		op, ok := ops[id]
		if !ok {
			t.Errorf("no operation %s", id)
			continue
		}
		if types[0] != nil {
			if op.RequestBody == nil {
				t.Errorf("%s: no request body", id)
			} else {
				strict(id+" request", op.RequestBody.Content["application/json"].Example, types[0])
			}
		}
		if types[1] != nil {
			strict(id+" reply", op.Responses["200"].Content["application/json"].Example, types[1])
		}
	}
}
