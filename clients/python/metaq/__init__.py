"""metaq: a Python client for metaq-go (standard library only).

See docs/python.md. The main types:

- :class:`Connection`: one broker connection (TLS, SASL PLAIN, pipelining,
  reconnects with backoff);
- :class:`Producer`: sync and async sends, mput batching, partition
  selection, local transactions;
- :class:`Consumer`: direct partition reads and consumer groups in direct
  mode, with commits.
"""

from .conn import Connection, Reply
from .consumer import Consumer, FetchResult
from .errors import (AuthenticationError, BadPropertiesError, BrokerError, BusyError, ChecksumError, ClosedError,
                     ConflictError, ConnectionLostError, CorruptDataError, CorruptRecordError,
                     ForbiddenError, MetaqError,
                     PartitionOutOfRangeError, PropertiesError, ProtocolError, RequestTimeoutError,
                     TransactionError)
from .message import Message, cluster_partitions, id_parts, key_index, key_partition, make_message
from .producer import HashByKey, Producer, RoundRobin, SendResult, Transaction

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError", "BadPropertiesError", "BrokerError", "BusyError", "ChecksumError", "ClosedError",
    "ConflictError", "Connection", "ConnectionLostError", "Consumer", "CorruptDataError", "CorruptRecordError",
    "FetchResult",
    "ForbiddenError", "HashByKey", "Message", "MetaqError", "PartitionOutOfRangeError", "Producer",
    "PropertiesError", "ProtocolError", "Reply", "RequestTimeoutError", "RoundRobin", "SendResult",
    "Transaction", "TransactionError", "cluster_partitions", "id_parts", "key_index", "key_partition",
    "make_message",
]
