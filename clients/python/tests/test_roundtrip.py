"""Round trips against the real broker: sync, async pipelined, batched,
keys and headers, direct reads, partial records and 301."""

from __future__ import annotations

import time

import pytest

import metaq
from metaq.message import key_index


def test_sync_roundtrip_with_properties(broker) -> None:
    with metaq.Producer(broker.addr) as p:
        r = p.send("t", b"hello", key="k1", headers=[("h", b"v"), ("null", None), ("e", b"")], tags=["red"],
                   timestamp=1700000000123, partition=1)
        assert r.partition == 1 and r.offset == 0 and r.id > 0
        r2 = p.send("t", "plain", partition=1, attribute="attr")
    with metaq.Consumer(broker.addr, "t", partitions=[1]) as c:
        res = c.read(1, 0)
        assert [m.offset for m in res.messages] == [0, r2.offset]
        m = res.messages[0]
        assert (m.value, m.key, m.tags, m.timestamp, m.id) == (b"hello", b"k1", ["red"], 1700000000123, r.id)
        assert m.headers == [("h", b"v"), ("null", None), ("e", b"")]
        assert m.header("h") == b"v" and m.header("null") is None
        m2 = res.messages[1]
        assert (m2.value, m2.key, m2.attribute, m2.headers) == (b"plain", None, "attr", [])
        assert res.next_offset == m2.next_offset


def test_async_pipelined_and_batched(broker) -> None:
    for linger in (0.0, 0.01):
        with metaq.Producer(broker.addr, linger=linger, batch_size=50) as p:
            futs = [p.send_async("t", b"m%d" % i, partition=i % 4) for i in range(400)]
            p.flush(30)
            res = [f.result() for f in futs]
        by_part: dict = {}
        for r in res:
            by_part.setdefault(r.partition, []).append(r)
        for part, rs in by_part.items():
            offs = [r.offset for r in rs]
            assert offs == sorted(offs) and len(set(offs)) == len(offs), part
    with metaq.Consumer(broker.addr, "t") as c:
        got = c.poll(5, max_messages=10000)
        while len(got) < 800:
            more = c.poll(2, max_messages=10000)
            assert more, len(got)
            got += more
    assert sorted(m.value for m in got) == sorted([b"m%d" % i for i in range(400)] * 2)
    for m in got:  # SendResult offsets name the records
        assert m.next_offset == m.offset + 20 + len(m.value)


def test_async_plain_values_and_selectors(broker) -> None:
    """send_async of a plain bytes value makes no Message: the built-in
    selectors still spread it round robin, a selector of the caller's is
    given a Message of the value, and the bytes stored are the value."""
    seen = []

    def mine(topic: str, n: int, m: metaq.Message) -> int:
        seen.append(m.value)
        return 3

    for sel in ("hash", "round_robin", mine):
        with metaq.Producer(broker.addr, selector=sel, linger=0.01, batch_size=8) as p:
            futs = [p.send_async("g", b"v%d" % i) for i in range(16)]
            p.flush(30)
            parts = [f.result().partition for f in futs]
        if sel is mine:
            assert parts == [3] * 16 and seen == [b"v%d" % i for i in range(16)]
        else:
            assert sorted(parts.count(k) for k in range(4)) == [4, 4, 4, 4], (sel, parts)
    with metaq.Consumer(broker.addr, "g") as c:
        got = []
        while len(got) < 48:
            more = c.poll(5, max_messages=1000)
            assert more, len(got)
            got += more
    assert sorted(m.value for m in got) == sorted([b"v%d" % i for i in range(16)] * 3)
    assert all(m.key is None and m.headers == [] and m.attribute is None for m in got)


def test_hash_by_key_matches_go(broker) -> None:
    with metaq.Producer(broker.addr) as p:
        for k in ("a", "order-17", "日本"):
            r = p.send("t", b"x", key=k)
            assert r.partition == key_index(k.encode(), 4)


