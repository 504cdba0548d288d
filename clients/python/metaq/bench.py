"""Produce benchmark: batched (mput with linger) against synchronous puts
from the same Python process, in one run, and optionally `metaq bench
produce` (the Go client) against the same broker in the same run.

    python3 -m metaq.bench --broker 127.0.0.1:8123 --topic meta-test \\
        --size 100 --messages 200000 --sync-messages 5000 [--metaq bin/metaq]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional

from .producer import Producer


def _broker_cpu(pid: Optional[int]) -> float:
    """utime+stime of pid in seconds (0 without a pid)."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_sync(broker: str, topic: str, size: int, n: int, pid: Optional[int]) -> Dict[str, float]:
    value = b"x" * size
    with Producer(broker) as p:
        p.partition_count(topic)
        cpu0, bcpu0, t0 = time.process_time(), _broker_cpu(pid), time.perf_counter()
        for _ in range(n):
            p.send(topic, value)
        dt = time.perf_counter() - t0
        return {"messages": n, "seconds": dt, "msgs_per_s": n / dt, "client_cpu_s": time.process_time() - cpu0,
                "broker_cpu_s": _broker_cpu(pid) - bcpu0}


def run_batched(broker: str, topic: str, size: int, n: int, batch: int, linger: float,
                pid: Optional[int]) -> Dict[str, float]:
    value = b"x" * size
    with Producer(broker, linger=linger, batch_size=batch, max_in_flight=16) as p:
        p.partition_count(topic)
        cpu0, bcpu0, t0 = time.process_time(), _broker_cpu(pid), time.perf_counter()
        futs = [p.send_async(topic, value) for _ in range(n)]
        p.flush()
        dt = time.perf_counter() - t0
        errs = sum(1 for f in futs if f.exception() is not None)
        if errs:
            raise SystemExit(f"bench: {errs} of {n} batched sends failed: {futs[0].exception()}")
        return {"messages": n, "seconds": dt, "msgs_per_s": n / dt, "client_cpu_s": time.process_time() - cpu0,
                "broker_cpu_s": _broker_cpu(pid) - bcpu0}


def run_go(metaq: str, broker: str, topic: str, size: int, n: int, batch: int, sync: bool) -> Dict[str, float]:
    """`metaq bench produce` with one producer (one connection), the same
    size and batch, or synchronous single puts."""
    args = [metaq, "--addr", broker, "bench", "produce", "--topic", topic, "--size", str(size), "--producers", "1",
            "--batch", str(batch), "--messages", str(n), "--json"]
    if sync:
        args.append("--sync")
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=600).stdout
    return json.loads(out)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m metaq.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--broker", default=os.environ.get("METAQ_ADDR", "127.0.0.1:8123"))
    ap.add_argument("--topic", default="meta-test")
    ap.add_argument("--size", type=int, default=100, help="message size in bytes")
    ap.add_argument("--messages", type=int, default=200000, help="messages of the batched run")
    ap.add_argument("--sync-messages", type=int, default=5000, help="messages of the synchronous run")
    ap.add_argument("--batch", type=int, default=1024, help="messages per mput")
    ap.add_argument("--linger", type=float, default=0.005, help="seconds a batch waits to fill")
    ap.add_argument("--rounds", type=int, default=1, help="alternate sync and batched this many times")
    ap.add_argument("--broker-pid", type=int, default=0, help="report the broker's CPU seconds (/proc)")
    ap.add_argument("--metaq", default="", help="the metaq CLI: also run `metaq bench produce` in this run")
    ap.add_argument("--json", action="store_true", help="print JSON")
    a = ap.parse_args(argv)
    rounds = []
    for _ in range(a.rounds):
        r = {"sync": run_sync(a.broker, a.topic, a.size, a.sync_messages, a.broker_pid),
             "batched": run_batched(a.broker, a.topic, a.size, a.messages, a.batch, a.linger, a.broker_pid)}
        if a.metaq:
            r["go_sync"] = run_go(a.metaq, a.broker, a.topic, a.size, a.sync_messages, 1, True)
            r["go"] = run_go(a.metaq, a.broker, a.topic, a.size, a.messages, a.batch, False)
        rounds.append(r)
    if a.json:
        json.dump(rounds, sys.stdout, indent=2)
        print()
        return 0
    for i, r in enumerate(rounds):
        s, b = r["sync"], r["batched"]
        print(f"round {i + 1}: {a.size} B messages, topic {a.topic}")
        print(f"  python sync put      {s['msgs_per_s']:>12,.0f} msgs/s  ({s['messages']} in {s['seconds']:.2f}s,"
              f" client CPU {1e6 * s['client_cpu_s'] / s['messages']:.1f} us/msg)")
        print(f"  python batched mput  {b['msgs_per_s']:>12,.0f} msgs/s  ({b['messages']} in {b['seconds']:.2f}s,"
              f" client CPU {1e6 * b['client_cpu_s'] / b['messages']:.1f} us/msg, batch {a.batch},"
              f" linger {a.linger * 1000:g} ms)")
        print(f"  batched / sync       {b['msgs_per_s'] / s['msgs_per_s']:>12.1f}x")
        if a.broker_pid:
            print(f"  broker CPU           sync {1e6 * s['broker_cpu_s'] / s['messages']:.1f} us/msg,"
                  f" batched {1e6 * b['broker_cpu_s'] / b['messages']:.1f} us/msg")
        if "go" in r:
            gs, g = r["go_sync"]["msgs_per_s"], r["go"]["msgs_per_s"]
            print(f"  go bench --sync      {gs:>12,.0f} msgs/s  (metaq bench produce --producers 1 --sync);"
                  f" python sync / go {s['msgs_per_s'] / gs:.2f}")
            print(f"  go bench --batch     {g:>12,.0f} msgs/s  (metaq bench produce --producers 1 --batch {a.batch});"
                  f" python batched / go {b['msgs_per_s'] / g:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
