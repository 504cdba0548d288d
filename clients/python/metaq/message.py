"""Messages, the properties block and records, byte for byte as sdk/message
encodes them (docs/protocol.md, "Properties" and "Records")."""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import CorruptRecordError, PropertiesError

FLAG_HAS_ATTRIBUTE = 1
FLAG_HAS_PROPERTIES = 2
PROPS_VERSION = 1

MAX_KEY_BYTES = 4096
MAX_HEADERS = 256
MAX_TAGS = 32
MAX_TAG_BYTES = 255
MAX_PROPERTIES_BYTES = 32 << 10

#: A record's header: [int32 len][int32 crc][int64 msgId][int32 flag].
HEADER_SIZE = 20
_HEADER = struct.Struct(">iiqi")

_P_KEY, _P_TS, _P_TAGS, _P_HEADERS, _P_PRODUCER = 1, 2, 4, 8, 16
_P_ALL = 31
_ZERO_TIME_MS = -62135596800000  # Go's time.Time{}.UnixMilli(): no timestamp

# msgId layout: ((ms - epoch) << 22) | (brokerId << 12) | seq.
ID_EPOCH_MS = 1303895660503

Bytes = Union[bytes, bytearray, memoryview]
HeaderValue = Optional[Union[str, bytes]]


def checksum(data: Bytes) -> int:
    """CRC32-IEEE of data & 0x7FFFFFFF, the put checksum and record crc."""
    return zlib.crc32(data) & 0x7FFFFFFF


def key_index(key: Union[str, bytes], n: int) -> int:
    """The hash-by-key partition index (selector.KeyIndex): 32-bit FNV-1a of
    the key modulo n, so Python and Go producers send a key to the same
    partition."""
    if isinstance(key, str):
        key = key.encode()
    h = 2166136261
    for c in key:
        h = ((h ^ c) * 16777619) & 0xFFFFFFFF
    return h % n


def cluster_partitions(counts: Mapping[int, int]) -> List[Tuple[int, int]]:
    """The partition list the Go SDK's cluster producer chooses from for a
    topic whose master on broker id ``b`` has ``counts[b]`` partitions: every
    ``(broker id, partition)``, sorted (cluster.TopicView.Partitions)."""
    return sorted((b, p) for b, n in counts.items() for p in range(n))


def key_partition(key: Union[str, bytes], partitions: Iterable[Tuple[int, int]]) -> Tuple[int, int]:
    """The ``(broker id, partition)`` the Go SDK's hash-by-key selector sends
    ``key`` to among a topic's partitions on several brokers: ``partitions``
    is every ``(broker id, partition)`` of the topic's masters (in any order;
    the Go SDK sorts them, as ZooKeeper lists them, and so does this), the
    choice ``key_index(key, len(partitions))`` of that list. With one broker
    it is ``(id, key_index(key, n))``."""
    ps = sorted(partitions)
    if not ps:
        raise ValueError("metaq: the topic has no partitions")
    return ps[key_index(key, len(ps))]


def id_parts(msg_id: int) -> Tuple[int, int, int]:
    """(unix ms, broker id, sequence) of a message id (message.IDParts)."""
    return (msg_id >> 22) + ID_EPOCH_MS, (msg_id >> 12) & 0x3FF, msg_id & 0xFFF


def _uvarint(x: int) -> bytes:
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def _as_bytes(v: Union[str, bytes, bytearray, memoryview]) -> bytes:
    return v.encode() if isinstance(v, str) else bytes(v)


