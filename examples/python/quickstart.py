"""A tour of the Python client: produce with keys and headers (sync, async
and batched), a local transaction, then read everything back as a member of
a consumer group, committing as it goes.

    python3 examples/python/quickstart.py [topic]

The broker is $METAQ_ADDR (default 127.0.0.1:8123, the broker `make run`
starts, whose sample server.toml has the topic meta-test).
"""

import os
import sys
import uuid

import metaq

addr = os.environ.get("METAQ_ADDR", "127.0.0.1:8123")
topic = sys.argv[1] if len(sys.argv) > 1 else "meta-test"
run = uuid.uuid4().hex[:8]  # tells this run's messages from earlier ones

with metaq.Producer(addr, linger=0.005) as producer:
    # Synchronous: answered once the broker stored the message.
    r = producer.send(topic, b"hello", key="user-42", headers={"run": run, "kind": "greeting"})
    print(f"sent hello to partition {r.partition} at offset {r.offset}")
    # Asynchronous: futures; messages to one partition go in one mput.
    futures = [producer.send_async(topic, f"event {i}", key=f"user-{i % 5}", headers={"run": run})
               for i in range(100)]
    producer.flush()
    print(f"sent {sum(1 for f in futures if f.exception() is None)} events")
    # A local transaction: both messages or neither.
    with producer.transaction() as tx:
        tx.send(topic, b"debit", headers={"run": run}, partition=0)
        tx.send(topic, b"credit", headers={"run": run}, partition=0)
    print("committed a transaction")

group = f"quickstart-{run}"
seen = 0
with metaq.Consumer(addr, topic, group=group, start="earliest") as consumer:
    print(f"member of {group}, partitions {consumer.wait_assignment()}")
    while seen < 103:
        m = consumer.next(timeout=10)
        if m is None:
            sys.exit(f"only {seen} of this run's 103 messages arrived")
        if m.header("run") == run.encode():
            seen += 1
print(f"read {seen} messages back, offsets committed for group {group}")
