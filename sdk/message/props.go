package message

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// FlagHasProperties is flag bit 1: the data carries a properties block
// (key, timestamp, tags, headers) after the attribute, if any, and before
// the payload. docs/protocol.md, "Properties", is the format's reference:
//
//	[int32 BE n][n bytes: [u8 version = 1][u8 fields][field...]]
//
// fields says which of these follow, in this order: bit 0 the key
// ([uvarint len][bytes]), bit 1 the create timestamp ([int64 BE Unix ms]),
// bit 2 the tags ([uvarint count], each [uvarint len][UTF-8]), bit 3 the
// headers ([uvarint count], each [uvarint keyLen][UTF-8 key][uvarint
// valueLen+1][value], 0 for a null value), bit 4 the idempotent
// producer ([uvarint producerId][uvarint seq], both in 1..2^63-1 and
// 0..2^63-1). The block ends exactly after its last field; it has no
// checksum of its own (the record's covers it).
const FlagHasProperties int32 = 2

// PropsVersion is the properties block's version byte.
const PropsVersion = 1

// Field bits of a properties block.
const (
	propKey       = 1 << 0
	propTimestamp = 1 << 1
	propTags      = 1 << 2
	propHeaders   = 1 << 3
	propProducer  = 1 << 4
	propAll       = propKey | propTimestamp | propTags | propHeaders | propProducer
)

// Limits of a properties block, checked by the SDK before a send and by the
// broker on put, mput, sync and a transaction's put.
const (
	// MaxKeyBytes bounds a message key.
	MaxKeyBytes = 4096
	// MaxHeaders bounds the number of headers of a message.
	MaxHeaders = 256
	// MaxTags bounds the number of tags of a message.
	MaxTags = 32
	// MaxTagBytes bounds one tag.
	MaxTagBytes = 255
	// MaxPropertiesBytes bounds the whole block after its length prefix:
	// key, tags and every header's key and value, with their lengths
	// (RocketMQ's properties bound, 32 KiB).
	MaxPropertiesBytes = 32 << 10
)

var (
	// ErrBadProperties means a properties block is malformed: too short for
	// what it declares, an unknown version or field bit, a field that is
	// not UTF-8 where it must be, or bytes after its last field.
	ErrBadProperties = errors.New("message: bad properties")
	// ErrPropertiesLimit means a message's key, headers, tags or whole
	// properties block exceed one of the limits above; the error names it.
	ErrPropertiesLimit = errors.New("message: properties over limit")
)

// Header is one header of a message: a key and a value of bytes. A nil
// Value is a null value (Kafka's), an empty non-nil one an empty value.
type Header struct {
	Key   string
	Value []byte
}

// Headers is a message's headers, in order; a key may repeat.
type Headers []Header

// Get returns the value of the last header named key (Kafka's
// lastHeader) and whether there is one.
func (h Headers) Get(key string) ([]byte, bool) {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Key == key {
			return h[i].Value, true
		}
	}
	return nil, false
}

// String returns Get's value as a string.
func (h Headers) String(key string) (string, bool) {
	v, ok := h.Get(key)
	return string(v), ok
}

// Int64 returns Get's value read as a decimal integer (what AddInt64 and
// `metaq produce --header k=v` write). ok is false without such a header;
// err is set when the value is not a decimal int64.
func (h Headers) Int64(key string) (n int64, ok bool, err error) {
	v, ok := h.Get(key)
	if !ok {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, true, fmt.Errorf("header %q: %w", key, err)
	}
	return n, true, nil
}

// Add appends a header with a string value.
func (h *Headers) Add(key, value string) { *h = append(*h, Header{Key: key, Value: []byte(value)}) }

// AddInt64 appends a header whose value is n in decimal.
func (h *Headers) AddInt64(key string, n int64) {
	*h = append(*h, Header{Key: key, Value: strconv.AppendInt(nil, n, 10)})
}