@dataclass
class Message:
    """A message to send, or one fetched.

    ``value`` is the payload. ``key`` None means no key (an empty key is
    ``b""``); ``timestamp`` is the create time in Unix milliseconds or None;
    ``headers`` is an ordered list of (key, value) pairs where a value of
    None is a null value; ``attribute`` is MetaQ's string attribute (flag
    bit 0). ``id``, ``partition`` and ``offset`` are set by the broker."""

    value: bytes = b""
    key: Optional[bytes] = None
    headers: List[Tuple[str, Optional[bytes]]] = field(default_factory=list)
    tags: List[str] = field(default_factory=list)
    timestamp: Optional[int] = None
    attribute: Optional[str] = None
    topic: str = ""
    partition: int = -1
    offset: int = -1
    id: int = -1
    #: The record's end: the offset to fetch (and commit) after this one.
    next_offset: int = -1

    def header(self, key: str) -> Optional[bytes]:
        """The value of the last header named key (None when absent or
        null)."""
        for k, v in reversed(self.headers):
            if k == key:
                return v
        return None

    def has_properties(self) -> bool:
        return self.key is not None or self.timestamp is not None or bool(self.tags) or bool(self.headers)

    @property
    def flag(self) -> int:
        f = FLAG_HAS_ATTRIBUTE if self.attribute is not None else 0
        if self.has_properties():
            f |= FLAG_HAS_PROPERTIES
        return f

    def time_ms(self) -> int:
        """The create timestamp, else the millisecond in the id (the
        append), else 0."""
        if self.timestamp is not None:
            return self.timestamp
        return id_parts(self.id)[0] if self.id > 0 else 0


def make_message(value: Union[str, Bytes] = b"", *, key: Optional[Union[str, Bytes]] = None,
                 headers: Optional[Sequence[Tuple[str, HeaderValue]]] = None,
                 tags: Optional[Sequence[str]] = None, timestamp: Optional[int] = None,
                 attribute: Optional[str] = None) -> Message:
    """A Message from convenient types: str values and keys are UTF-8; a
    headers dict or list of pairs may hold str, bytes or None values."""
    hs: List[Tuple[str, Optional[bytes]]] = []
    if headers:
        items = headers.items() if isinstance(headers, dict) else headers
        for k, v in items:
            hs.append((k, None if v is None else _as_bytes(v)))
    return Message(value=_as_bytes(value), key=None if key is None else _as_bytes(key), headers=hs,
                   tags=list(tags or ()), timestamp=timestamp, attribute=attribute)


def _check_tag(t: bytes) -> None:
    if not t:
        raise PropertiesError("message: bad properties: empty tag")
    if len(t) > MAX_TAG_BYTES:
        raise PropertiesError(f"message: properties over limit: tag length of {len(t)} over the limit of {MAX_TAG_BYTES}")
    try:
        s = t.decode("utf-8")
    except UnicodeDecodeError:
        raise PropertiesError("message: bad properties: tag is not UTF-8") from None
    for ch in s:
        r = ord(ch)
        if r <= 0x20 or r == 0x7F or 0x80 <= r <= 0x9F:
            raise PropertiesError(f"message: bad properties: tag {s!r} holds a space or control character")


def encode_properties(m: Message) -> bytes:
    """m's properties block with its int32 length prefix, b"" when m has
    none; checked against the limits first (CheckProperties)."""
    if not m.has_properties():
        return b""
    fields = 0
    parts: List[bytes] = []
    if m.key is not None:
        if len(m.key) > MAX_KEY_BYTES:
            raise PropertiesError(f"message: properties over limit: key of {len(m.key)} over the limit of {MAX_KEY_BYTES}")
        fields |= _P_KEY
        parts += [_uvarint(len(m.key)), bytes(m.key)]
    if m.timestamp is not None:
        if m.timestamp == _ZERO_TIME_MS:
            raise PropertiesError("message: bad properties: timestamp within a millisecond of the zero time")
        fields |= _P_TS
        parts.append(struct.pack(">q", m.timestamp))
    if m.tags:
        if len(m.tags) > MAX_TAGS:
            raise PropertiesError(f"message: properties over limit: tag count of {len(m.tags)} over the limit of {MAX_TAGS}")
        fields |= _P_TAGS
        parts.append(_uvarint(len(m.tags)))
        for t in m.tags:
            tb = t.encode("utf-8")
            _check_tag(tb)
            parts += [_uvarint(len(tb)), tb]
    if m.headers:
        if len(m.headers) > MAX_HEADERS:
            raise PropertiesError(f"message: properties over limit: header count of {len(m.headers)} over the limit of {MAX_HEADERS}")
        fields |= _P_HEADERS
        parts.append(_uvarint(len(m.headers)))
        for k, v in m.headers:
            try:
                kb = k.encode("utf-8")
            except UnicodeEncodeError:
                raise PropertiesError(f"message: bad properties: header key {k!r} is not UTF-8") from None
            parts += [_uvarint(len(kb)), kb]
            if v is None:
                parts.append(b"\x00")
            else:
                parts += [_uvarint(len(v) + 1), bytes(v)]
    body = bytes((PROPS_VERSION, fields)) + b"".join(parts)
    if len(body) > MAX_PROPERTIES_BYTES:
        raise PropertiesError(f"message: properties over limit: properties (key, tags and headers) of {len(body)} over the limit of {MAX_PROPERTIES_BYTES}")
    return struct.pack(">I", len(body)) + body


