"""TLS plus SASL PLAIN against a broker with [tls] and [auth], and a
broker restart in the middle of a stream."""

from __future__ import annotations

import threading
import time

import pytest

import metaq
from conftest import free_port, password_hash


@pytest.fixture
def secure_broker(make_broker, bins, certs):
    h = password_hash(bins["metaq"], "s3cret")
    tls_port = free_port()
    extra = (f'[tls]\ncert_file = "{certs["cert"]}"\nkey_file = "{certs["key"]}"\n'
             f'client_ca_file = "{certs["ca"]}"\n\n'
             f'[auth]\nenabled = true\nfailure_delay = 0\nmax_failures = 0\n\n'
             f'[[auth.user]]\nname = "alice"\npassword_hash = "{h}"\npublish = ["t"]\nsubscribe = ["t"]\n'
             f'groups = ["g*"]\n\n'
             f'[[auth.user]]\nname = "bob"\npassword_hash = ""\npublish = ["other"]\nsubscribe = ["other"]\n\n')
    b = make_broker({"t": 2, "other": 1}, extra=extra, top=f"tls_port = {tls_port}\n")
    b.tls_addr = f"127.0.0.1:{tls_port}"
    return b


def test_tls_and_auth(secure_broker, certs) -> None:
    addr = secure_broker.tls_addr
    with metaq.Producer(addr, ca_file=certs["ca"], user="alice", password="s3cret") as p:
        assert p.conn.tls is not None
        r = p.send("t", b"secret", key="k", headers={"trace": "1"})
        with pytest.raises(metaq.ForbiddenError) as ei:
            p.send("other", b"x", partition=0)
        assert ei.value.code == 403
    with metaq.Consumer(addr, "t", group="g1", partitions=[r.partition], ca_file=certs["ca"], user="alice",
                        password="s3cret") as c:
        m = c.next(5)
        assert (m.value, m.key, m.header("trace")) == (b"secret", b"k", b"1")
        c.commit()
        assert c.fetch_offsets([r.partition])[r.partition][0] == m.next_offset
    # A wrong password: a typed error, not a retry loop.
    with pytest.raises(metaq.AuthenticationError) as ei:
        metaq.Connection(addr, ca_file=certs["ca"], user="alice", password="nope").connect()
    assert ei.value.code == 401 and "authentication failed" in ei.value.message
    # No login: 401 on a put.
    with pytest.raises(metaq.AuthenticationError):
        metaq.Producer(addr, ca_file=certs["ca"], partitions={"t": 2}).send("t", b"x", partition=0)
    # The certificate is verified: without the CA the handshake fails.
    with pytest.raises(metaq.ConnectionLostError):
        metaq.Connection(addr, tls=True, reconnect_timeout=0.2).connect()


def test_client_certificate(secure_broker, certs) -> None:
    # mTLS: a verified client certificate's CN is the user, without a
    # password.
    with metaq.Producer(secure_broker.tls_addr, ca_file=certs["ca"], cert_file=certs["client_cert"],
                        key_file=certs["client_key"]) as p:
        r = p.send("other", b"by certificate", partition=0)
        with pytest.raises(metaq.ForbiddenError):
            p.send("t", b"not bob's", partition=0)
    with metaq.Consumer(secure_broker.tls_addr, "other", partitions=[0], ca_file=certs["ca"],
                        cert_file=certs["client_cert"], key_file=certs["client_key"]) as c:
        assert c.read(0, r.offset).messages[0].value == b"by certificate"


def test_broker_restart_mid_stream(make_broker) -> None:
    b = make_broker({"t": 2})
    sent: list = []
    failed: list = []
    stop = threading.Event()

    def produce() -> None:
        with metaq.Producer(b.addr, linger=0.002, reconnect_timeout=30) as p:
            i = 0
            while not stop.is_set():
                v = b"r%d" % i
                f = p.send_async("t", v, partition=i % 2)
                f.add_done_callback(lambda f, v=v: (failed if f.exception() else sent).append(v))
                i += 1
                time.sleep(0.001)
            p.flush(60)

    consumed: list = []
    c = metaq.Consumer(b.addr, "t", group="g", partitions=[0, 1], commit_interval=0.2, reconnect_timeout=30)
    t = threading.Thread(target=produce)
    t.start()
    try:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            consumed += c.poll(0.05)
        b.kill()  # kill -9: acknowledged puts were fsynced (group commit)
        time.sleep(0.3)
        b.start()  # the same port
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            consumed += c.poll(0.05)
        stop.set()
        t.join(90)
        assert not t.is_alive()
        end = time.monotonic() + 20
        while time.monotonic() < end and not set(sent) <= set(m.value for m in consumed):
            consumed += c.poll(0.1)
    finally:
        stop.set()
        c.close()
    assert len(sent) > 100 and c.conn.connects >= 2
    # Every acknowledged message is there after the restart, and was read.
    assert set(sent) <= set(m.value for m in consumed)


def test_tls_many_threads(secure_broker, certs) -> None:
    # One TLS connection, a reader thread and writers on four threads: the
    # SSL object is never read and written at once (non-blocking socket,
    # one lock, select outside it), and nothing hangs.
    import concurrent.futures as cf
    conn = metaq.Connection(secure_broker.tls_addr, ca_file=certs["ca"], user="alice", password="s3cret",
                            request_timeout=10)
    try:
        conn.connect()
        link = conn._link
        assert link is not None and link.tls and link.sock.gettimeout() == 0.0
        from metaq.message import checksum
        from metaq.producer import _put_frame
        body = b"x" * 100_000  # writes larger than a TLS record and the socket buffer
        crc = checksum(body)

        def work(i: int) -> int:
            n = 0
            for _ in range(20):
                rep = conn.call(lambda op: _put_frame("t", 0, body, 0, crc, op), "put")
                assert rep.code == 200, rep.text()
                n += 1
                assert conn.version()
            return n

        with cf.ThreadPoolExecutor(4) as ex:
            assert sum(ex.map(work, range(4))) == 80
        assert conn.connects == 1
    finally:
        conn.close()
