"""Python and Go clients on one topic: the metaq CLI (the Go SDK) reads
what Python produced, keys, headers, tags and timestamp included, and
Python reads what the CLI produced; a key lands on the same partition from
either."""

from __future__ import annotations

import json
import subprocess

import metaq


def _cli(bins, broker, *args: str, stdin: str = "") -> str:
    r = subprocess.run([bins["metaq"], "--addr", broker.addr, *args], input=stdin, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_go_reads_python(bins, broker) -> None:
    with metaq.Producer(broker.addr) as p:
        r = p.send("t", "from python", key="user42", headers=[("trace", b"abc"), ("null", None), ("e", b"")],
                   tags=["TagA"], timestamp=1700000000123)
    out = _cli(bins, broker, "consume", "--topic", "t", "--partition", str(r.partition), "--json")
    msgs = [json.loads(line) for line in out.splitlines()]
    m = next(x for x in msgs if x["offset"] == r.offset)
    assert m["body"] == "from python" and m["key"] == "user42" and m["timestamp"] == 1700000000123
    assert m["tags"] == ["TagA"] and m["msgId"] == str(r.id)
    assert [(h["key"], h["value"]) for h in m["headers"]] == [("trace", "abc"), ("null", None), ("e", "")]


def test_python_reads_go(bins, broker) -> None:
    out = _cli(bins, broker, "produce", "--topic", "t", "--key", "user42", "--header", "trace=abc", "--header",
               "n", "--tag", "TagA", "--timestamp", "1700000000999", "--verbose", stdin="from go\n")
    msg_id, part, off = (int(x) for x in out.split())
    # The Go CLI and Python's selector put key user42 on the same partition.
    assert part == metaq.key_index(b"user42", 4)
    with metaq.Consumer(broker.addr, "t", partitions=[part]) as c:
        m = next(x for x in c.read(part, 0).messages if x.offset == off)
    assert (m.value, m.key, m.tags, m.timestamp, m.id) == (b"from go", b"user42", ["TagA"], 1700000000999, msg_id)
    assert m.headers == [("trace", b"abc"), ("n", None)]