def encode_data(m: Message) -> bytes:
    """The put body of m: attribute prefix, properties block, payload
    (message.AppendData)."""
    if m.attribute is None and not m.has_properties():
        return m.value if isinstance(m.value, bytes) else bytes(m.value)
    prefix = b""
    if m.attribute is not None:
        a = m.attribute.encode("utf-8")
        prefix = struct.pack(">I", len(a)) + a
    props = encode_properties(m)
    if not prefix and not props:
        return bytes(m.value)
    return prefix + props + bytes(m.value)


class _Reader:
    __slots__ = ("b", "pos")

    def __init__(self, b: bytes) -> None:
        self.b, self.pos = b, 0

    def bad(self, what: str) -> PropertiesError:
        return PropertiesError(f"message: bad properties: {what} at byte {self.pos}")

    def uvarint(self, what: str, limit: int = 1 << 31) -> int:
        x, shift, start = 0, 0, self.pos
        while True:
            if self.pos >= len(self.b) or shift > 63:
                raise self.bad(what)
            c = self.b[self.pos]
            self.pos += 1
            x |= (c & 0x7F) << shift
            if c < 0x80:
                break
            shift += 7
        if self.pos - start != len(_uvarint(x)) or x > limit:  # shortest form only
            self.pos = start
            raise self.bad(what)
        return x

    def take(self, n: int, what: str) -> bytes:
        if n > len(self.b) - self.pos:
            raise self.bad(what)
        s = self.b[self.pos:self.pos + n]
        self.pos += n
        return s


