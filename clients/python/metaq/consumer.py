"""The consumer: direct partition reads, group membership in direct mode
(join, heartbeat, commit, fetch), iteration with commits."""

from __future__ import annotations

import collections
import os
import socket
import struct
import threading
import time
from concurrent.futures import Future
from typing import Deque, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from .conn import Connection, Reply, wait
from .errors import (NOT_FOUND, OK, MOVED, BrokerError, ChecksumError, ClosedError, ConflictError,
                     ConnectionLostError, MetaqError, ProtocolError, RequestTimeoutError, broker_error)
from .message import HEADER_SIZE, Message, checksum, iter_records, record_message

#: get with this offset answers 301 with the partition's maximum.
NEWEST = 9223372036854775807
#: The largest get a consumer grows to for one record bigger than max_size.
MAX_FETCH_SIZE = 64 << 20
#: How long a join keeps retrying 409 (our id still registered on an old
#: connection) before giving up: longer than the broker's session timeout.
JOIN_CONFLICT_GRACE = 10.0


class FetchResult:
    """What one get returned: the whole messages, the offset to read next,
    and whether the broker moved the read (301)."""

    __slots__ = ("messages", "next_offset", "moved")

    def __init__(self, messages: List[Message], next_offset: int, moved: bool = False) -> None:
        self.messages, self.next_offset, self.moved = messages, next_offset, moved


def get_frame(topic: str, group: str, partition: int, offset: int, max_size: int, op: int) -> bytes:
    return b"get %s %s %d %d %d %d\r\n" % (topic.encode(), group.encode(), partition, offset, max_size, op)


def parse_get_reply(rep: Reply, topic: str, partition: int, offset: int) -> Optional[FetchResult]:
    """The messages of a get reply read at offset. None means the reply held
    only part of one record (the record is larger than the get's maxSize):
    read again with a larger one. A partial record after whole ones is
    ignored; the next read starts at it."""
    if rep.code == MOVED:
        return FetchResult([], int(rep.body.strip()), True)
    if rep.code == NOT_FOUND:
        return FetchResult([], offset)
    if rep.code != OK:
        raise broker_error(rep.code, rep.body, "get")
    msgs: List[Message] = []
    if rep.kind == "fvalue":
        b, pos = rep.body, 0
        while len(b) - pos >= 8 + HEADER_SIZE:
            (off,) = struct.unpack_from(">q", b, pos)
            recs = iter_records(memoryview(b)[pos + 8:], off)
            r = next(recs, None)
            if r is None:
                break
            _check(r.crc, r.data, topic, partition, off)
            msgs.append(record_message(r, topic, partition))
            pos += 8 + r.size
        if not msgs and rep.body:
            return None
        return FetchResult(msgs, rep.next_offset)
    nxt = offset
    for r in iter_records(rep.body, offset):
        _check(r.crc, r.data, topic, partition, r.offset)
        msgs.append(record_message(r, topic, partition))
        nxt = r.offset + r.size
    if not msgs and rep.body:
        return None
    return FetchResult(msgs, nxt)


def _check(crc: int, data: bytes, topic: str, partition: int, offset: int) -> None:
    if checksum(data) != crc & 0x7FFFFFFF:
        raise ChecksumError(topic, partition, offset)


class _Part:
    __slots__ = ("p", "fetch", "done", "done_id", "committed", "buf", "delivered", "max_size")

    def __init__(self, p: int, offset: int, max_size: int) -> None:
        self.p = p
        self.fetch = offset      # the next get's offset
        self.done = offset       # the end of the last message processed
        self.done_id = -1
        self.committed = offset  # what the broker has for the group
        self.buf: Deque[Message] = collections.deque()
        self.delivered: Optional[Tuple[int, int]] = None  # (end, id) of the last handed out
        self.max_size = max_size


def _default_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{int(time.time() * 1000) % 100000000}"


