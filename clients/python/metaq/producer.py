"""The producer: sync and async sends, pipelined puts, mput batching with
linger, partition selection and local transactions."""

from __future__ import annotations

import collections
import heapq
import itertools
import os
import socket
import struct
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from .conn import Connection, Reply, wait
from .errors import (OK, BrokerError, BusyError, ClosedError, ConnectionLostError, MetaqError, RequestTimeoutError,
                     PartitionOutOfRangeError, TransactionError, broker_error)
from .message import Bytes, HeaderValue, Message, checksum, encode_data, key_index, make_message

#: The most entries an mput may carry (docs/protocol.md, mput).
MAX_MPUT_COUNT = 4096
_ENTRY = struct.Struct(">iii")

Selector = Callable[[str, int, Message], int]


@dataclass(frozen=True)
class SendResult:
    """Where the broker stored a message: its id, partition and the byte
    offset of its record's start (-1 for a transactional put, which has no
    offset until the commit)."""

    topic: str
    partition: int
    id: int
    offset: int


def parse_stats_topics(body: str) -> Dict[str, int]:
    """topic -> partition count from a `stats topics` body."""
    out: Dict[str, int] = {}
    for line in body.splitlines():
        f = line.split()
        if len(f) >= 3 and f[1] == "partitions":
            try:
                out[f[0]] = int(f[2])
            except ValueError:
                continue
    return out


class RoundRobin:
    """A shared counter modulo the partition count (MetaQ's default)."""

    def __init__(self) -> None:
        self._n = itertools.count()  # next() on a count is atomic

    def __call__(self, topic: str, n: int, m: Message) -> int:
        return next(self._n) % n


class HashByKey:
    """Messages with the same key go to the same partition: 32-bit FNV-1a of
    the key modulo the partition count, as the Go SDK's selector.HashByKey.
    A Producer knows the partitions of the broker it is connected to: for a
    topic on several brokers the Go SDK hashes over the partitions of all of
    them, and :func:`metaq.key_partition` gives its choice (route the message
    to that broker's Producer with ``partition=``). Messages without a key
    go round robin."""

    def __init__(self) -> None:
        self._rr = RoundRobin()

    def __call__(self, topic: str, n: int, m: Message) -> int:
        if not m.key:
            return self._rr(topic, n, m)
        return key_index(m.key, n)


def _selector(s: Union[str, Selector]) -> Selector:
    if callable(s):
        return s
    if s in ("hash", "key"):
        return HashByKey()
    if s in ("round_robin", "roundrobin", "rr"):
        return RoundRobin()
    raise ValueError(f"metaq: unknown selector {s!r} (hash, round_robin or a callable)")


class _Item:
    __slots__ = ("topic", "partition", "explicit", "msg", "data", "flag", "crc", "future")

    def __init__(self, topic: str, partition: int, explicit: bool, msg: Optional[Message], data: bytes,
                 future: Future) -> None:
        # msg None: a plain value (data), no Message made for it (send_async)
        self.topic, self.partition, self.explicit, self.msg = topic, partition, explicit, msg
        self.data, self.flag, self.crc = data, msg.flag if msg is not None else 0, checksum(data)
        self.future = future

    def message(self) -> Message:
        return self.msg if self.msg is not None else Message(self.data)


def _future_maker() -> Callable[[object], Future]:
    """A function making a pending Future that shares the given
    threading.Condition with others (the futures of one batch, completed
    together): a Future's own Condition costs more than the rest of a
    send_async. Future keeps its state in its __dict__; the maker copies a
    new Future's, with fresh lists (waiters, callbacks) and the shared
    Condition. Where Future is not built that way it returns plain
    Futures."""
    proto = Future().__dict__
    conds = [k for k, v in proto.items() if isinstance(v, threading.Condition)]
    if len(conds) != 1:
        return lambda cond: Future()
    ck = conds[0]
    fixed = {k: v for k, v in proto.items() if not isinstance(v, (list, dict, set)) and k != ck}
    lists = [k for k, v in proto.items() if isinstance(v, list) and not v]
    if len(fixed) + len(lists) + 1 != len(proto):
        return lambda cond: Future()
    new = Future.__new__

    def make(cond: object) -> Future:
        f = new(Future)
        d = f.__dict__
        d.update(fixed)
        for k in lists:
            d[k] = []
        d[ck] = cond
        return f

    return make


_new_future = _future_maker()