def test_partial_record_and_growth(broker) -> None:
    with metaq.Producer(broker.addr) as p:
        big = p.send("t", b"x" * 5000, partition=2)
        small = p.send("t", b"y", partition=2)
    with metaq.Consumer(broker.addr, "t", partitions=[2], max_size=1024) as c:
        # 1024 bytes hold part of the first record only: the read doubles
        # its size until the record fits.
        res = c.read(2, big.offset, 1024)
        assert [m.value for m in res.messages][:1] == [b"x" * 5000]
        # A reply that ends inside a record: the whole ones only.
        res = c.read(2, big.offset, 5020 + 10)
        assert [m.offset for m in res.messages] == [big.offset]
        assert res.next_offset == small.offset
        it = [c.next(5), c.next(5)]
        assert [m.value for m in it] == [b"x" * 5000, b"y"]


def test_moved_and_not_found(broker) -> None:
    with metaq.Consumer(broker.addr, "t", partitions=[3]) as c:
        res = c.read(3, 0)
        assert res.messages == [] and not res.moved
        res = c.read(3, metaq.consumer.NEWEST)
        assert res.moved and res.next_offset == 0
        assert c.next(0.3) is None


def test_typed_errors(broker) -> None:
    with metaq.Producer(broker.addr, partitions={"t": 9}) as p:
        with pytest.raises(metaq.PartitionOutOfRangeError) as ei:
            p.send("t", b"x", partition=7)
        assert ei.value.code == 500 and ei.value.cause == "partition out of range"
        with pytest.raises(metaq.PropertiesError):
            p.send("t", b"x", key=b"k" * 5000)
        with pytest.raises(metaq.PropertiesError):
            p.send("t", b"x", tags=["has space"])
        with pytest.raises(metaq.BrokerError) as ei:
            p.send("nosuchtopic", b"x", partition=0)
        assert ei.value.code == 500
    with pytest.raises(metaq.MetaqError):
        metaq.Producer(broker.addr).send("nosuchtopic", b"x")


def test_filtered_reads(make_broker) -> None:
    # A server-side filter answers fvalue (kept records with their own
    # offsets) or 301 past a range it dropped whole.
    b = make_broker({"t": 1}, extra='[[topic]]\nname = "f"\nnum_partitions = 1\n[[topic.filter]]\n'
                                     'group = "red-only"\nfilter = "attribute"\n[topic.filter.config]\n'
                                     'equals = "red"\n\n')
    with metaq.Producer(b.addr) as p:
        rs = [p.send("f", b"m%d" % i, attribute="red" if i % 3 == 0 else "blue", partition=0) for i in range(9)]
        tail = [p.send("f", b"tail%d" % i, attribute="blue", partition=0) for i in range(3)]
    with metaq.Consumer(b.addr, "f", group="red-only", partitions=[0]) as c:
        got = []
        while True:
            m = c.next(1)
            if m is None:
                break
            got.append(m)
        assert [(m.value, m.offset) for m in got] == [(b"m%d" % i, rs[i].offset) for i in (0, 3, 6)]
        # The blue tail was skipped by a 301: the position is past it.
        assert c.positions()[0] == tail[-1].offset + 20 + len(b"tail2") + 4 + len("blue")
    with metaq.Consumer(b.addr, "f", group="everyone", partitions=[0]) as c:
        assert len(c.poll(2, max_messages=100)) == 12


def test_concurrent_futures_wait(broker) -> None:
    import concurrent.futures as cf
    with metaq.Producer(broker.addr, linger=0.01, batch_size=64) as p:
        futs = [p.send_async("t", b"w%d" % i, partition=0) for i in range(300)]
        done, not_done = cf.wait(futs, timeout=30)
        assert not not_done and all(f.exception() is None for f in done)
        assert [f.result().offset for f in futs] == sorted(f.result().offset for f in futs)
        for f in cf.as_completed(futs[:10], timeout=5):
            assert f.result().partition == 0
