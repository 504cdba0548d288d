// Package message holds the value types and the on-disk record format shared
// by the broker (core) and the client (sdk). It imports only the standard
// library.
//
// A record, as stored in a segment file and as sent in a `value` reply, is
//
//	[int32 BE len][int32 BE crc(data)][int64 BE msgId][int32 BE flag][data: len bytes]
//
// where data is the put body and crc(x) = CRC32-IEEE(x) & 0x7FFFFFFF.
// The put body is the payload, preceded by [int32 BE attrLen][attr] when
// bit 0 of flag is set, and by a properties block (props.go) after the
// attribute when bit 1 is set.
package message

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"
	"unicode/utf8"
)

// HeaderSize is the size in bytes of a record header.
const HeaderSize = 20

// FlagHasAttribute is flag bit 0: the data starts with a length-prefixed attribute.
const FlagHasAttribute int32 = 1

// DefaultMaxMessageSize is the default largest data length in bytes (MetaQ's
// clients refuse records over 2 MiB).
const DefaultMaxMessageSize = 2 << 20

// NoChecksum is the checksum token value that tells the broker to skip the check.
const NoChecksum int64 = -1

var (
	// ErrShortRecord means the buffer ends inside a record: more bytes are
	// needed. It is the normal end of a get reply that stops mid-record.
	ErrShortRecord = errors.New("message: partial record")
	// ErrCorruptRecord means a record has a negative length or a checksum
	// mismatch: the bytes are not a valid record at this position.
	ErrCorruptRecord = errors.New("message: corrupt record")
	// ErrBadAttribute means a body flagged with an attribute is too short
	// for the attribute length it declares, or the attribute is not UTF-8.
	ErrBadAttribute = errors.New("message: bad attribute")
)

var table = crc32.MakeTable(crc32.IEEE)

// Checksum returns MetaQ's checksum of b: CRC32-IEEE masked to 31 bits.
func Checksum(b []byte) uint32 {
	return crc32.Checksum(b, table) & 0x7FFFFFFF
}

// Message is a message as a producer sends it and a consumer receives it.
type Message struct {
	Topic string
	// Body is the payload.
	Body []byte
	// Attribute is an optional string carried with the message (MetaQ's
	// attribute); the broker's filters may read it. HasAttribute tells an
	// empty attribute from none.
	Attribute    string
	HasAttribute bool
	// Key is the message's key: the default selector hashes it to choose
	// a partition, and it is stored with the message (in its properties
	// block, flag bit 1). nil is no key; an empty non-nil Key is an empty
	// key and is sent (as Kafka tells a null key from an empty one).
	Key []byte
	// Headers are ordered key/value pairs carried with the message.
	Headers Headers
	// Tags are short labels (no spaces or control characters).
	Tags []string
	// Timestamp is the create time the producer gives (sent in
	// milliseconds); zero sends none. On a received message it is the time
	// sent, or zero: Time() then falls back to the id's millisecond.
	Timestamp time.Time
	// ProducerID and ProducerSeq are the idempotent producer's id and this
	// message's sequence in its partition (properties field bit 4): a
	// Client with Idempotence on (the default) sets them when it binds the
	// message to a partition, overwriting what the caller set; 0 is none.
	// The broker stores a message whose (ProducerID, ProducerSeq) it
	// already holds only once (docs/protocol.md, "Idempotent producer").
	ProducerID  int64
	ProducerSeq int64
	// DeliverAt, when set, asks the broker to hold the message and append
	// it to its partition at that time; Delay, when positive, after that
	// long from its acceptance (docs/delayed.md). They are sent as the
	// reserved headers metaq-deliver-at and metaq-delay; at most one may be
	// set. A delayed message is sent alone, without the idempotent
	// producer's id and sequence.
	DeliverAt time.Time
	Delay     time.Duration

	// Set by the broker.
	ID        int64
	Partition int32
	// Offset is the byte offset of the record's start in its partition.
	Offset int64
	// BrokerID is the broker the message was read from, set by a Client
	// consuming through ZooKeeper (whose partitions span brokers); 0
	// otherwise and
	// for messages replayed from the local recovery store.
	BrokerID int
}

// Flag returns the wire flag for m.
func (m *Message) Flag() int32 {
	var f int32
	if m.HasAttribute {
		f = FlagHasAttribute
	}
	if m.HasProperties() {
		f |= FlagHasProperties
	}
	return f
}

