"""Typed errors of the metaq client.

Every error the broker answers is a :class:`BrokerError` carrying the reply's
code, the machine-readable cause (docs/protocol.md, "Causes") and the message.
Causes with a meaning for clients have their own subclasses, chosen from the
cause, never by searching the text.
"""

from __future__ import annotations

from typing import Optional

#: A put or get named a partition the topic does not have.
CAUSE_PARTITION_OUT_OF_RANGE = "partition out of range"
#: A get inside data that failed its checksum on the broker's disk.
CAUSE_CORRUPT_DATA = "corrupt data"
#: The broker is a read-only slave.
CAUSE_READ_ONLY = "read-only slave"
#: A put's properties block is malformed or over a limit.
CAUSE_BAD_PROPERTIES = "bad properties"

KNOWN_CAUSES = (CAUSE_PARTITION_OUT_OF_RANGE, CAUSE_CORRUPT_DATA, CAUSE_READ_ONLY, CAUSE_BAD_PROPERTIES)

# Reply codes (docs/protocol.md, "Replies").
OK = 200
MOVED = 301
BAD_REQUEST = 400
UNAUTHORIZED = 401
FORBIDDEN = 403
NOT_FOUND = 404
CONFLICT = 409
INTERNAL_ERROR = 500
BUSY = 503
TIMEOUT = 504


def parse_cause(body: str) -> "tuple[str, str]":
    """Split a reply body into (cause, message); cause is "" when the body
    does not start with a known cause (sdk/protocol.ParseCause)."""
    for c in KNOWN_CAUSES:
        if body.startswith(c + ": "):
            return c, body[len(c) + 2:]
    return "", body


class MetaqError(Exception):
    """The base of every error this package raises."""


class ProtocolError(MetaqError):
    """The broker sent a reply this client cannot read (framing lost)."""


class CorruptRecordError(ProtocolError, ValueError):
    """A fetched block holds a record header that cannot be (a negative
    length): the bytes were damaged, or the read did not start at a
    record. (A ValueError too, as iter_records raised before.)"""


class ConnectionLostError(MetaqError, ConnectionError):
    """The connection broke (or could not be made) before the reply came.

    A request that was sent may or may not have been carried out."""


class RequestTimeoutError(MetaqError, TimeoutError):
    """No reply within the request timeout."""


class ClosedError(MetaqError):
    """The client (connection, producer or consumer) was closed."""


class PropertiesError(MetaqError, ValueError):
    """A message's key, tags, headers or timestamp break the properties
    block's format or limits (message.ErrBadProperties /
    message.ErrPropertiesLimit in the Go SDK); nothing was sent."""


class ChecksumError(MetaqError):
    """A fetched record failed its crc: the read started inside a record or
    the bytes were damaged in transit."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        super().__init__(f"metaq: record at {topic}-{partition}@{offset} failed its checksum")
        self.topic, self.partition, self.offset = topic, partition, offset


class TransactionError(MetaqError):
    """A transaction can no longer commit (its connection was lost, so the
    broker rolled it back, or it was already ended)."""


class BrokerError(MetaqError):
    """An error reply: code (400, 401, 403, 404, 409, 500, 503, ...), cause
    (one of the CAUSE_* constants or "") and the broker's message."""

    def __init__(self, code: int, body: str, command: str = "") -> None:
        self.code = code
        self.body = body
        self.cause, self.message = parse_cause(body)
        self.command = command
        where = f"{command}: " if command else ""
        super().__init__(f"metaq: {where}broker answered {code}: {body}")

    @property
    def retriable(self) -> bool:
        """Busy, timeout and stale-partition errors are worth retrying."""
        return self.code in (BUSY, TIMEOUT) or self.cause == CAUSE_PARTITION_OUT_OF_RANGE


class AuthenticationError(BrokerError):
    """401: the login failed, or the connection is not authenticated."""


class ForbiddenError(BrokerError):
    """403: an ACL refused the request, the partition is closed, or the
    broker is a read-only slave."""


class PartitionOutOfRangeError(BrokerError):
    """The partition named does not exist (the partition count is stale)."""


class CorruptDataError(BrokerError):
    """The broker found the requested data damaged on its disk; do not
    retry as is (the body names the next valid offset)."""


class BadPropertiesError(BrokerError, PropertiesError):
    """The broker refused a message's properties block; retrying fails the
    same way."""


class ConflictError(BrokerError):
    """409: a group member id is still registered on another connection."""


class BusyError(BrokerError):
    """503: the broker is busy (or switching over); retry later."""


def broker_error(code: int, body: bytes, command: str = "") -> BrokerError:
    """The typed error for an error reply."""
    text = body.decode("utf-8", "replace")
    cause, _ = parse_cause(text)
    cls: "type[BrokerError]" = BrokerError
    if cause == CAUSE_PARTITION_OUT_OF_RANGE:
        cls = PartitionOutOfRangeError
    elif cause == CAUSE_CORRUPT_DATA:
        cls = CorruptDataError
    elif cause == CAUSE_BAD_PROPERTIES:
        cls = BadPropertiesError
    elif code == UNAUTHORIZED:
        cls = AuthenticationError
    elif code == FORBIDDEN:
        cls = ForbiddenError
    elif code == CONFLICT:
        cls = ConflictError
    elif code == BUSY:
        cls = BusyError
    return cls(code, text, command)


def cause_of(err: Optional[BaseException]) -> str:
    """The broker cause of err, or "" when it has none."""
    return err.cause if isinstance(err, BrokerError) else ""