// HasProperties reports whether m carries a properties block: a key (a
// non-nil Key, empty or not), a timestamp, tags, headers or an
// idempotent producer's id and sequence (ProducerID non-zero).
func (m *Message) HasProperties() bool {
	return m.Key != nil || !m.Timestamp.IsZero() || len(m.Tags) > 0 || len(m.Headers) > 0 || m.ProducerID != 0 ||
		m.Delayed()
}

// Time returns m's create time: Timestamp when the message carries one,
// else the millisecond in its id (when the broker assigned the id, i.e.
// the append), or the zero time when m has no id.
func (m *Message) Time() time.Time {
	if !m.Timestamp.IsZero() {
		return m.Timestamp
	}
	if m.ID <= 0 {
		return time.Time{}
	}
	ms, _, _ := IDParts(m.ID)
	return time.UnixMilli(ms)
}

// propsLen returns the length of m's properties block after its int32
// length prefix (0 when m has none).
func (m *Message) propsLen() int {
	if !m.HasProperties() {
		return 0
	}
	n := 2
	if m.Key != nil {
		n += uvarintLen(uint64(len(m.Key))) + len(m.Key)
	}
	if !m.Timestamp.IsZero() {
		n += 8
	}
	if len(m.Tags) > 0 {
		n += uvarintLen(uint64(len(m.Tags)))
		for _, t := range m.Tags {
			n += uvarintLen(uint64(len(t))) + len(t)
		}
	}
	if nh := len(m.Headers) + m.delayHeaders(); nh > 0 {
		n += uvarintLen(uint64(nh))
		for _, h := range m.Headers {
			n += uvarintLen(uint64(len(h.Key))) + len(h.Key)
			if h.Value == nil {
				n++
			} else {
				n += uvarintLen(uint64(len(h.Value))+1) + len(h.Value)
			}
		}
		if m.delayHeaders() > 0 {
			k, v := m.delayHeader()
			n += uvarintLen(uint64(len(k))) + len(k) + uvarintLen(uint64(len(v))+1) + len(v)
		}
	}
	if m.ProducerID != 0 {
		n += uvarintLen(uint64(m.ProducerID)) + uvarintLen(uint64(m.ProducerSeq))
	}
	return n
}

// AppendProperties appends m's properties block, its int32 length prefix
// included, or nothing when m has none.
func (m *Message) AppendProperties(dst []byte) []byte {
	if !m.HasProperties() {
		return dst
	}
	return m.appendProps(dst, m.propsLen())
}

// appendProps appends m's properties block, length prefix included.
func (m *Message) appendProps(dst []byte, n int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	var fields byte
	if m.Key != nil {
		fields |= propKey
	}
	if !m.Timestamp.IsZero() {
		fields |= propTimestamp
	}
	if len(m.Tags) > 0 {
		fields |= propTags
	}
	if len(m.Headers)+m.delayHeaders() > 0 {
		fields |= propHeaders
	}
	if m.ProducerID != 0 {
		fields |= propProducer
	}
	dst = append(dst, PropsVersion, fields)
	if m.Key != nil {
		dst = binary.AppendUvarint(dst, uint64(len(m.Key)))
		dst = append(dst, m.Key...)
	}
	if !m.Timestamp.IsZero() {
		dst = binary.BigEndian.AppendUint64(dst, uint64(m.Timestamp.UnixMilli()))
	}
	if len(m.Tags) > 0 {
		dst = binary.AppendUvarint(dst, uint64(len(m.Tags)))
		for _, t := range m.Tags {
			dst = binary.AppendUvarint(dst, uint64(len(t)))
			dst = append(dst, t...)
		}
	}
	if nh := len(m.Headers) + m.delayHeaders(); nh > 0 {
		dst = binary.AppendUvarint(dst, uint64(nh))
		for _, h := range m.Headers {
			dst = binary.AppendUvarint(dst, uint64(len(h.Key)))
			dst = append(dst, h.Key...)
			if h.Value == nil {
				dst = append(dst, 0)
			} else {
				dst = binary.AppendUvarint(dst, uint64(len(h.Value))+1)
				dst = append(dst, h.Value...)
			}
		}
		if m.delayHeaders() > 0 {
			k, v := m.delayHeader()
			dst = binary.AppendUvarint(dst, uint64(len(k)))
			dst = append(dst, k...)
			dst = binary.AppendUvarint(dst, uint64(len(v))+1)
			dst = append(dst, v...)
		}
	}
	if m.ProducerID != 0 {
		dst = binary.AppendUvarint(dst, uint64(m.ProducerID))
		dst = binary.AppendUvarint(dst, uint64(m.ProducerSeq))
	}
	return dst
}

