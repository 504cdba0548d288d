"""The Python encoder against the Go SDK's bytes (testdata/golden.json,
written and checked by TestGolden in clients/python/python_test.go)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metaq import message as mm

GOLDEN = json.loads((Path(__file__).resolve().parent.parent / "testdata" / "golden.json").read_text())


def _msg(c: dict) -> mm.Message:
    return mm.Message(
        value=bytes.fromhex(c["value_hex"]),
        key=None if c["key_hex"] is None else bytes.fromhex(c["key_hex"]),
        timestamp=c["timestamp"], tags=list(c["tags"] or []), attribute=c["attribute"],
        headers=[(h["key"], None if h["value_hex"] is None else bytes.fromhex(h["value_hex"]))
                 for h in c["headers"] or []])


@pytest.mark.parametrize("case", GOLDEN["messages"], ids=lambda c: c["name"])
def test_encode_matches_go(case: dict) -> None:
    m = _msg(case)
    assert m.flag == case["flag"]
    assert mm.encode_properties(m).hex() == case["props_hex"]
    data = mm.encode_data(m)
    assert data.hex() == case["data_hex"]
    assert mm.checksum(data) == case["checksum"]
    # And back: the decoder reads the Go bytes into the same message.
    back = mm.Message()
    mm.decode_data(case["flag"], bytes.fromhex(case["data_hex"]), back)
    assert (back.value, back.key, back.timestamp, back.tags, back.headers, back.attribute) == (
        m.value, m.key, m.timestamp, m.tags, m.headers, m.attribute)


def test_hash_by_key_matches_go() -> None:
    assert GOLDEN["hashes"]
    for h in GOLDEN["hashes"]:
        assert mm.key_index(bytes.fromhex(h["key_hex"]), h["n"]) == h["index"], h


@pytest.mark.parametrize("block,why", [
    (b"", "block of 0 bytes"), (b"\x02\x01", "version 2"), (b"\x01\x00", "fields 0x00"),
    (b"\x01\x20", "fields 0x20"), (b"\x01\x10\x00\x00", "producer id"), (b"\x01\x01\x05ab", "short key"), (b"\x01\x01\x81\x00", "key length"),
    (b"\x01\x04\x00", "tag count"), (b"\x01\x01\x01ax", "trailing bytes"), (b"\x01\x04\x01\x01 ", "space"),
])
def test_decode_refuses_malformed(block: bytes, why: str) -> None:
    with pytest.raises(mm.PropertiesError) as ei:
        mm.decode_properties(block, mm.Message())
    assert why in str(ei.value)


def test_records_partial_tail() -> None:
    r1 = mm.encode_record(7, 0, b"one")
    r2 = mm.encode_record(8, 0, b"two")
    recs = list(mm.iter_records(r1 + r2[:-1], 100))
    assert [(r.offset, r.id, r.data) for r in recs] == [(100, 7, b"one")]
    assert list(mm.iter_records(r1[:10], 0)) == []


def test_id_parts() -> None:
    mid = ((1700000000000 - mm.ID_EPOCH_MS) << 22) | (3 << 12) | 9
    assert mm.id_parts(mid) == (1700000000000, 3, 9)


def test_key_partition_matches_go_cluster() -> None:
    """A key goes to the (broker, partition) the Go SDK's cluster producer
    picks with its default selector, over the partitions of several brokers
    (given in any order)."""
    assert len({tuple(sorted(c["counts"].items())) for c in GOLDEN["cluster_keys"]}) >= 3
    for c in GOLDEN["cluster_keys"]:
        counts = {int(b): n for b, n in c["counts"].items()}
        ps = mm.cluster_partitions(counts)
        assert len(ps) == sum(counts.values())
        key = bytes.fromhex(c["key_hex"])
        want = (c["broker"], c["partition"])
        assert mm.key_partition(key, ps) == want, c
        assert mm.key_partition(key, list(reversed(ps))) == want, c
        if len(counts) == 1:  # one broker: key_index over its partitions
            assert mm.key_index(key, len(ps)) == c["partition"], c


def test_key_partition_no_partitions() -> None:
    with pytest.raises(ValueError):
        mm.key_partition(b"k", [])
