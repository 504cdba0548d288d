"""Two Python members of one group split the partitions; commits carry
the positions across members; a local transaction commits all or none."""

from __future__ import annotations

import time

import pytest

import metaq


def _drain(consumers, want: int, timeout: float = 30.0):
    got = {id(c): [] for c in consumers}
    end = time.monotonic() + timeout
    while sum(len(v) for v in got.values()) < want and time.monotonic() < end:
        for c in consumers:
            got[id(c)] += c.poll(0.05, max_messages=500)
    return got


def test_two_members_split_partitions(broker) -> None:
    with metaq.Producer(broker.addr, linger=0.002) as p:
        for i in range(200):
            p.send_async("g", b"v%d" % i, partition=i % 4)
        p.flush(30)
    a = metaq.Consumer(broker.addr, "g", group="billing", consumer_id="a", heartbeat_interval=0.2,
                       commit_interval=0.2)
    b = metaq.Consumer(broker.addr, "g", group="billing", consumer_id="b", heartbeat_interval=0.2,
                       commit_interval=0.2)
    try:
        a.wait_assignment()
        b.wait_assignment()
        end = time.monotonic() + 15
        while time.monotonic() < end:  # the two-phase handover settles
            a.poll(0.05)
            b.poll(0.05)
            pa, pb = a.assignment(), b.assignment()
            if len(pa) == 2 and len(pb) == 2:
                break
        pa, pb = a.assignment(), b.assignment()
        assert sorted(pa + pb) == [0, 1, 2, 3] and not set(pa) & set(pb), (pa, pb)
        stats = metaq.Connection(broker.addr).stats("members")
        assert "billing g member a partitions" in stats and "billing g member b partitions" in stats
    finally:
        a.close()
        b.close()
    # Everything was read once across both, and committed: a new member
    # with the same group reads nothing old.
    c = metaq.Consumer(broker.addr, "g", group="billing", consumer_id="c", heartbeat_interval=0.2)
    try:
        assert sorted(c.wait_assignment()) == [0, 1, 2, 3]
        assert c.poll(0.5) == []
        committed = c.fetch_offsets([0, 1, 2, 3])
        assert all(off > 0 for off, _ in committed.values()), committed
    finally:
        c.close()


def test_group_reads_everything_once(broker) -> None:
    with metaq.Producer(broker.addr, linger=0.002) as p:
        for i in range(300):
            p.send_async("g", b"w%d" % i, key=b"k%d" % i)
        p.flush(30)
    a = metaq.Consumer(broker.addr, "g", group="once", consumer_id="a", heartbeat_interval=0.2)
    b = metaq.Consumer(broker.addr, "g", group="once", consumer_id="b", heartbeat_interval=0.2)
    try:
        got = _drain([a, b], 300)
        values = [m.value for v in got.values() for m in v]
        # At least once: nothing lost; a handover may redeliver a few.
        assert set(values) == {b"w%d" % i for i in range(300)}
        for m in (m for v in got.values() for m in v):
            assert m.key == m.value.replace(b"w", b"k")
    finally:
        a.close()
        b.close()


def test_iteration_commits(broker) -> None:
    with metaq.Producer(broker.addr) as p:
        for i in range(5):
            p.send("g", b"i%d" % i, partition=0)
    seen = []
    with metaq.Consumer(broker.addr, "g", group="iter", partitions=[0]) as c:
        for m in c:
            seen.append(m.value)
            if len(seen) == 3:
                break
    # A clean close counts every message handed out as processed.
    with pytest.raises(ValueError):
        with metaq.Consumer(broker.addr, "g", group="iter", partitions=[0]) as c:
            for m in c:
                seen.append(m.value)
                if m.value == b"i4":
                    raise ValueError("processing failed")
    # A close by an exception leaves out the message being processed.
    with metaq.Consumer(broker.addr, "g", group="iter", partitions=[0]) as c:
        rest = [c.next(5).value]
        assert c.next(0.3) is None
    assert seen == [b"i0", b"i1", b"i2", b"i3", b"i4"] and rest == [b"i4"]


def test_local_transaction(broker) -> None:
    with metaq.Producer(broker.addr) as p:
        with p.transaction(timeout=30) as tx:
            r1 = tx.send("tx", b"a", partition=0)
            tx.send("tx", b"b", partition=1, key="kb")
            assert r1.offset == -1
            # Invisible until the commit.
            with metaq.Consumer(broker.addr, "tx", partitions=[0]) as c:
                assert c.read(0, 0).messages == []
        tx2 = p.transaction()
        tx2.send("tx", b"dropped", partition=0)
        tx2.rollback()
        with pytest.raises(RuntimeError):
            with p.transaction() as tx3:
                tx3.send("tx", b"also dropped", partition=1)
                raise RuntimeError("boom")
    with metaq.Consumer(broker.addr, "tx") as c:
        got = sorted((m.partition, m.value, m.key) for m in c.poll(3))
    assert got == [(0, b"a", None), (1, b"b", b"kb")]


def test_transaction_lost_connection(broker) -> None:
    with metaq.Producer(broker.addr) as p:
        tx = p.transaction()
        tx.send("tx", b"lost", partition=0)
        p.conn.drop()
        with pytest.raises(metaq.TransactionError):
            tx.commit()
        p.send("tx", b"after", partition=0)  # the producer reconnects
    with metaq.Consumer(broker.addr, "tx", partitions=[0]) as c:
        assert [m.value for m in c.poll(3)] == [b"after"]
