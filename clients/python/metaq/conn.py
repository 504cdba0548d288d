"""One connection to a broker: framing, pipelining by opaque, TLS, SASL
PLAIN and reconnecting with backoff."""

from __future__ import annotations

import itertools
import random
import select
import socket
import ssl
import threading
import time
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple, Union

from .errors import (OK, AuthenticationError, ClosedError, ConnectionLostError, MetaqError,
                     ProtocolError, RequestTimeoutError, broker_error)

#: The longest reply line read (the broker's max_line_length is 1024).
MAX_LINE = 4096
#: The largest reply body accepted: a hostile broker cannot make the client
#: allocate more.
MAX_BODY = 256 << 20
_READ_SIZE = 256 << 10
_MAX_OPAQUE = 2**31 - 1


@dataclass
class Reply:
    """A reply: ``result`` (code, body), ``value`` or ``fvalue`` (code 200,
    body the records; fvalue's next_offset)."""

    kind: str
    code: int
    opaque: int
    body: bytes
    next_offset: int = -1
    #: The generation (Connection.generation) of the socket that carried
    #: it: what the broker tied to that socket (a membership) ends with it.
    generation: int = 0

    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def parse_address(address: str, default_port: int = 8123) -> Tuple[str, int]:
    """host:port, [v6]:port or meta://host:port."""
    if address.startswith("meta://"):
        address = address[len("meta://"):]
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, default_port
    return host, int(port)


class _Link:
    """One socket and the requests waiting for its replies."""

    def __init__(self, sock: socket.socket, generation: int) -> None:
        self.sock = sock
        self.generation = generation
        self.pending: Dict[int, Tuple[Future, str]] = {}
        self.lock = threading.Lock()  # pending, dead
        self.wlock = threading.Lock()  # writes (whole frames, in order)
        # TLS: every call into the SSL object (read, write) holds sslock,
        # never while waiting for the socket (it is non-blocking): OpenSSL
        # does not allow SSL_read and SSL_write at once on one connection.
        self.tls = isinstance(sock, ssl.SSLSocket)
        self.sslock = threading.Lock()
        self.dead: Optional[BaseException] = None
        self.closed_event = threading.Event()
        self.last_error = ""  # an unsolicited error reply (opaque 0) before a close

    def sendall(self, data: bytes) -> None:
        """Write data whole; the caller holds wlock."""
        if not self.tls:
            self.sock.sendall(data)
            return
        view = memoryview(data)
        while view:
            want = None
            with self.sslock:
                try:
                    n = self.sock.send(view)
                    view = view[n:]
                except ssl.SSLWantWriteError:
                    want = "w"
                except ssl.SSLWantReadError:
                    want = "r"
            if want is not None:
                self._wait(want)

    def recv_into(self, buf: memoryview) -> int:
        if not self.tls:
            return self.sock.recv_into(buf)
        while True:
            want = None
            with self.sslock:
                try:
                    return self.sock.recv_into(buf)
                except ssl.SSLWantReadError:
                    want = "r"
                except ssl.SSLWantWriteError:
                    want = "w"
            self._wait(want)

    def _wait(self, want: str) -> None:
        """Wait (at most 1 s, then the caller tries again) until the TLS
        socket is readable ("r") or writable ("w")."""
        if self.dead is not None:
            raise OSError("connection closed")
        try:
            if want == "r":
                select.select([self.sock], [], [], 1.0)
            else:
                select.select([], [self.sock], [], 1.0)
        except ValueError as e:  # closed meanwhile (fileno -1)
            raise OSError(f"connection closed: {e}") from None

    def register(self, opaque: int, fut: Future, command: str) -> None:
        with self.lock:
            if self.dead is not None:
                raise self.dead
            self.pending[opaque] = (fut, command)

    def forget(self, opaque: int) -> None:
        """Stop waiting for opaque's reply (its request timed out): a late
        reply is dropped."""
        with self.lock:
            self.pending.pop(opaque, None)

    def kill(self, err: BaseException) -> None:
        with self.lock:
            if self.dead is None:
                self.dead = err
            waiting = list(self.pending.values())
            self.pending.clear()
        self.closed_event.set()
        try:
            self.sock.close()
        except OSError:
            pass
        for fut, _ in waiting:
            if not fut.done():
                try:
                    fut.set_exception(self.dead)
                except Exception:  # pragma: no cover - raced with a result
                    pass


