"""Hostile input: random and truncated bytes to the decoders (a seeded,
bounded fuzz run), a broker that sends garbage, reconnects with backoff and
a group member that loses its connection."""

from __future__ import annotations

import random
import socket
import threading
import time

import pytest

import metaq
from metaq import message as mm
from test_golden import GOLDEN


def test_decoders_never_crash() -> None:
    rnd = random.Random(27)
    seeds = [bytes.fromhex(c["data_hex"]) for c in GOLDEN["messages"]]
    for _ in range(3000):
        b = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(0, 4)):  # flip, cut or grow
            op = rnd.randint(0, 2)
            if op == 0 and b:
                b[rnd.randrange(len(b))] = rnd.randrange(256)
            elif op == 1 and b:
                del b[rnd.randrange(len(b)):]
            else:
                b += bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
        for flag in (0, 1, 2, 3):
            try:
                mm.decode_data(flag, bytes(b), mm.Message())
            except mm.PropertiesError:
                pass
        try:
            for r in mm.iter_records(bytes(b), 0):
                assert r.size >= mm.HEADER_SIZE
        except ValueError:
            pass


def _fake_broker(reply: bytes) -> "tuple[socket.socket, threading.Thread]":
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve() -> None:
        c, _ = srv.accept()
        c.recv(1024)
        c.sendall(reply)
        time.sleep(0.5)
        c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return srv, t


@pytest.mark.parametrize("reply", [
    b"garbage garbage\r\n", b"result 200 99999999999 1\r\n", b"value -1 1\r\n", b"x" * 10000,
])
def test_hostile_broker(reply: bytes) -> None:
    srv, t = _fake_broker(reply)
    try:
        conn = metaq.Connection("127.0.0.1:%d" % srv.getsockname()[1], request_timeout=5, reconnect_timeout=0.1)
        with pytest.raises((metaq.ProtocolError, metaq.ConnectionLostError)):
            conn.version()
    finally:
        srv.close()


def test_reconnect_backoff_gives_up() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens
    conn = metaq.Connection("127.0.0.1:%d" % port, reconnect_timeout=0.5, backoff=0.05)
    t0 = time.monotonic()
    with pytest.raises(metaq.ConnectionLostError):
        conn.version()
    assert 0.2 < time.monotonic() - t0 < 3


def test_member_rejoins_after_connection_loss(broker) -> None:
    with metaq.Producer(broker.addr) as p:
        p.send("g", b"before", partition=0)
    c = metaq.Consumer(broker.addr, "g", group="rejoin", consumer_id="m1", heartbeat_interval=0.1)
    try:
        assert c.wait_assignment() == [0, 1, 2, 3]
        assert c.next(5).value == b"before"
        gen = c.conn.generation
        c.conn.drop()  # the broker drops the membership with the socket
        with metaq.Producer(broker.addr) as p:
            p.send("g", b"after", partition=0)
        m = c.next(10)
        assert m is not None and m.value == b"after"
        assert c.conn.generation > gen
        end = time.monotonic() + 5
        while "rejoin g member m1" not in metaq.Connection(broker.addr).stats("members"):
            assert time.monotonic() < end
            time.sleep(0.1)
    finally:
        c.close()


def test_conflicting_member_id(broker) -> None:
    a = metaq.Consumer(broker.addr, "g", group="dup", consumer_id="same", heartbeat_interval=0.1)
    try:
        a.wait_assignment()
        conn = metaq.Connection(broker.addr)
        rep = conn.call(lambda op: b"join dup g same default %d\r\n" % op)
        err = metaq.errors.broker_error(rep.code, rep.body, "join")
        assert isinstance(err, metaq.ConflictError) and err.code == 409
    finally:
        a.close()


def test_idle_consumer_does_not_spin(broker) -> None:
    # Nothing assigned yet, or nothing new: the consumer sleeps between
    # rounds instead of spinning.
    c = metaq.Consumer(broker.addr, "g", group="idle", consumer_id="x", heartbeat_interval=5)
    try:
        c0 = time.process_time()
        assert c.next(1.0) is None
        assert time.process_time() - c0 < 0.5
    finally:
        c.close()


def test_request_timeout_forgets_the_request() -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    held = []
    t = threading.Thread(target=lambda: held.append(srv.accept()[0]), daemon=True)
    t.start()
    try:
        conn = metaq.Connection("127.0.0.1:%d" % srv.getsockname()[1], request_timeout=0.2)
        with pytest.raises(metaq.RequestTimeoutError):
            conn.version()  # the broker never answers
        link = conn._link
        assert link is not None and link.pending == {}
        conn.close()
    finally:
        srv.close()
        for c in held:
            c.close()