def decode_properties(block: bytes, m: Message) -> None:
    """Read a properties block (after its length prefix) into m, checking
    it as the broker does (ValidateProperties)."""
    if len(block) > MAX_PROPERTIES_BYTES:
        raise PropertiesError(f"message: properties over limit: properties (key, tags and headers) of {len(block)} over the limit of {MAX_PROPERTIES_BYTES}")
    if len(block) < 2:
        raise PropertiesError(f"message: bad properties: block of {len(block)} bytes")
    if block[0] != PROPS_VERSION:
        raise PropertiesError(f"message: bad properties: version {block[0]}")
    fields = block[1]
    if fields & ~_P_ALL or fields == 0:
        raise PropertiesError(f"message: bad properties: fields 0x{fields:02x}")
    r = _Reader(block)
    r.pos = 2
    if fields & _P_KEY:
        n = r.uvarint("key length")
        if n > MAX_KEY_BYTES:
            raise PropertiesError(f"message: properties over limit: key of {n} over the limit of {MAX_KEY_BYTES}")
        m.key = r.take(n, "short key")
    if fields & _P_TS:
        (ts,) = struct.unpack(">q", r.take(8, "short timestamp"))
        if ts == _ZERO_TIME_MS:
            raise r.bad("timestamp of the zero time")
        m.timestamp = ts
    if fields & _P_TAGS:
        c = r.uvarint("tag count")
        if c == 0:
            raise r.bad("tag count")
        if c > MAX_TAGS:
            raise PropertiesError(f"message: properties over limit: tag count of {c} over the limit of {MAX_TAGS}")
        for _ in range(c):
            t = r.take(r.uvarint("tag length"), "short tag")
            _check_tag(t)
            m.tags.append(t.decode("utf-8"))
    if fields & _P_HEADERS:
        c = r.uvarint("header count")
        if c == 0:
            raise r.bad("header count")
        if c > MAX_HEADERS:
            raise PropertiesError(f"message: properties over limit: header count of {c} over the limit of {MAX_HEADERS}")
        for _ in range(c):
            kb = r.take(r.uvarint("header key length"), "short header key")
            try:
                k = kb.decode("utf-8")
            except UnicodeDecodeError:
                raise r.bad("header key not UTF-8") from None
            vn = r.uvarint("header value length")
            m.headers.append((k, None if vn == 0 else r.take(vn - 1, "short header value")))
    if fields & _P_PRODUCER:
        # The Go SDK's idempotent producer id and sequence (docs/protocol.md,
        # "Idempotent producer"): checked and read past.
        if r.uvarint("producer id", (1 << 63) - 1) == 0:
            raise r.bad("producer id")
        r.uvarint("producer sequence", (1 << 63) - 1)
    if r.pos != len(block):
        raise r.bad("trailing bytes")


def decode_data(flag: int, data: bytes, m: Message) -> None:
    """Split a record's data into m's attribute, properties and value."""
    pos = 0
    if flag & FLAG_HAS_ATTRIBUTE:
        if len(data) < 4:
            raise PropertiesError("message: attribute length past the data")
        (n,) = struct.unpack_from(">I", data, 0)
        if n > len(data) - 4:
            raise PropertiesError("message: attribute past the data")
        m.attribute = data[4:4 + n].decode("utf-8", "replace")
        pos = 4 + n
    if flag & FLAG_HAS_PROPERTIES:
        if len(data) - pos < 4:
            raise PropertiesError("message: bad properties: length past the data")
        (n,) = struct.unpack_from(">I", data, pos)
        if n > len(data) - pos - 4:
            raise PropertiesError("message: bad properties: block past the data")
        decode_properties(data[pos + 4:pos + 4 + n], m)
        pos += 4 + n
    m.value = data[pos:] if pos else data


@dataclass
class Record:
    """One stored record: [len][crc][msgId][flag][data]."""

    offset: int
    id: int
    flag: int
    crc: int
    data: bytes

    @property
    def size(self) -> int:
        return HEADER_SIZE + len(self.data)


def encode_record(msg_id: int, flag: int, data: bytes) -> bytes:
    return _HEADER.pack(len(data), checksum(data), msg_id, flag) + data


def iter_records(buf: Bytes, base: int) -> Iterator[Record]:
    """The whole records at the start of buf (a get reply read at offset
    base); a partial record at the end is left out. Raises
    CorruptRecordError (a MetaqError) for a negative length."""
    mv = memoryview(buf)
    pos, n = 0, len(buf)
    while n - pos >= HEADER_SIZE:
        ln, crc, mid, flag = _HEADER.unpack_from(mv, pos)
        if ln < 0:
            raise CorruptRecordError(f"metaq: record at {base + pos}: negative length {ln}")
        if n - pos - HEADER_SIZE < ln:
            return
        data = bytes(mv[pos + HEADER_SIZE:pos + HEADER_SIZE + ln])
        yield Record(base + pos, mid, flag, crc, data)
        pos += HEADER_SIZE + ln


def record_message(r: Record, topic: str, partition: int) -> Message:
    """The Message of a fetched record."""
    m = Message(topic=topic, partition=partition, offset=r.offset, id=r.id, next_offset=r.offset + r.size)
    decode_data(r.flag, r.data, m)
    return m