class Consumer:
    """Reads a topic, alone or as a member of a consumer group.

    - ``partitions`` given: direct reads of those partitions (with a
      ``group``, from the group's committed offsets, committing as it goes).
    - ``group`` without ``partitions``: a member of the group in direct
      mode: the broker assigns the partitions (join, heartbeat every
      ``heartbeat_interval`` seconds on a background thread, two-phase
      handover: a revoked partition is committed before it is given up).
    - neither: every partition of the topic, without commits.

    ``start`` is where a partition without a committed offset begins:
    "earliest", "latest" or an offset. Iterate the consumer (or call
    :meth:`poll`): a message counts as processed when the next one is asked
    for, and the positions of processed messages are committed every
    ``commit_interval`` seconds (from the iterating thread), when a
    partition is revoked, and at :meth:`close`: at least once."""

    def __init__(self, conn: Union[Connection, str], topic: str, *, group: Optional[str] = None,
                 partitions: Optional[Sequence[int]] = None, start: Union[str, int] = "earliest",
                 max_size: int = 1 << 20, auto_commit: bool = True, commit_interval: float = 5.0,
                 poll_interval: float = 0.1, consumer_id: Optional[str] = None, strategy: str = "default",
                 heartbeat_interval: float = 1.0, **conn_args: object) -> None:
        self.conn = conn if isinstance(conn, Connection) else Connection(conn, **conn_args)  # type: ignore[arg-type]
        self._own_conn = not isinstance(conn, Connection)
        self.topic = topic
        self.group = group
        self.start = start
        self.max_size = max_size
        self.auto_commit = auto_commit and group is not None
        self.commit_interval = commit_interval
        self.poll_interval = poll_interval
        self.consumer_id = consumer_id or _default_id()
        self.strategy = strategy
        self.heartbeat_interval = heartbeat_interval
        self._mu = threading.RLock()
        self._parts: Dict[int, _Part] = {}
        self._rr = 0
        self._last_commit = time.monotonic()
        self._closed = False
        self._error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.generation = -1
        self._joined_conn = -1
        self._assigned = threading.Event()
        self.group_mode = group is not None and partitions is None
        if self.group_mode:
            self._thread = threading.Thread(target=self._group_loop, name="metaq-group", daemon=True)
            self._thread.start()
        else:
            ps = list(partitions) if partitions is not None else list(range(self._partition_count()))
            self._add(ps)

    # -- positions ---------------------------------------------------------

    def _partition_count(self) -> int:
        from .producer import parse_stats_topics
        n = parse_stats_topics(self.conn.stats("topics")).get(self.topic)
        if not n:
            raise MetaqError(f"metaq: topic {self.topic!r} is not listed by the broker at {self.conn.address}")
        return n

    def fetch_offsets(self, partitions: Sequence[int]) -> Dict[int, Tuple[int, int]]:
        """The group's committed (offset, msgId) of partitions; -1 when none."""
        if self.group is None or not partitions:
            return {p: (-1, -1) for p in partitions}
        body = b"".join(b"%s %d\r\n" % (self.topic.encode(), p) for p in partitions)
        rep = self.conn.call_ok(lambda op: b"fetch %s %d %d\r\n" % (self.group.encode(), len(body), op) + body,
                                "fetch")
        out: Dict[int, Tuple[int, int]] = {}
        for line in rep.text().splitlines():
            f = line.split()
            if len(f) == 4 and f[0] == self.topic:
                out[int(f[1])] = (int(f[2]), int(f[3]))
        return out

    def nearest_offset(self, partition: int, offset: int) -> int:
        """`offset`: the valid offset nearest to offset (the minimum below
        it, the maximum at or past it)."""
        g = (self.group or "metaq-py").encode()
        rep = self.conn.call_ok(lambda op: b"offset %s %s %d %d %d\r\n" % (
            self.topic.encode(), g, partition, offset, op), "offset")
        return int(rep.body.strip())

    def _start_offset(self, p: int, stored: Tuple[int, int]) -> int:
        if stored[0] >= 0:
            return stored[0]
        if isinstance(self.start, int):
            return self.start
        if self.start == "latest":
            return self.nearest_offset(p, NEWEST)
        if self.start == "earliest":
            return self.nearest_offset(p, 0)
        raise ValueError(f"metaq: start {self.start!r}: earliest, latest or an offset")

    def _add(self, ps: Sequence[int]) -> None:
        stored = self.fetch_offsets(ps)
        for p in ps:
            off = self._start_offset(p, stored.get(p, (-1, -1)))
            part = _Part(p, off, self.max_size)
            part.committed = stored.get(p, (-1, -1))[0]
            with self._mu:
                self._parts[p] = part

    def seek(self, partition: int, offset: int) -> None:
        """Read partition from offset next (dropping what was fetched)."""
        with self._mu:
            part = self._parts.get(partition)
            if part is None:
                raise MetaqError(f"metaq: partition {partition} is not assigned to this consumer")
            part.buf.clear()
            part.fetch = part.done = offset
            part.delivered = None

    def assignment(self) -> List[int]:
        """The partitions this consumer reads now."""
        with self._mu:
            return sorted(self._parts)

    def positions(self) -> Dict[int, int]:
        """partition -> the end of the last message processed."""
        with self._mu:
            return {p: part.done for p, part in self._parts.items()}

    # -- commits -----------------------------------------------------------

    def _settle(self) -> None:
        """The messages handed out before this call are processed."""
        with self._mu:
            for part in self._parts.values():
                _settle_part(part)

    def _commit_parts(self, parts: List[_Part]) -> None:
        todo = [pt for pt in parts if pt.done != pt.committed]
        if not todo or self.group is None:
            return
        snap = [(pt, pt.done, pt.done_id) for pt in todo]
        body = b"".join(b"%s %d %d %d\r\n" % (self.topic.encode(), pt.p, off, mid) for pt, off, mid in snap)
        g = self.group.encode()
        self.conn.call_ok(lambda op: b"commit %s %d %d\r\n" % (g, len(body), op) + body, "commit")
        for pt, off, _ in snap:
            pt.committed = off

    def commit(self) -> None:
        """Commit the positions of every message handed out so far
        (including the one being processed)."""
        with self._mu:
            for part in self._parts.values():
                _settle_part(part)
            parts = list(self._parts.values())
        self._commit_parts(parts)
        self._last_commit = time.monotonic()

    def _maybe_commit(self) -> None:
        if self.auto_commit and time.monotonic() - self._last_commit >= self.commit_interval:
            with self._mu:
                parts = list(self._parts.values())
            try:
                self._commit_parts(parts)
            except (ConnectionLostError, BrokerError, RequestTimeoutError):
                pass  # kept; committed again at the next interval or close
            self._last_commit = time.monotonic()

    # -- reading -----------------------------------------------------------

    def read(self, partition: int, offset: int, max_size: Optional[int] = None) -> FetchResult:
        """One get of partition at offset, without changing any position: a
        direct partition read. A record larger than max_size makes it
        double the size and read again (up to MAX_FETCH_SIZE)."""
        size = max_size or self.max_size
        g = (self.group or "metaq-py")
        while True:
            rep = self.conn.call(lambda op: get_frame(self.topic, g, partition, offset, size, op), "get")
            res = parse_get_reply(rep, self.topic, partition, offset)
            if res is not None:
                return res
            if size >= MAX_FETCH_SIZE:
                raise MetaqError(f"metaq: record at {self.topic}-{partition}@{offset} is larger than {MAX_FETCH_SIZE}")
            size = min(size * 2, MAX_FETCH_SIZE)

    def _fetch_round(self) -> bool:
        """One pipelined get per assigned partition with nothing buffered;
        True when something was buffered."""
        with self._mu:
            if not self._parts:
                return False  # nothing assigned (yet): wait
            parts = [pt for pt in self._parts.values() if not pt.buf]
        if not parts:
            return True
        g = (self.group or "metaq-py")
        sent: List[Tuple[_Part, int, int, Future]] = []
        for pt in parts:
            off, size = pt.fetch, pt.max_size
            try:
                fut = self.conn.send(lambda op, pt=pt, off=off, size=size: get_frame(
                    self.topic, g, pt.p, off, size, op), "get")
            except ConnectionLostError:
                return False
            sent.append((pt, off, size, fut))
        got = False
        for pt, off, size, fut in sent:
            try:
                rep = wait(fut, self.conn.request_timeout, "get")
            except ConnectionLostError:
                continue
            res = parse_get_reply(rep, self.topic, pt.p, off)
            with self._mu:
                if self._parts.get(pt.p) is not pt or pt.fetch != off:
                    continue  # revoked or moved meanwhile
                if res is None:
                    if size >= MAX_FETCH_SIZE:
                        raise MetaqError(f"metaq: record at {self.topic}-{pt.p}@{off} is larger than {MAX_FETCH_SIZE}")
                    pt.max_size = min(size * 2, MAX_FETCH_SIZE)
                    got = True
                    continue
                pt.max_size = self.max_size if size > self.max_size and res.messages else pt.max_size
                if res.moved:
                    pt.fetch = res.next_offset
                    if not pt.delivered and not pt.buf:
                        pt.done = res.next_offset
                    got = True
                    continue
                pt.fetch = res.next_offset
                if res.messages:
                    pt.buf.extend(res.messages)
                    got = True
        return got

    def _next_buffered(self) -> Optional[Message]:
        with self._mu:
            ps = sorted(self._parts)
            for i in range(len(ps)):
                pt = self._parts[ps[(self._rr + i) % len(ps)]]
                if pt.buf:
                    m = pt.buf.popleft()
                    pt.delivered = (m.next_offset, m.id)
                    if not pt.buf:
                        self._rr = (self._rr + i + 1) % len(ps)
                    return m
        return None

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise ClosedError("metaq: consumer closed")

    def next(self, timeout: Optional[float] = None) -> Optional[Message]:
        """The next message, or None when none came within timeout (None:
        wait as long as it takes)."""
        self._raise_error()
        self._settle()
        self._maybe_commit()
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            m = self._next_buffered()
            if m is not None:
                return m
            self._raise_error()
            if not self._fetch_round():
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._stop.wait(self.poll_interval if left is None else min(self.poll_interval, left))
                self._raise_error()
                self._maybe_commit()

    def poll(self, timeout: float = 0.0, max_messages: int = 1000) -> List[Message]:
        """The messages available now (waiting up to timeout for the first)."""
        m = self.next(timeout)
        out: List[Message] = []
        while m is not None:
            out.append(m)
            if len(out) >= max_messages:
                break
            m = self._next_buffered()
        return out

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            m = self.next()
            if m is not None:
                yield m

    # -- the group ---------------------------------------------------------

    def wait_assignment(self, timeout: float = 10.0) -> List[int]:
        """Wait until the group gave this member a view (possibly empty)."""
        if not self._assigned.wait(timeout):
            raise RequestTimeoutError(f"metaq: no group view within {timeout}s")
        return self.assignment()

    def _group_loop(self) -> None:
        try:
            self._group_rounds()
        except BaseException as e:  # noqa: BLE001 - any error ends the membership, visibly
            # The thread ends: whatever it was (a failed login on a
            # reconnect, the connection closed under us, a bug), the
            # partitions are no longer ours to read, and next() raises it.
            if self._error is None:
                self._error = e
            self.generation = -1
            self._release(list(self._parts))
            self._assigned.set()

    def _group_rounds(self) -> None:
        conflict_since = 0.0
        while not self._stop.is_set():
            if self._joined_conn != self.conn.generation or self.generation < 0:
                if self.generation >= 0:
                    self._release(list(self._parts))  # the broker dropped the membership with the socket
                    self.generation = -1
                try:
                    self._join()
                    conflict_since = 0.0
                    continue
                except ConflictError as e:
                    now = time.monotonic()
                    conflict_since = conflict_since or now
                    if now - conflict_since > JOIN_CONFLICT_GRACE:
                        self._error = e
                        return
                except BrokerError as e:
                    if e.code in (400, 401, 403, 500):
                        self._error = e
                        return
                except (ConnectionLostError, RequestTimeoutError, MetaqError):
                    pass
                self._stop.wait(min(self.heartbeat_interval, 0.5))
                continue
            if self._stop.wait(self.heartbeat_interval):
                return
            again = True
            try:
                while again and not self._stop.is_set():
                    again = self._heartbeat()
            except ProtocolError:
                # An unreadable reply: the connection is dropped (its
                # framing is lost), and with it the membership: give the
                # partitions up and join again, as after a lost connection.
                self._release(list(self._parts))
                self.generation = -1

    def _join(self) -> None:
        rep = self.conn.call(lambda op: b"join %s %s %s %s %d\r\n" % (
            self.group.encode(), self.topic.encode(), self.consumer_id.encode(),  # type: ignore[union-attr]
            self.strategy.encode(), op), "join")
        if rep.code != OK:
            raise broker_error(rep.code, rep.body, "join")
        gen, view = _parse_view(rep.body)
        # The membership lives on the socket that carried the join: if that
        # one is gone already, the loop sees another generation and joins
        # again.
        self._joined_conn = rep.generation
        self.generation = gen
        self._apply(view)

    def _heartbeat(self) -> bool:
        if self._joined_conn != self.conn.generation:
            return False
        try:
            rep = self.conn.call(lambda op: b"heartbeat %s %s %s %d %d\r\n" % (
                self.group.encode(), self.topic.encode(), self.consumer_id.encode(),  # type: ignore[union-attr]
                self.generation, op), "heartbeat")
        except (ConnectionLostError, RequestTimeoutError):
            return False
        if rep.code == NOT_FOUND:
            self._release(list(self._parts))
            self.generation = -1
            return False
        if rep.code != OK:
            return False
        gen, view = _parse_view(rep.body)
        self.generation = gen
        return self._apply(view) > 0

    def _apply(self, view: List[int]) -> int:
        with self._mu:
            gone = [p for p in self._parts if p not in view]
            added = [p for p in view if p not in self._parts]
        self._release(gone)
        if added:
            try:
                self._add(added)
            except (ConnectionLostError, BrokerError, RequestTimeoutError):
                pass  # started at the next view
        self._assigned.set()
        return len(gone)

    def _release(self, ps: List[int]) -> None:
        """Stop reading ps and commit what was processed of them."""
        if not ps:
            return
        with self._mu:
            parts = [self._parts.pop(p) for p in ps if p in self._parts]
        for _ in range(3):
            try:
                self._commit_parts(parts)
                return
            except (ConnectionLostError, BrokerError, RequestTimeoutError):
                continue
            except MetaqError:
                return  # closed, or an unreadable reply: given up all the same

    def close(self, processed: bool = True) -> None:
        """Commit, leave the group and close the connection (if the
        consumer opened it). processed=False leaves out the last message
        handed out (its processing failed), so that it is read again; the
        context manager passes it when the block raised."""
        if self._closed:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            if self.group is not None:
                if processed:
                    self._settle()
                with self._mu:
                    parts = list(self._parts.values())
                self._commit_parts(parts)
            if self.group_mode and self.generation >= 0:
                try:
                    self.conn.call(lambda op: b"leave %s %s %s %d\r\n" % (
                        self.group.encode(), self.topic.encode(), self.consumer_id.encode(),  # type: ignore[union-attr]
                        op), "leave", timeout=5)
                except MetaqError:
                    pass
        finally:
            self._closed = True
            if self._own_conn:
                self.conn.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, typ: object, exc: object, tb: object) -> None:
        self.close(processed=exc is None)


def _settle_part(part: _Part) -> None:
    """The messages of part handed out so far are processed: its position
    moves past them, and past what a filter dropped after them (an fvalue's
    next offset) once nothing fetched is left."""
    if part.delivered is not None:
        part.done, part.done_id = part.delivered
        part.delivered = None
    if not part.buf and part.fetch > part.done:
        part.done = part.fetch


def _parse_view(body: bytes) -> Tuple[int, List[int]]:
    """(generation, partitions) of a join or heartbeat reply's body;
    ProtocolError when it is not one."""
    try:
        text = body.decode()
        gen, _, rest = text.partition(" ")
        rest = rest.strip()
        return int(gen), sorted(int(x) for x in rest.split(",")) if rest else []
    except ValueError:
        raise ProtocolError(f"metaq: bad group view {body[:64]!r}") from None