// CheckProperties returns an error wrapping ErrPropertiesLimit when m's
// properties break a limit, or ErrBadProperties when a tag or header key
// is not valid UTF-8 or a tag is empty or holds a space or control
// character. The SDK calls it before a send; the broker applies the same
// rules to the bytes it receives (ValidateProperties).
func (m *Message) CheckProperties() error {
	if !m.HasProperties() {
		return nil
	}
	if len(m.Key) > MaxKeyBytes {
		return limitErr("key", len(m.Key), MaxKeyBytes)
	}
	if !m.Timestamp.IsZero() && m.Timestamp.UnixMilli() == zeroTimeMs {
		return fmt.Errorf("%w: timestamp within a millisecond of the zero time", ErrBadProperties)
	}
	if len(m.Tags) > MaxTags {
		return limitErr("tag count", len(m.Tags), MaxTags)
	}
	for _, t := range m.Tags {
		if err := checkTag([]byte(t)); err != nil {
			return err
		}
	}
	if len(m.Headers)+m.delayHeaders() > MaxHeaders {
		return limitErr("header count", len(m.Headers)+m.delayHeaders(), MaxHeaders)
	}
	if err := m.checkDelay(); err != nil {
		return err
	}
	for _, h := range m.Headers {
		if !utf8.ValidString(h.Key) {
			return fmt.Errorf("%w: header key %q is not UTF-8", ErrBadProperties, h.Key)
		}
	}
	if m.ProducerID < 0 || m.ProducerSeq < 0 {
		return fmt.Errorf("%w: producer id %d, sequence %d: negative", ErrBadProperties, m.ProducerID, m.ProducerSeq)
	}
	if n := m.propsLen(); n > MaxPropertiesBytes {
		return limitErr("properties (key, tags and headers)", n, MaxPropertiesBytes)
	}
	return nil
}

func limitErr(what string, n, limit int) error {
	return fmt.Errorf("%w: %s of %d over the limit of %d", ErrPropertiesLimit, what, n, limit)
}