// DataLen returns the length of the put body for m.
func (m *Message) DataLen() int {
	n := len(m.Body)
	if m.HasAttribute {
		n += 4 + len(m.Attribute)
	}
	if m.producerOnly() {
		return n + 4 + producerBlockLen(m.ProducerID, m.ProducerSeq)
	}
	if m.HasProperties() {
		n += 4 + m.propsLen()
	}
	return n
}

// producerBlockLen is the length of a properties block (after its length
// prefix) holding only the idempotent producer's field.
func producerBlockLen(id, seq int64) int {
	return 2 + uvarintLen(uint64(id)) + uvarintLen(uint64(seq))
}

// AppendData appends m's put body (attribute prefix, properties block and
// payload) to dst.
func (m *Message) AppendData(dst []byte) []byte {
	return append(m.AppendPrefix(dst), m.Body...)
}

// AppendPrefix appends what AppendData puts before the payload: the
// attribute prefix and the properties block (nothing for a message with
// neither).
func (m *Message) AppendPrefix(dst []byte) []byte {
	if m.HasAttribute {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.Attribute)))
		dst = append(dst, m.Attribute...)
	}
	if m.producerOnly() { // the idempotent producer's common block, written directly
		dst = binary.BigEndian.AppendUint32(dst, uint32(producerBlockLen(m.ProducerID, m.ProducerSeq)))
		dst = append(dst, PropsVersion, propProducer)
		dst = binary.AppendUvarint(dst, uint64(m.ProducerID))
		return binary.AppendUvarint(dst, uint64(m.ProducerSeq))
	}
	if m.HasProperties() {
		dst = m.appendProps(dst, m.propsLen())
	}
	return dst
}

// producerOnly reports whether m's properties block holds the idempotent
// producer's field alone.
func (m *Message) producerOnly() bool {
	return m.ProducerID != 0 && m.Key == nil && m.Timestamp.IsZero() && len(m.Tags) == 0 && len(m.Headers) == 0 &&
		!m.Delayed()
}

// SplitData splits a put body into attribute and payload according to flag,
// checking the properties block (flag bit 1) if there is one: against its
// format and limits (ValidateProperties), without allocating beyond the
// attribute string. The returned payload aliases data and excludes the
// block.
func SplitData(flag int32, data []byte) (attr string, hasAttr bool, payload []byte, err error) {
	a, hasAttr, _, payload, err := SplitDataProps(flag, data)
	if err != nil {
		return "", false, nil, err
	}
	if hasAttr {
		attr = string(a)
	}
	return attr, hasAttr, payload, nil
}

// SplitDataProps splits a put body into attribute, properties block (the
// bytes after its length prefix, nil without flag bit 1) and payload, all
// aliasing data. It checks the attribute is UTF-8 and the block is valid
// (ValidateProperties); other flag bits are ignored.
func SplitDataProps(flag int32, data []byte) (attr []byte, hasAttr bool, props, payload []byte, err error) {
	return splitData(flag, data, true)
}

// splitData is SplitDataProps, checking the properties block only when
// validate is set (Record.Message leaves it to DecodeProperties, which
// checks it as it decodes: one walk of the block, not two).
func splitData(flag int32, data []byte, validate bool) (attr []byte, hasAttr bool, props, payload []byte, err error) {
	payload = data
	if flag&FlagHasAttribute != 0 {
		if len(data) < 4 {
			return nil, false, nil, nil, ErrBadAttribute
		}
		n := binary.BigEndian.Uint32(data)
		if uint64(n) > uint64(len(data)-4) {
			return nil, false, nil, nil, ErrBadAttribute
		}
		attr = data[4 : 4+n]
		if !utf8.Valid(attr) {
			return nil, false, nil, nil, ErrBadAttribute
		}
		hasAttr = true
		payload = data[4+n:]
	}
	if flag&FlagHasProperties != 0 {
		if props, payload, err = splitProps(payload); err != nil {
			return nil, false, nil, nil, err
		}
		if validate {
			if err = ValidateProperties(props); err != nil {
				return nil, false, nil, nil, err
			}
		}
	}
	return attr, hasAttr, props, payload, nil
}

// Record is one decoded record. Data aliases the buffer it was parsed from.
type Record struct {
	// Offset is the record's absolute start offset, when known.
	Offset int64
	ID     int64
	Flag   int32
	CRC    uint32
	Data   []byte
}

// Size returns the encoded size of the record.
func (r *Record) Size() int { return HeaderSize + len(r.Data) }