class Connection:
    """A connection to one broker, shared by threads.

    Requests are pipelined: :meth:`send` writes a frame and returns a
    :class:`concurrent.futures.Future` that the reader thread completes with
    the :class:`Reply` carrying the same opaque. When the socket breaks,
    every request waiting on it fails with :class:`ConnectionLostError`, and
    the next request dials again, with exponential backoff (from
    ``backoff`` to ``backoff_max`` seconds, with jitter) until
    ``reconnect_timeout`` seconds have passed, the last try at that
    deadline.

    ``tls`` is True (verify against the system CAs or ``ca_file``) or an
    :class:`ssl.SSLContext`; ``user``/``password`` log in with SASL PLAIN
    right after connecting (and after every reconnect)."""

    def __init__(self, address: str = "127.0.0.1:8123", *, tls: Union[bool, ssl.SSLContext, None] = None,
                 ca_file: Optional[str] = None, cert_file: Optional[str] = None, key_file: Optional[str] = None,
                 server_hostname: Optional[str] = None, user: Optional[str] = None, password: Optional[str] = None,
                 connect_timeout: float = 5.0, request_timeout: float = 30.0, backoff: float = 0.05,
                 backoff_max: float = 2.0, reconnect_timeout: float = 30.0) -> None:
        self.host, self.port = parse_address(address)
        self.address = address
        if tls is True or (tls is None and (ca_file or cert_file)):
            ctx = ssl.create_default_context(cafile=ca_file)
            if cert_file:
                ctx.load_cert_chain(cert_file, key_file)
            tls = ctx
        self.tls: Optional[ssl.SSLContext] = tls or None
        self.server_hostname = server_hostname or self.host
        self.user, self.password = user, password
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.backoff, self.backoff_max = backoff, backoff_max
        self.reconnect_timeout = reconnect_timeout
        self._link: Optional[_Link] = None
        self._dial_lock = threading.Lock()
        self._opaque = itertools.count(1)
        self._olock = threading.Lock()
        self._generation = 0
        self._closed = False
        #: Times the connection was (re)established.
        self.connects = 0

    # -- dialing ---------------------------------------------------------

    @property
    def generation(self) -> int:
        """Counts the sockets this connection has had: a change means the
        broker dropped what was tied to the old one (group memberships,
        local transactions)."""
        return self._generation

    def _next_opaque(self) -> int:
        with self._olock:
            op = next(self._opaque)
            if op > _MAX_OPAQUE:
                self._opaque = itertools.count(2)
                op = 1
            return op

    def _dial_once(self) -> _Link:
        raw = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A half-open connection (the broker's host gone) is found by
            # keepalive probes instead of never.
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for opt, val in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
                if hasattr(socket, opt):
                    raw.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), val)
            sock = raw
            if self.tls is not None:
                sock = self.tls.wrap_socket(raw, server_hostname=self.server_hostname)
            # TLS is non-blocking: the reader waits for data outside the
            # SSL object's lock (_Link.recv_into), so writers get in.
            sock.settimeout(0.0 if self.tls is not None else None)
        except BaseException:
            raw.close()
            raise
        link = _Link(sock, self._generation + 1)
        t = threading.Thread(target=self._read_loop, args=(link,), name=f"metaq-reader-{self.address}", daemon=True)
        t.start()
        if self.user is not None:
            user, pw = self.user, self.password or ""
            body = b"\x00" + user.encode() + b"\x00" + pw.encode()
            fut = self._send_on(link, lambda op: b"auth PLAIN %d %d\r\n" % (len(body), op) + body, "auth")
            try:
                rep = fut.result(self.request_timeout)
            except FutureTimeout:
                link.kill(RequestTimeoutError("metaq: auth: no reply"))
                raise RequestTimeoutError("metaq: auth: no reply") from None
            if rep.code != OK:
                link.kill(ClosedError("metaq: login failed"))
                raise broker_error(rep.code, rep.body, "auth")
        return link

    def connect(self) -> None:
        """Dial now (requests dial on their own when needed)."""
        self._ensure()

    def _ensure(self) -> _Link:
        link = self._link
        if link is not None and link.dead is None:
            return link
        with self._dial_lock:
            if self._closed:
                raise ClosedError("metaq: connection closed")
            link = self._link
            if link is not None and link.dead is None:
                return link
            deadline = time.monotonic() + self.reconnect_timeout
            delay = self.backoff
            while True:
                try:
                    link = self._dial_once()
                except AuthenticationError:
                    raise
                except (OSError, MetaqError) as e:
                    now = time.monotonic()
                    if self._closed or now >= deadline:
                        raise ConnectionLostError(f"metaq: connect to {self.address}: {e}") from e
                    # The last pause ends at the deadline, with one more
                    # try there: giving up as soon as the next pause would
                    # pass it gave up after as little as a third of
                    # reconnect_timeout.
                    time.sleep(min(delay * (0.5 + random.random() / 2), deadline - now))
                    delay = min(delay * 2, self.backoff_max)
                    continue
                self._generation = link.generation
                self._link = link
                self.connects += 1
                return link

    # -- requests --------------------------------------------------------

    def _send_on(self, link: _Link, frame: Callable[[int], bytes], command: str, reply: bool = True) -> Future:
        fut: Future = Future()
        op = self._next_opaque()
        data = frame(op)
        if reply:
            link.register(op, fut, command)
            fut.metaq_forget = lambda: link.forget(op)  # type: ignore[attr-defined]
        try:
            with link.wlock:
                link.sendall(data)
        except OSError as e:
            link.kill(ConnectionLostError(f"metaq: {command} to {self.address}: {e}"))
            if not reply:
                raise link.dead  # type: ignore[misc]
        if not reply:
            fut.set_result(Reply("none", OK, op, b"", -1, link.generation))
        return fut

    def send(self, frame: Callable[[int], bytes], command: str = "", reply: bool = True) -> Future:
        """Write frame(opaque) and return the Future of its reply. Raises
        ConnectionLostError when no connection can be made."""
        return self._send_on(self._ensure(), frame, command, reply)

    def send_on_generation(self, generation: int, frame: Callable[[int], bytes], command: str = "") -> Future:
        """send, but only on the socket of that generation (for requests
        whose meaning is tied to the socket: a local transaction's)."""
        link = self._link
        if link is None or link.generation != generation or link.dead is not None:
            raise ConnectionLostError(f"metaq: {command}: the connection it belongs to was lost")
        return self._send_on(link, frame, command)

    def call(self, frame: Callable[[int], bytes], command: str = "", timeout: Optional[float] = None) -> Reply:
        """send and wait for the reply (at most timeout, default
        request_timeout)."""
        return wait(self.send(frame, command), self.request_timeout if timeout is None else timeout, command)

    def call_ok(self, frame: Callable[[int], bytes], command: str = "", timeout: Optional[float] = None) -> Reply:
        """call; an error reply raises its typed BrokerError."""
        rep = self.call(frame, command, timeout)
        if rep.code != OK:
            raise broker_error(rep.code, rep.body, command)
        return rep

    def stats(self, item: str = "") -> str:
        """The body of `stats [item]`."""
        it = (item.encode() + b" ") if item else b""
        return self.call_ok(lambda op: b"stats %s%d\r\n" % (it, op), "stats").text()

    def version(self) -> str:
        return self.call_ok(lambda op: b"version %d\r\n" % op, "version").text()

    def drop(self) -> None:
        """Close the current socket (the next request dials again)."""
        link = self._link
        if link is not None:
            link.kill(ConnectionLostError("metaq: connection dropped"))

    def close(self) -> None:
        self._closed = True
        link = self._link
        if link is not None:
            try:
                with link.wlock:
                    link.sendall(b"quit\r\n")
            except OSError:
                pass
            link.kill(ClosedError("metaq: connection closed"))

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the reader ------------------------------------------------------

    def _read_loop(self, link: _Link) -> None:
        buf = bytearray()
        pos = 0
        sock = link.sock
        chunk = memoryview(bytearray(_READ_SIZE))  # recv_into: no 256 KiB allocation per read
        err: BaseException = ConnectionLostError(f"metaq: connection to {self.address} closed by the broker")
        try:
            while True:
                # One reply header, then its body.
                while True:
                    i = buf.find(b"\n", pos)
                    if i >= 0:
                        break
                    if len(buf) - pos > MAX_LINE:
                        raise ProtocolError("metaq: reply line too long")
                    if pos:
                        del buf[:pos]
                        pos = 0
                    got = link.recv_into(chunk)
                    if not got:
                        return
                    buf += chunk[:got]
                line = bytes(buf[pos:i]).rstrip(b"\r")
                pos = i + 1
                if not line:
                    continue
                toks = line.split(b" ")
                kind = toks[0]
                try:
                    if kind == b"result" and len(toks) == 4:
                        code, n, op, nxt = int(toks[1]), int(toks[2]), int(toks[3]), -1
                    elif kind == b"value" and len(toks) == 3:
                        code, n, op, nxt = OK, int(toks[1]), int(toks[2]), -1
                    elif kind == b"fvalue" and len(toks) == 4:
                        code, n, op, nxt = OK, int(toks[1]), int(toks[2]), int(toks[3])
                    else:
                        raise ValueError
                except ValueError:
                    raise ProtocolError(f"metaq: bad reply line {line[:64]!r}") from None
                if n < 0 or n > MAX_BODY:
                    raise ProtocolError(f"metaq: reply body of {n} bytes")
                while len(buf) - pos < n:
                    if pos:
                        del buf[:pos]
                        pos = 0
                    got = link.recv_into(chunk)
                    if not got:
                        return
                    buf += chunk[:got]
                body = bytes(buf[pos:pos + n])
                pos += n
                if pos == len(buf):
                    buf.clear()
                    pos = 0
                with link.lock:
                    entry = link.pending.pop(op, None)
                if entry is None:
                    if code != OK:
                        link.last_error = f"{code} {body.decode('utf-8', 'replace')}"
                    continue
                fut = entry[0]
                try:
                    fut.set_result(Reply(kind.decode(), code, op, body, nxt, link.generation))
                except InvalidStateError:
                    pass  # failed meanwhile (a producer's send_timeout): the late reply is dropped
        except ProtocolError as e:
            err = e
        except OSError as e:
            err = ConnectionLostError(f"metaq: connection to {self.address}: {e}")
        finally:
            if link.last_error and isinstance(err, ConnectionLostError):
                err = ConnectionLostError(f"{err} (the broker said: {link.last_error})")
            link.kill(err)


def wait(fut: Future, timeout: Optional[float], command: str = "") -> Reply:
    """fut's reply, or RequestTimeoutError after timeout seconds."""
    try:
        return fut.result(timeout)
    except FutureTimeout:
        forget = getattr(fut, "metaq_forget", None)
        if forget is not None:
            forget()
        raise RequestTimeoutError(f"metaq: {command}: no reply in {timeout}s") from None
