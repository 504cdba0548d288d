package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/metaq-go/metaq/sdk/message"
)

// A read's records are written as JSON here, field by field, rather than
// through encoding/json: the values dominate the reply and are copied
// once (base64, escaped text or compacted JSON). The fields are
// ConsumedRecord's, in its order (TestRecordJSON).

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string: ", \ and control
// characters escaped, invalid UTF-8 as U+FFFD (as encoding/json does,
// without its HTML escapes).
func appendJSONString(dst []byte, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += n
			start = i
			continue
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendField appends b in format f as JSON.
func appendField(dst []byte, f string, b []byte) ([]byte, error) {
	switch f {
	case formatJSON:
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			return dst, errors.New("is not JSON: read it with format=binary or format=text")
		}
		return append(dst, buf.Bytes()...), nil
	case formatText:
		if !utf8.Valid(b) {
			return dst, errors.New("is not UTF-8 text: read it with format=binary")
		}
		return appendJSONString(dst, b), nil
	default:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"'), nil
	}
}

// appendRecordJSON appends rec of topic's partition p, keys and values
// in format f, as ConsumedRecord's JSON (compact).
func appendRecordJSON(dst []byte, topic string, p int32, f string, rec *message.Record) ([]byte, error) {
	m, err := rec.Message(topic, p)
	if err != nil {
		return dst, err
	}
	at := func(what string, err error) error {
		return errors.New(what + " of the record at offset " + strconv.FormatInt(rec.Offset, 10) + " " + err.Error())
	}
	dst = append(dst, `{"topic":`...)
	dst = appendJSONString(dst, []byte(topic))
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(p), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, rec.Offset, 10)
	dst = append(dst, `,"msg_id":`...)
	dst = strconv.AppendInt(dst, rec.ID, 10)
	if m.Key != nil {
		dst = append(dst, `,"key":`...)
		if dst, err = appendField(dst, f, m.Key); err != nil {
			return dst, at("key", err)
		}
	}
	dst = append(dst, `,"value":`...)
	if dst, err = appendField(dst, f, m.Body); err != nil {
		return dst, at("value", err)
	}
	if len(m.Headers) > 0 {
		dst = append(dst, `,"headers":[`...)
		for i, h := range m.Headers {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"key":`...)
			dst = appendJSONString(dst, []byte(h.Key))
			dst = append(dst, `,"value":`...)
			if h.Value == nil {
				dst = append(dst, "null"...)
			} else {
				dst = appendJSONString(dst, h.Value)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	if len(m.Tags) > 0 {
		dst = append(dst, `,"tags":[`...)
		for i, t := range m.Tags {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, []byte(t))
		}
		dst = append(dst, ']')
	}
	dst = append(dst, `,"timestamp":`...)
	dst = strconv.AppendInt(dst, m.Time().UnixMilli(), 10)
	if m.HasAttribute {
		dst = append(dst, `,"attribute":`...)
		dst = appendJSONString(dst, []byte(m.Attribute))
	}
	return append(dst, '}'), nil
}