// Message converts the record into a Message of topic and partition.
// Body aliases r.Data.
func (r *Record) Message(topic string, partition int32) (Message, error) {
	a, has, props, body, err := splitData(r.Flag, r.Data, false)
	if err != nil {
		return Message{}, err
	}
	m := Message{Topic: topic, Body: body, HasAttribute: has,
		ID: r.ID, Partition: partition, Offset: r.Offset}
	if has {
		m.Attribute = string(a)
	}
	if props != nil {
		if err := DecodeProperties(props, &m); err != nil {
			return Message{}, err
		}
	}
	return m, nil
}

// AppendRecord appends one encoded record to dst.
func AppendRecord(dst []byte, id int64, flag int32, data []byte) []byte {
	return AppendRecordCRC(dst, id, flag, Checksum(data), data)
}

// AppendRecordCRC is AppendRecord with a checksum the caller already has.
func AppendRecordCRC(dst []byte, id int64, flag int32, crc uint32, data []byte) []byte {
	var h [HeaderSize]byte
	PutHeader(h[:], len(data), crc, id, flag)
	dst = append(dst, h[:]...)
	return append(dst, data...)
}

// PutHeader writes a record header into h, which must be HeaderSize long.
func PutHeader(h []byte, dataLen int, crc uint32, id int64, flag int32) {
	binary.BigEndian.PutUint32(h[0:], uint32(dataLen))
	binary.BigEndian.PutUint32(h[4:], crc)
	binary.BigEndian.PutUint64(h[8:], uint64(id))
	binary.BigEndian.PutUint32(h[16:], uint32(flag))
}

// ParseRecord decodes the record at the start of b and returns it with its
// encoded size. It returns ErrShortRecord when b ends inside the record (or
// its header) and ErrCorruptRecord when the length is negative or larger
// than maxLen (if maxLen > 0), or the checksum does not match.
func ParseRecord(b []byte, maxLen int) (Record, int, error) {
	if len(b) < HeaderSize {
		return Record{}, 0, ErrShortRecord
	}
	l := int32(binary.BigEndian.Uint32(b))
	if l < 0 || (maxLen > 0 && int(l) > maxLen) {
		return Record{}, 0, fmt.Errorf("%w: length %d", ErrCorruptRecord, l)
	}
	n := HeaderSize + int(l)
	if len(b) < n {
		return Record{}, 0, ErrShortRecord
	}
	r := Record{
		CRC:  binary.BigEndian.Uint32(b[4:]),
		ID:   int64(binary.BigEndian.Uint64(b[8:])),
		Flag: int32(binary.BigEndian.Uint32(b[16:])),
		Data: b[HeaderSize:n:n],
	}
	if c := Checksum(r.Data); c != r.CRC {
		return Record{}, 0, fmt.Errorf("%w: checksum %d, want %d", ErrCorruptRecord, c, r.CRC)
	}
	return r, n, nil
}

// Iterator walks the records of a get reply (or any run of records) that
// starts at absolute offset base. A trailing partial record ends the walk
// without an error; a corrupt record stops it with ErrCorruptRecord.
type Iterator struct {
	buf    []byte
	base   int64
	pos    int
	maxLen int
	err    error
	rec    Record
}

// NewIterator returns an iterator over buf, whose first byte is at offset base.
// maxLen bounds a record's data length (0: no bound beyond the buffer).
func NewIterator(buf []byte, base int64, maxLen int) *Iterator {
	return &Iterator{buf: buf, base: base, maxLen: maxLen}
}

// Next advances to the next whole record and reports whether there is one.
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	r, n, err := ParseRecord(it.buf[it.pos:], it.maxLen)
	if err != nil {
		if !errors.Is(err, ErrShortRecord) {
			it.err = err
		}
		return false
	}
	r.Offset = it.base + int64(it.pos)
	it.rec = r
	it.pos += n
	return true
}

// Record returns the current record; its Data aliases the buffer.
func (it *Iterator) Record() *Record { return &it.rec }

// Consumed returns how many bytes of whole records have been walked.
func (it *Iterator) Consumed() int { return it.pos }

// NextOffset returns the offset after the last whole record walked.
func (it *Iterator) NextOffset() int64 { return it.base + int64(it.pos) }

// Err returns ErrCorruptRecord (wrapped) if the walk stopped at a bad record.
func (it *Iterator) Err() error { return it.err }

// ID helpers: MetaQ ids are ((ms - Epoch) << 22) | (brokerID << 12) | seq.

// IDEpoch is MetaQ's id epoch in Unix milliseconds.
const IDEpoch int64 = 1303895660503

// IDParts splits a message id into its Unix millisecond time, broker id and sequence.
func IDParts(id int64) (unixMs int64, brokerID int, seq int) {
	return (id >> 22) + IDEpoch, int(id>>12) & 0x3FF, int(id & 0xFFF)
}