func checkTag(t []byte) error {
	if len(t) == 0 {
		return fmt.Errorf("%w: empty tag", ErrBadProperties)
	}
	if len(t) > MaxTagBytes {
		return limitErr("tag length", len(t), MaxTagBytes)
	}
	if !utf8.Valid(t) {
		return fmt.Errorf("%w: tag is not UTF-8", ErrBadProperties)
	}
	for _, r := range string(t) {
		if r <= ' ' || r == 0x7F || (r >= 0x80 && r <= 0x9F) {
			return fmt.Errorf("%w: tag %q holds a space or control character", ErrBadProperties, t)
		}
	}
	return nil
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// zeroTimeMs is time.Time{}.UnixMilli(): a timestamp a Message cannot
// carry (its zero Timestamp means none).
const zeroTimeMs = -62135596800000

// propsReader walks a properties block (after its length prefix) without
// allocating.
type propsReader struct {
	b   []byte
	pos int
}

func (r *propsReader) uvarint(limit uint64) (uint64, bool) {
	x, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 || x > limit || n != uvarintLen(x) { // one encoding per value
		return 0, false
	}
	r.pos += n
	return x, true
}

func (r *propsReader) bytes(n uint64) ([]byte, bool) {
	if n > uint64(len(r.b)-r.pos) {
		return nil, false
	}
	s := r.b[r.pos : r.pos+int(n) : r.pos+int(n)]
	r.pos += int(n)
	return s, true
}

// PropsVisitor receives a block's fields from WalkProperties; a nil func
// skips its field. The slices alias the block.
type PropsVisitor struct {
	Key       func(k []byte)
	Timestamp func(ms int64)
	Tag       func(t []byte)
	Header    func(k, v []byte, null bool)
	Producer  func(id, seq int64)
}

// ValidateProperties checks a properties block (the bytes after its length
// prefix) against the format and the limits, without allocating: the
// broker's check on put.
func ValidateProperties(block []byte) error {
	return WalkProperties(block, nil)
}

// WalkProperties checks a properties block (the bytes after its length
// prefix) as ValidateProperties does and hands its fields to v (nil: none)
// as it goes; on an error v may have seen some fields.
func WalkProperties(block []byte, v *PropsVisitor) error {
	if len(block) > MaxPropertiesBytes {
		return limitErr("properties (key, tags and headers)", len(block), MaxPropertiesBytes)
	}
	if len(block) < 2 {
		return fmt.Errorf("%w: block of %d bytes", ErrBadProperties, len(block))
	}
	if block[0] != PropsVersion {
		return fmt.Errorf("%w: version %d", ErrBadProperties, block[0])
	}
	fields := block[1]
	if fields&^propAll != 0 || fields == 0 {
		return fmt.Errorf("%w: fields 0x%02x", ErrBadProperties, fields)
	}
	r := propsReader{b: block, pos: 2}
	bad := func(what string) error {
		return fmt.Errorf("%w: %s at byte %d", ErrBadProperties, what, r.pos)
	}
	if fields&propKey != 0 {
		n, ok := r.uvarint(1 << 31)
		if !ok {
			return bad("key length")
		}
		if n > MaxKeyBytes {
			return limitErr("key", int(n), MaxKeyBytes)
		}
		k, ok := r.bytes(n)
		if !ok {
			return bad("short key")
		}
		if v != nil && v.Key != nil {
			v.Key(k)
		}
	}
	if fields&propTimestamp != 0 {
		t, ok := r.bytes(8)
		if !ok {
			return bad("short timestamp")
		}
		ms := int64(binary.BigEndian.Uint64(t))
		if ms == zeroTimeMs {
			return bad("timestamp of the zero time")
		}
		if v != nil && v.Timestamp != nil {
			v.Timestamp(ms)
		}
	}
	if fields&propTags != 0 {
		c, ok := r.uvarint(1 << 31)
		if !ok || c == 0 {
			return bad("tag count")
		}
		if c > MaxTags {
			return limitErr("tag count", int(c), MaxTags)
		}
		for range c {
			n, ok := r.uvarint(1 << 31)
			if !ok {
				return bad("tag length")
			}
			t, ok := r.bytes(n)
			if !ok {
				return bad("short tag")
			}
			if err := checkTag(t); err != nil {
				return err
			}
			if v != nil && v.Tag != nil {
				v.Tag(t)
			}
		}
	}
	if fields&propHeaders != 0 {
		c, ok := r.uvarint(1 << 31)
		if !ok || c == 0 {
			return bad("header count")
		}
		if c > MaxHeaders {
			return limitErr("header count", int(c), MaxHeaders)
		}
		for range c {
			n, ok := r.uvarint(1 << 31)
			if !ok {
				return bad("header key length")
			}
			k, ok := r.bytes(n)
			if !ok {
				return bad("short header key")
			}
			if !utf8.Valid(k) {
				return bad("header key not UTF-8")
			}
			n, ok = r.uvarint(1 << 31)
			if !ok {
				return bad("header value length")
			}
			var val []byte
			if n > 0 {
				if val, ok = r.bytes(n - 1); !ok {
					return bad("short header value")
				}
			}
			if v != nil && v.Header != nil {
				v.Header(k, val, n == 0)
			}
		}
	}
	if fields&propProducer != 0 {
		id, ok := r.uvarint(math.MaxInt64)
		if !ok || id == 0 {
			return bad("producer id")
		}
		seq, ok := r.uvarint(math.MaxInt64)
		if !ok {
			return bad("producer sequence")
		}
		if v != nil && v.Producer != nil {
			v.Producer(int64(id), int64(seq))
		}
	}
	if r.pos != len(block) {
		return bad("trailing bytes")
	}
	return nil
}

// ProducerOf returns the idempotent producer's id and sequence in a
// properties block (the bytes after its length prefix), checking the
// block as ValidateProperties does; ok is false when it has none.
func ProducerOf(block []byte) (id, seq int64, ok bool, err error) {
	err = WalkProperties(block, &PropsVisitor{Producer: func(i, s int64) { id, seq, ok = i, s, true }})
	return id, seq, ok, err
}

// SplitDataProducer is SplitData for the broker's put path: it checks the
// body as SplitData does and returns the idempotent producer's id and
// sequence when the properties block carries them (ok), in the same walk.
func SplitDataProducer(flag int32, data []byte) (id, seq int64, ok bool, err error) {
	id, seq, ok, _, err = SplitDataProducerOnly(flag, data)
	return id, seq, ok, err
}

// SplitDataProducerOnly is SplitDataProducer that also reports whether
// the properties block holds the producer's field alone (only: no key,
// timestamp, tags or headers, so no delivery or cancel header either).
func SplitDataProducerOnly(flag int32, data []byte) (id, seq int64, ok, only bool, err error) {
	_, _, props, _, err := splitData(flag, data, false)
	if err != nil || props == nil {
		return 0, 0, false, false, err
	}
	// The idempotent producer's common block, its field alone: read
	// directly; anything else (or a bad one, for its error) is walked.
	if len(props) >= 4 && len(props) <= 2+2*9 && props[0] == PropsVersion && props[1] == propProducer {
		r := propsReader{b: props, pos: 2}
		i, ok1 := r.uvarint(math.MaxInt64)
		if ok1 && i != 0 {
			if s, ok2 := r.uvarint(math.MaxInt64); ok2 && r.pos == len(props) {
				return int64(i), int64(s), true, true, nil
			}
		}
	}
	id, seq, ok, err = ProducerOf(props)
	return id, seq, ok, false, err
}

// DecodeProperties sets m's Key, Timestamp, Tags and Headers from a
// properties block (the bytes after its length prefix). Key and header
// values alias block; tags and header keys are copied into strings.
func DecodeProperties(block []byte, m *Message) error {
	var key []byte
	var ts int64
	var hasTS bool
	var tags []string
	var hdrs Headers
	var pid, pseq int64
	err := WalkProperties(block, &PropsVisitor{
		Key:       func(k []byte) { key = k },
		Timestamp: func(ms int64) { ts, hasTS = ms, true },
		Tag:       func(t []byte) { tags = append(tags, string(t)) },
		Header: func(k, v []byte, null bool) {
			if null {
				v = nil
			}
			hdrs = append(hdrs, Header{Key: string(k), Value: v})
		},
		Producer: func(id, seq int64) { pid, pseq = id, seq },
	})
	if err != nil {
		return err
	}
	m.Key, m.Tags, m.Headers = key, tags, hdrs
	m.ProducerID, m.ProducerSeq = pid, pseq
	m.Timestamp = time.Time{}
	if hasTS {
		m.Timestamp = time.UnixMilli(ts)
	}
	return nil
}

// splitProps splits data (after the attribute, if any) into the
// properties block (after its length prefix) and the payload.
func splitProps(data []byte) (block, payload []byte, err error) {
	if len(data) < 4 {
		return nil, nil, fmt.Errorf("%w: no length", ErrBadProperties)
	}
	n := binary.BigEndian.Uint32(data)
	if uint64(n) > uint64(len(data)-4) {
		return nil, nil, fmt.Errorf("%w: length %d, %d bytes left", ErrBadProperties, n, len(data)-4)
	}
	return data[4 : 4+n : 4+n], data[4+n:], nil
}
