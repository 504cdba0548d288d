package message

import (
	"encoding/base64"
	"unicode/utf8"
)

// JSONContent is a message's content in the JSON objects of `metaq
// consume --json` and GET /api/v1/messages (docs/http.md): the attribute
// (null when it has none), the body and its properties. The body, key and
// header values are text when they are UTF-8, else base64 with the
// encoding "base64". The objects embed it after their own fields.
type JSONContent struct {
	Attribute *string `json:"attribute"`
	Body      string  `json:"body"`
	Encoding  string  `json:"encoding"`
	// The properties (docs/protocol.md), left out when the message has none.
	Key         *string      `json:"key,omitempty"`
	KeyEncoding string       `json:"keyEncoding,omitempty"`
	Timestamp   *int64       `json:"timestamp,omitempty"`
	Tags        []string     `json:"tags,omitempty"`
	Headers     []JSONHeader `json:"headers,omitempty"`
}

// JSONHeader is one header of a JSONContent: a null value is JSON null;
// a value that is not UTF-8 is in base64, with encoding "base64".
type JSONHeader struct {
	Key      string  `json:"key"`
	Value    *string `json:"value"`
	Encoding string  `json:"encoding,omitempty"`
}

// NewJSONContent returns m's content for JSON.
func NewJSONContent(m *Message) JSONContent {
	var j JSONContent
	if m.HasAttribute {
		a := m.Attribute
		j.Attribute = &a
	}
	j.Body, j.Encoding = textOr64(m.Body)
	if m.Key != nil {
		k, enc := textOr64(m.Key)
		j.Key = &k
		if enc != "utf8" {
			j.KeyEncoding = enc
		}
	}
	if !m.Timestamp.IsZero() {
		ms := m.Timestamp.UnixMilli()
		j.Timestamp = &ms
	}
	j.Tags = m.Tags
	for _, h := range m.Headers {
		jh := JSONHeader{Key: h.Key}
		if h.Value != nil {
			v, enc := textOr64(h.Value)
			jh.Value = &v
			if enc != "utf8" {
				jh.Encoding = enc
			}
		}
		j.Headers = append(j.Headers, jh)
	}
	return j
}

// textOr64 returns b as text with the encoding "utf8" when it is UTF-8,
// else in base64 with "base64".
func textOr64(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), "utf8"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}