def _retriable(err: BaseException) -> bool:
    return isinstance(err, (ConnectionLostError, BusyError, PartitionOutOfRangeError)) or (
        isinstance(err, BrokerError) and err.code == 504)


class Producer:
    """Sends messages to one broker.

    ``send`` is synchronous: one `put`, answered once the broker stored the
    message (after its fsync in group-commit mode). ``send_async`` returns a
    :class:`concurrent.futures.Future` of a :class:`SendResult`: with
    ``linger`` > 0 messages to one partition are gathered for up to linger
    seconds (or ``batch_size`` messages, ``batch_bytes`` bytes) and sent in
    one `mput`; with ``linger`` = 0 each is a `put` of its own, pipelined
    (many in flight, matched by opaque). ``max_in_flight`` bounds the
    requests waiting for replies; a request unanswered after
    ``send_timeout`` (default the connection's ``request_timeout``) fails its
    futures with RequestTimeoutError (not retried: the broker may or may
    not have stored it). Sends that fail with a lost connection, a
    busy broker or a stale partition count are retried ``retries`` times (a
    put whose reply was lost may then be stored twice: at least once).
    One thread's sends to one partition are stored in send order (batches
    leave in the order they were formed); a retried one may be stored
    after later sends of its partition, as with the Go SDK.

    Futures complete on the connection's reader thread: callbacks must not
    block. ``selector`` is "hash" (the default: by key, else round robin),
    "round_robin" or a callable (topic, partition_count, message) -> index."""

    def __init__(self, conn: Union[Connection, str] = "127.0.0.1:8123", *, selector: Union[str, Selector] = "hash",
                 linger: float = 0.005, batch_size: int = 1024, batch_bytes: int = 1 << 20,
                 max_in_flight: int = 64, retries: int = 3, send_timeout: Optional[float] = None,
                 partitions: Optional[Dict[str, int]] = None, **conn_args: object) -> None:
        self.conn = conn if isinstance(conn, Connection) else Connection(conn, **conn_args)  # type: ignore[arg-type]
        self._own_conn = not isinstance(conn, Connection)
        self.selector = _selector(selector)
        self.linger = linger
        self.batch_size = max(1, min(batch_size, MAX_MPUT_COUNT))
        self.batch_bytes = batch_bytes
        self.retries = retries
        self.send_timeout = send_timeout if send_timeout is not None else self.conn.request_timeout
        self._fixed = dict(partitions or {})
        self._parts: Dict[str, int] = dict(self._fixed)
        self._plock = threading.Lock()
        self._inflight = threading.BoundedSemaphore(max_in_flight)
        self._cv = threading.Condition(threading.Lock())  # never taken twice by one thread
        self._queues: Dict[Tuple[str, int], List[_Item]] = {}
        self._qbytes: Dict[Tuple[str, int], int] = {}
        self._deadlines: Dict[Tuple[str, int], float] = {}
        self._qcond: Dict[Tuple[str, int], threading.Condition] = {}
        self._retry: List[Tuple[float, int, List[_Item], int]] = []
        # Batches detached from _queues and not sent yet, in detach order
        # (under _cv). _send_ready sends them one after another under
        # _slock, so a partition's batches go on the wire in the order they
        # were formed: each sent by the thread that detached it, after
        # unlocking _cv, a newer batch could overtake an older one (the
        # flusher detaching a lingered batch, the caller sending the next,
        # full one first), as the Go SDK's accumulator also avoids.
        self._ready: "collections.deque[List[_Item]]" = collections.deque()
        self._slock = threading.Lock()
        self._retry_seq = itertools.count()
        self._outstanding = 0
        self._closed = False
        self._thread: Optional[threading.Thread] = None
        # The requests sent and not answered, by sequence: (deadline, Future
        # of the reply). One timeout for all, so insertion order is deadline
        # order. A thread of its own fails those past their deadline (the
        # flusher may be blocked on max_in_flight, waiting for them).
        self._tcond = threading.Condition(threading.Lock())
        self._waiting: Dict[int, Tuple[float, Future]] = {}
        self._wseq = itertools.count()
        self._tthread: Optional[threading.Thread] = None
        self._tx_session = f"{_local_ip()}-{int(time.time() * 1000)}-{os.getpid()}-{id(self) & 0xFFFF}"
        self._tx_n = itertools.count(1)

    # -- partitions --------------------------------------------------------

    def partition_count(self, topic: str) -> int:
        """The topic's partition count, learnt from `stats topics`."""
        n = self._parts.get(topic)  # a dict read is atomic
        if n:
            return n
        found = parse_stats_topics(self.conn.stats("topics"))
        with self._plock:
            for t, c in found.items():
                if t not in self._fixed and c > 0:
                    self._parts[t] = c
            n = self._parts.get(topic)
        if not n:
            raise MetaqError(f"metaq: topic {topic!r} is not listed by the broker at {self.conn.address}")
        return n

    def _forget(self, topic: str) -> None:
        with self._plock:
            if topic not in self._fixed:
                self._parts.pop(topic, None)

    def _choose(self, topic: str, m: Message, partition: Optional[int]) -> int:
        if partition is not None:
            return partition
        n = self.partition_count(topic)
        i = self.selector(topic, n, m)
        if not 0 <= i < n:
            raise MetaqError(f"metaq: selector chose {i}, topic {topic!r} has {n} partitions")
        return i

    # -- sending ---------------------------------------------------------

    def send(self, topic: str, value: Union[str, Bytes, Message] = b"", *, key: Optional[Union[str, Bytes]] = None,
             headers: Optional[Sequence[Tuple[str, HeaderValue]]] = None, tags: Optional[Sequence[str]] = None,
             timestamp: Optional[int] = None, attribute: Optional[str] = None,
             partition: Optional[int] = None) -> SendResult:
        """Send one message and wait for the broker's answer."""
        m = value if isinstance(value, Message) else make_message(value, key=key, headers=headers, tags=tags,
                                                                  timestamp=timestamp, attribute=attribute)
        data = encode_data(m)
        crc = checksum(data)
        last: Optional[BaseException] = None
        for attempt in range(self.retries + 1):
            p = self._choose(topic, m, partition)
            try:
                rep = self.conn.call(lambda op: _put_frame(topic, p, data, m.flag, crc, op), "put",
                                     self.send_timeout)
                if rep.code != OK:
                    raise broker_error(rep.code, rep.body, "put")
                return _put_result(topic, rep)
            except (ConnectionLostError, BrokerError) as e:
                if not _retriable(e) or attempt == self.retries:
                    raise
                last = e
                if isinstance(e, PartitionOutOfRangeError):
                    self._forget(topic)
                else:
                    time.sleep(min(0.05 * 2 ** attempt, 1.0))
        raise last or MetaqError("metaq: put failed")  # pragma: no cover

    def send_async(self, topic: str, value: Union[str, Bytes, Message] = b"", *,
                   key: Optional[Union[str, Bytes]] = None,
                   headers: Optional[Sequence[Tuple[str, HeaderValue]]] = None,
                   tags: Optional[Sequence[str]] = None, timestamp: Optional[int] = None,
                   attribute: Optional[str] = None, partition: Optional[int] = None) -> "Future[SendResult]":
        """Queue one message; the Future completes with its SendResult or
        the error. Errors in the message itself (properties over a limit, an
        unknown topic) raise here."""
        if self._closed:
            raise ClosedError("metaq: producer closed")
        m: Optional[Message]
        if isinstance(value, Message):
            m = value
        elif (key is None and headers is None and tags is None and timestamp is None and attribute is None
              and type(value) is bytes):
            m = None  # the common case: the value is the put body, no Message made (nor its lists)
        else:
            m = make_message(value, key=key, headers=headers, tags=tags, timestamp=timestamp, attribute=attribute)
        if m is None:
            data = value  # type: ignore[assignment]
            sel = self.selector
            if partition is not None:
                p = partition
            elif type(sel) is HashByKey:  # no key: its round robin
                p = next(sel._rr._n) % self.partition_count(topic)
            elif type(sel) is RoundRobin:
                p = next(sel._n) % self.partition_count(topic)
            else:  # the caller's selector is given a Message
                p = self._choose(topic, Message(data), None)
        else:
            data = encode_data(m)
            p = self._choose(topic, m, partition)
        if self.linger <= 0 or self.batch_size == 1:
            fut: Future = Future()
            with self._cv:
                self._outstanding += 1
            self._submit([_Item(topic, p, partition is not None, m, data, fut)], 0)
            return fut
        k = (topic, p)
        size = len(data) + 12  # the mput entry
        before: Optional[List[_Item]] = None
        with self._cv:
            self._outstanding += 1
            q = self._queues.get(k)
            if q is not None:
                qb = self._qbytes[k] + size
                if qb > self.batch_bytes:
                    # This one would take the batch over batch_bytes: the
                    # batch goes as it is, and this one starts the next.
                    before = q
                    del self._queues[k], self._deadlines[k], self._qcond[k]
                    q = None
            if q is None:
                q = self._queues[k] = []
                qb = size
                self._deadlines[k] = time.monotonic() + self.linger
                cond = self._qcond[k] = threading.Condition()  # shared by the batch's futures
            else:
                cond = self._qcond[k]
            fut = _new_future(cond)
            q.append(_Item(topic, p, partition is not None, m, data, fut))
            full = len(q) >= self.batch_size or qb >= self.batch_bytes
            if before is not None:
                self._ready.append(before)
            if full:
                del self._queues[k], self._deadlines[k], self._qcond[k]
                self._qbytes.pop(k, None)
                self._ready.append(q)
            else:
                self._qbytes[k] = qb
                if self._thread is None:
                    self._start_flusher()
                if len(q) == 1:
                    self._cv.notify()
        if before is not None or full:
            self._send_ready()
        return fut

    def _send_ready(self) -> None:
        """Send the detached batches (_ready), oldest first. A thread that
        finds another sending waits for it: its batch is then sent, or
        being sent, when this returns (max_in_flight bounds both)."""
        with self._slock:
            while True:
                with self._cv:
                    if not self._ready:
                        return
                    items = self._ready.popleft()
                self._submit(items, 0)

    def _start_flusher(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._flush_loop, name="metaq-producer", daemon=True)
            self._thread.start()

    def _flush_loop(self) -> None:
        while True:
            due = False
            retry: List[Tuple[List[_Item], int]] = []
            with self._cv:
                while True:
                    now = time.monotonic()
                    for k, d in list(self._deadlines.items()):
                        if d <= now or self._closed:
                            self._ready.append(self._queues.pop(k))
                            del self._qbytes[k], self._deadlines[k], self._qcond[k]
                            due = True
                    while self._retry and (self._retry[0][0] <= now or self._closed):
                        _, _, items, attempt = heapq.heappop(self._retry)
                        retry.append((items, attempt))
                    if due or retry:
                        break
                    if self._closed and self._outstanding == 0:
                        return
                    nxt = min(list(self._deadlines.values()) + [r[0] for r in self._retry[:1]], default=now + 0.5)
                    self._cv.wait(max(0.0, nxt - now))
            if due:
                self._send_ready()
            for items, attempt in retry:
                if items[0].partition < 0:
                    self._reroute(items, attempt)
                else:
                    self._submit(items, attempt)

    def _reroute(self, items: List[_Item], attempt: int) -> None:
        """Choose the partitions of items again (after a stale count) and
        send them, one request per partition."""
        groups: Dict[int, List[_Item]] = {}
        for it in items:
            try:
                it.partition = self._choose(it.topic, it.message(), None)
            except BaseException as e:
                self._done([it], self.retries, None, e)
                continue
            groups.setdefault(it.partition, []).append(it)
        for group in groups.values():
            self._submit(group, attempt)

    def _submit(self, items: List[_Item], attempt: int) -> None:
        """Send one put (one item) or mput (several); the reply resolves the
        items' futures or schedules a retry."""
        it0 = items[0]
        topic = it0.topic
        self._inflight.acquire()
        try:
            if len(items) == 1:
                fut = self.conn.send(lambda op: _put_frame(topic, it0.partition, it0.data, it0.flag, it0.crc, op), "put")
            else:
                fut = self.conn.send(lambda op: _mput_frame(topic, it0.partition, items, op), "mput")
        except BaseException as e:
            self._inflight.release()
            self._done(items, attempt, None, e)
            return
        seq = next(self._wseq)
        with self._tcond:
            self._waiting[seq] = (time.monotonic() + self.send_timeout, fut)
            if self._tthread is None:
                self._tthread = threading.Thread(target=self._timeout_loop, name="metaq-producer-timeouts",
                                                 daemon=True)
                self._tthread.start()
            # No notify: the thread never sleeps past now + send_timeout,
            # this request's deadline.
        fut.add_done_callback(lambda f: self._on_reply(items, attempt, f, seq))

    def _on_reply(self, items: List[_Item], attempt: int, f: Future, seq: int) -> None:
        with self._tcond:
            self._waiting.pop(seq, None)
        self._inflight.release()
        err = f.exception()
        self._done(items, attempt, None if err else f.result(), err)

    def _timeout_loop(self) -> None:
        """Fail the requests unanswered past send_timeout with
        RequestTimeoutError (their late replies are dropped): a hung broker
        or a half-open connection does not leave futures pending forever,
        max_in_flight full, close() waiting."""
        while True:
            expired: List[Future] = []
            with self._tcond:
                while True:
                    now = time.monotonic()
                    for seq, (deadline, fut) in self._waiting.items():
                        if deadline > now:
                            break
                        expired.append(fut)
                    for _ in expired:
                        self._waiting.pop(next(iter(self._waiting)))
                    if expired:
                        break
                    if self._closed and not self._waiting:
                        self._tthread = None
                        return
                    first = next(iter(self._waiting.values()), None)
                    self._tcond.wait(self.send_timeout if first is None else max(0.0, first[0] - now) + 0.001)
            for fut in expired:
                forget = getattr(fut, "metaq_forget", None)
                if forget is not None:
                    forget()
                try:
                    fut.set_exception(RequestTimeoutError(
                        f"metaq: no reply to a put in {self.send_timeout}s: the message may or may not be stored"))
                except Exception:  # answered meanwhile (InvalidStateError)
                    pass

    def _done(self, items: List[_Item], attempt: int, rep: Optional[Reply], err: Optional[BaseException]) -> None:
        if rep is not None and rep.code != OK:
            err = broker_error(rep.code, rep.body, "put" if len(items) == 1 else "mput")
        if err is not None and _retriable(err) and attempt < self.retries:
            if isinstance(err, PartitionOutOfRangeError) and not items[0].explicit:
                # A stale partition count: choose again, once the retry is due.
                self._forget(items[0].topic)
                for it in items:
                    it.partition = -1
            with self._cv:
                heapq.heappush(self._retry, (time.monotonic() + min(0.05 * 2 ** attempt, 1.0),
                                             next(self._retry_seq), items, attempt + 1))
                self._start_flusher()
                self._cv.notify()
            return
        results: List[Optional[SendResult]] = [None] * len(items)
        if err is None and rep is not None:
            try:
                results = _results(items, rep)
            except MetaqError as e:
                err = e
        for i, it in enumerate(items):
            if not it.future.done():
                if err is not None:
                    it.future.set_exception(err)
                else:
                    it.future.set_result(results[i])
        with self._cv:
            self._outstanding -= len(items)
            self._cv.notify_all()

    def flush(self, timeout: Optional[float] = None) -> None:
        """Send what is queued now and wait until every send so far has its
        answer (raises RequestTimeoutError after timeout)."""
        with self._cv:
            now = time.monotonic()
            for k in self._deadlines:
                self._deadlines[k] = now
            self._cv.notify_all()
            end = None if timeout is None else now + timeout
            while self._outstanding > 0:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    raise RequestTimeoutError(f"metaq: flush: {self._outstanding} sends unanswered after {timeout}s")
                self._cv.wait(0.05 if left is None else min(left, 0.05))

    def close(self, timeout: Optional[float] = None) -> None:
        """Flush, then close the connection (if the producer opened it)."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._cv:
                self._closed = True
                self._cv.notify_all()
            with self._tcond:
                self._tcond.notify_all()
            if self._own_conn:
                self.conn.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions ----------------------------------------------------

    def transaction(self, timeout: Optional[int] = None) -> "Transaction":
        """Begin a local transaction on this producer's connection: its puts
        are held by the broker until commit, then stored together (or none
        of them). ``timeout`` (seconds, at most 60) rolls it back if not
        committed in time. Use it as a context manager: commit on success,
        rollback on an exception."""
        key = f"TX:{self._tx_session}:{next(self._tx_n)}"
        return Transaction(self, key, self._tx_session, timeout)


class Transaction:
    """A local transaction (docs/protocol.md, transaction). It lives in the
    connection that began it: if that connection is lost the broker rolls
    it back, and commit raises TransactionError."""

    def __init__(self, producer: Producer, key: str, session: str, timeout: Optional[int]) -> None:
        self.producer = producer
        self.key, self.session = key, session
        conn = producer.conn
        conn.connect()
        self._gen = conn.generation
        to = b" %d" % timeout if timeout else b""
        self._state = "open"
        rep = wait(conn.send_on_generation(self._gen, lambda op: b"transaction %s %s BEGIN%s %d\r\n" % (
            key.encode(), session.encode(), to, op), "transaction BEGIN"), conn.request_timeout, "transaction BEGIN")
        if rep.code != OK:
            raise broker_error(rep.code, rep.body, "transaction BEGIN")

    def send(self, topic: str, value: Union[str, Bytes, Message] = b"", *, key: Optional[Union[str, Bytes]] = None,
             headers: Optional[Sequence[Tuple[str, HeaderValue]]] = None, tags: Optional[Sequence[str]] = None,
             timestamp: Optional[int] = None, attribute: Optional[str] = None,
             partition: Optional[int] = None) -> SendResult:
        """Put one message in the transaction (offset -1 until the commit)."""
        if self._state != "open":
            raise TransactionError(f"metaq: transaction {self.key} is {self._state}")
        m = value if isinstance(value, Message) else make_message(value, key=key, headers=headers, tags=tags,
                                                                  timestamp=timestamp, attribute=attribute)
        data = encode_data(m)
        crc = checksum(data)
        p = self.producer._choose(topic, m, partition)
        conn = self.producer.conn
        try:
            fut = conn.send_on_generation(self._gen, lambda op: b"put %s %d %d %d %d %s %d\r\n" % (
                topic.encode(), p, len(data), m.flag, crc, self.key.encode(), op) + data, "put")
            rep = wait(fut, self.producer.send_timeout, "put")
        except ConnectionLostError as e:
            self._state = "rolled back (connection lost)"
            raise TransactionError(f"metaq: transaction {self.key}: {e}") from e
        if rep.code != OK:
            raise broker_error(rep.code, rep.body, "put")
        return _put_result(topic, rep)

    def _end(self, typ: str) -> None:
        conn = self.producer.conn
        try:
            fut = conn.send_on_generation(self._gen, lambda op: b"transaction %s %s %s %d\r\n" % (
                self.key.encode(), self.session.encode(), typ.encode(), op), "transaction " + typ)
            rep = wait(fut, conn.request_timeout, "transaction " + typ)
        except ConnectionLostError as e:
            self._state = "rolled back (connection lost)"
            raise TransactionError(f"metaq: transaction {self.key}: {e}; the broker rolled it back") from e
        if rep.code != OK:
            raise broker_error(rep.code, rep.body, "transaction " + typ)

    def commit(self) -> None:
        """Store every message of the transaction, or raise."""
        if self._state != "open":
            raise TransactionError(f"metaq: transaction {self.key} is {self._state}")
        self._end("COMMIT_ONE_PHASE")
        self._state = "committed"

    def rollback(self) -> None:
        """Drop every message of the transaction."""
        if self._state != "open":
            return
        self._state = "rolled back"
        try:
            self._end("ROLLBACK")
        except TransactionError:
            pass

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, typ: object, exc: object, tb: object) -> None:
        if exc is None:
            self.commit()
        else:
            self.rollback()


def _put_frame(topic: str, partition: int, data: bytes, flag: int, crc: int, op: int) -> bytes:
    return b"put %s %d %d %d %d %d\r\n" % (topic.encode(), partition, len(data), flag, crc, op) + data


def _mput_frame(topic: str, partition: int, items: List[_Item], op: int) -> bytes:
    parts = []
    pack = _ENTRY.pack
    for it in items:
        parts.append(pack(it.flag, len(it.data), it.crc))
        parts.append(it.data)
    body = b"".join(parts)
    return b"mput %s %d %d %d %d\r\n" % (topic.encode(), partition, len(body), len(items), op) + body


def _put_result(topic: str, rep: Reply) -> SendResult:
    f = rep.body.split()
    if len(f) < 3:
        raise MetaqError(f"metaq: bad put reply {rep.body[:64]!r}")
    return SendResult(topic, int(f[1]), int(f[0]), int(f[2]))


def _results(items: List[_Item], rep: Reply) -> List[Optional[SendResult]]:
    topic, n = items[0].topic, len(items)
    if n == 1:
        return [_put_result(topic, rep)]
    f = rep.body.split()
    if len(f) != 4 or int(f[3]) != n:
        raise MetaqError(f"metaq: bad mput reply {rep.body[:64]!r}")
    first, part, off = int(f[0]), int(f[1]), int(f[2])
    out: List[Optional[SendResult]] = []
    for i, it in enumerate(items):  # entry i starts at off + the sizes of those before it
        out.append(SendResult(topic, part, first + i, off))
        off += 20 + len(it.data)
    return out


def _local_ip() -> str:
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent
            return s.getsockname()[0]
        finally:
            s.close()
    except OSError:
        return "127.0.0.1"
