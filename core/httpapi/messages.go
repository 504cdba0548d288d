package httpapi

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The messages page's read of a partition (docs/dashboard.md): whole
// records from an offset, bodies shown up to MaxShown bytes, stopping
// before bytes that do not parse as a record (never shown).

// MaxShown is the most bytes of a body the messages page shows.
const MaxShown = 4096

// PartitionReader is a partition as the messages page reads it: the
// broker adapts its log. Read's errors: ErrNoMessages past the end, a
// *RequestError to refuse the page with, a *GoneError when the
// partition was closed (its topic deleted or changed), else any.
type PartitionReader interface {
	MinOffset() int64
	MaxOffset() int64
	Read(offset int64, max int) (RecordView, error)
}

// RecordView is bytes read from a partition, released once copied.
type RecordView interface {
	ReadAll(dst []byte) ([]byte, error)
	Release()
}

// ErrNoMessages is PartitionReader.Read's error at the partition's end.
var ErrNoMessages = errors.New("no data")

// GoneError is a read of a partition that was closed.
type GoneError struct{ Err error }

func (e *GoneError) Error() string { return e.Err.Error() }

// errNotRecord is browse's error for an offset that does not start a
// valid record.
var errNotRecord = errors.New("not the start of a valid record")

// ReadMessages reads the messages page of partition p of topic from l:
// up to n records from offset (-1: the min offset), records of at most
// maxMsg bytes.
func ReadMessages(l PartitionReader, topic string, p int, offset int64, n int, asHex bool, maxMsg int) (MessagePage, error) {
	refuse := func(code int, msg string) (MessagePage, error) {
		return MessagePage{}, &RequestError{Status: code, Msg: msg}
	}
	pg := MessagePage{Min: l.MinOffset(), Max: l.MaxOffset(), Offset: offset}
	if pg.Offset < 0 {
		pg.Offset = pg.Min
	}
	if pg.Offset < pg.Min || pg.Offset > pg.Max {
		return refuse(http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("offset %d is outside partition %d's offsets %d..%d", pg.Offset, p, pg.Min, pg.Max))
	}
	msgs, next, err := browse(l, topic, int32(p), pg.Offset, n, asHex, maxMsg)
	if err != nil {
		var re *RequestError
		var gone *GoneError
		switch {
		case errors.As(err, &re):
			return MessagePage{}, re
		case errors.As(err, &gone) && len(msgs) == 0:
			return refuse(http.StatusNotFound, "topic "+protocol.Printable([]byte(topic))+" was deleted or is being changed: reload its page")
		case errors.Is(err, errNotRecord) && len(msgs) == 0:
			return refuse(http.StatusUnprocessableEntity, fmt.Sprintf("offset %d of partition %d is not the start of a valid record "+
				"(not a record boundary, or the bytes there are corrupt): start from an offset the partition table or a Next link gives (%v)",
				pg.Offset, p, err))
		case len(msgs) == 0:
			return refuse(http.StatusInternalServerError, "reading partition "+strconv.Itoa(p)+": "+err.Error())
		}
		pg.Stopped = err.Error()
	}
	pg.Messages, pg.Next = msgs, next
	return pg, nil
}

// browse reads up to n records of l from offset. It stops before a
// record that does not parse (corrupt, or offset is not a record
// boundary): such bytes are never shown; err says so when nothing could
// be shown.
func browse(l PartitionReader, topic string, part int32, offset int64, n int, asHex bool, maxMsg int) ([]ShownMessage, int64, error) {
	chunk := 64 << 10
	var out []ShownMessage
	cur := offset
	var buf []byte
	for len(out) < n {
		v, err := l.Read(cur, chunk)
		if errors.Is(err, ErrNoMessages) {
			break
		}
		if err != nil {
			if len(out) > 0 {
				break
			}
			return nil, cur, err
		}
		buf, err = v.ReadAll(buf[:0])
		v.Release()
		if err != nil {
			return out, cur, err
		}
		it := message.NewIterator(buf, cur, maxMsg)
		got := 0
		for len(out) < n && it.Next() {
			rec := it.Record()
			m, err := rec.Message(topic, part)
			if err != nil {
				return out, rec.Offset, fmt.Errorf("%w at offset %d: %v", errNotRecord, rec.Offset, err)
			}
			sm := shownRecord(rec, &m, asHex)
			out = append(out, sm)
			cur = sm.Next
			got++
		}
		if err := it.Err(); err != nil {
			return out, cur, fmt.Errorf("%w at offset %d: %v", errNotRecord, cur, err)
		}
		if got == 0 {
			// The record at cur is longer than the chunk (or the bytes
			// there are not a record): read more, up to one whole record.
			if chunk >= maxMsg+message.HeaderSize || len(buf) < chunk {
				return out, cur, fmt.Errorf("%w at offset %d", errNotRecord, cur)
			}
			chunk = min(chunk*4, maxMsg+message.HeaderSize)
		}
	}
	return out, cur, nil
}

// shownRecord is rec, decoded as m, as the messages page shows it.
func shownRecord(rec *message.Record, m *message.Message, asHex bool) ShownMessage {
	size := message.HeaderSize + len(rec.Data)
	sm := ShownMessage{Offset: rec.Offset, ID: rec.ID, Flag: rec.Flag, Size: size, Next: rec.Offset + int64(size),
		Attribute: m.Attribute, HasAttribute: m.HasAttribute}
	sm.setProps(m)
	body := m.Body
	if len(body) > MaxShown {
		sm.Cut = len(body) - MaxShown
		body = body[:MaxShown]
	}
	if asHex || !utf8.Valid(body) {
		sm.Body, sm.Hex = hex.Dump(body), true
	} else {
		sm.Body = string(body)
	}
	return sm
}

// maxShownValue is the most bytes of a key or header value the messages
// page shows.
const maxShownValue = 1024

// setProps fills sm's key, timestamp, tags and headers from m's. The page
// escapes them as text (html/template); what is not printable UTF-8 is
// shown in hex and marked so.
func (sm *ShownMessage) setProps(m *message.Message) {
	if m.Key != nil {
		sm.Key = showBytes(m.Key)
	}
	if !m.Timestamp.IsZero() {
		sm.Timestamp = m.Timestamp.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	for _, t := range m.Tags {
		sm.Tags = append(sm.Tags, printableText(t))
	}
	for _, h := range m.Headers {
		sh := ShownHeader{Key: printableText(h.Key)}
		if h.Value != nil {
			sh.Value = showBytes(h.Value)
		}
		sm.Headers = append(sm.Headers, sh)
	}
}

// showBytes returns b as the page shows it: text when printable UTF-8,
// else a hex string, up to maxShownValue bytes.
func showBytes(b []byte) *ShownBytes {
	v := &ShownBytes{}
	if len(b) > maxShownValue {
		v.Cut = len(b) - maxShownValue
		b = b[:maxShownValue]
	}
	if utf8.Valid(b) && printableText(string(b)) == string(b) {
		v.Text = string(b)
	} else {
		v.Text, v.Hex = hex.EncodeToString(b), true
	}
	return v
}

// printableText returns s, or s quoted (Go escapes) when it holds a
// control or other non-printable character (bidi overrides included).
func printableText(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) && r != ' ' {
			return strconv.Quote(s)
		}
	}
	return s
}
