"""The Kafka error classes crawlhive raises and catches, and the two small Kafka types its callers
pass around (:class:`TopicPartition`, :class:`OffsetAndMetadata`).

Why our own: every producer, consumer and admin client is on librdkafka (``confluent-kafka``,
through :mod:`crawlhive.utils.backends.rdkafka` and
:mod:`crawlhive.utils.backends.kafka_clients`), whose one ``KafkaException`` carries an error code.
Callers' ``except`` clauses and the worker loop's rules (what is transient, what means a consumer
lost its group, what record can never be sent) want classes, so the adapter turns each code into
one of these (:func:`for_code`). They used to be kafka-python's, but importing ``kafka.errors``
loads the whole kafka-python package (about 0.1 s before any process can start working: the
cleaner's consumer subscribed that much later) for a few dozen classes. So there is one set of
types for the one adapter, and this module imports nothing.

The names, the hierarchy (every class a :class:`KafkaError`, itself a ``RuntimeError``; a broker's
error code a :class:`BrokerResponseError` with its ``errno``) and ``retriable`` keep kafka-python's
meaning, so code and messages read as before.

Why in the contract layer: it is the floor every other layer may import, and the contract itself
classifies these errors (:func:`~crawlhive.utils.contract.produce.never_sendable`: a record Kafka
refuses for good, docs/contract.md §10.5); the Kafka protocol's error codes are part of what goes
over the wire.
"""

from __future__ import annotations

from typing import ClassVar, NamedTuple


class TopicPartition(NamedTuple):
    """One partition of a topic (hashable: a key of offsets, positions and poll results)."""

    topic: str
    partition: int


class OffsetAndMetadata(NamedTuple):
    """An offset to commit for a partition: the next one to read."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


class KafkaError(RuntimeError):
    """Any Kafka failure: a client's or a broker's.

    ``str()`` names the class before the message (``KafkaTimeoutError: …``), so a log line or a
    BackendUnavailable message built from it says what failed."""

    #: True when the same request may succeed if tried again later (a broker busy or away).
    retriable: ClassVar[bool] = False

    def __str__(self) -> str:
        text = super().__str__()
        return f"{type(self).__name__}: {text}" if text else type(self).__name__


class IllegalStateError(KafkaError):
    """A call the client's state does not allow (seeking a partition not assigned, committing
    without a group)."""


class KafkaConfigurationError(KafkaError):
    """The client refused its options (a bad combination in code, not an unreachable broker)."""


class KafkaTimeoutError(KafkaError):
    """A request or a record's delivery did not complete in time."""

    retriable = True


class KafkaConnectionError(KafkaError):
    """No connection to a broker (refused, lost, or no broker answered)."""

    retriable = True


class CommitFailedError(KafkaError):
    """A commit the group refused: the consumer was no longer a member of it."""


class BrokerResponseError(KafkaError):
    """An error code a broker answered (the Kafka protocol's codes, all positive).

    A subclass stands for each code crawlhive's code or tests name; another code is a
    BrokerResponseError with that ``errno``."""

    #: The protocol's error code (None only on this base class before a code is known).
    errno: int | None = None

    def __init__(self, *args: object, errno: int | None = None) -> None:
        super().__init__(*args)
        if errno is not None:
            self.errno = errno

    def __str__(self) -> str:
        return f"[Error {self.errno}] {super().__str__()}"


class CorruptRecordError(BrokerResponseError):
    errno = 2
    retriable = True


class UnknownTopicOrPartitionError(BrokerResponseError):
    errno = 3
    retriable = True


class LeaderNotAvailableError(BrokerResponseError):
    errno = 5
    retriable = True


class NotLeaderForPartitionError(BrokerResponseError):
    errno = 6
    retriable = True


class RequestTimedOutError(BrokerResponseError):
    errno = 7
    retriable = True


class MessageSizeTooLargeError(BrokerResponseError):
    """A record over the producer's (KAFKA_PRODUCER_MAX_REQUEST_SIZE) or the broker's limit."""

    errno = 10


class NetworkExceptionError(BrokerResponseError):
    errno = 13
    retriable = True


class CoordinatorLoadInProgressError(BrokerResponseError):
    errno = 14
    retriable = True


class CoordinatorNotAvailableError(BrokerResponseError):
    errno = 15
    retriable = True


class NotCoordinatorError(BrokerResponseError):
    errno = 16
    retriable = True


class InvalidTopicError(BrokerResponseError):
    errno = 17


class RecordListTooLargeError(BrokerResponseError):
    errno = 18


class NotEnoughReplicasError(BrokerResponseError):
    errno = 19
    retriable = True


class NotEnoughReplicasAfterAppendError(BrokerResponseError):
    errno = 20
    retriable = True


class IllegalGenerationError(BrokerResponseError):
    errno = 22


class UnknownMemberIdError(BrokerResponseError):
    errno = 25


class RebalanceInProgressError(BrokerResponseError):
    errno = 27


class TopicAuthorizationFailedError(BrokerResponseError):
    errno = 29


class GroupAuthorizationFailedError(BrokerResponseError):
    errno = 30


class UnsupportedSaslMechanismError(BrokerResponseError):
    errno = 33


class TopicAlreadyExistsError(BrokerResponseError):
    errno = 36


class InvalidPartitionsError(BrokerResponseError):
    errno = 37


class InvalidReplicationFactorError(BrokerResponseError):
    errno = 38


class SaslAuthenticationFailedError(BrokerResponseError):
    errno = 58


class InvalidRecordError(BrokerResponseError):
    errno = 87


#: The class of each broker error code above (every subclass of BrokerResponseError here names one).
BY_CODE: dict[int, type[BrokerResponseError]] = {
    cls.errno: cls for cls in BrokerResponseError.__subclasses__() if cls.errno is not None
}


def for_code(code: int, text: str) -> BrokerResponseError:
    """The error of broker error *code* (positive): its class above, else a BrokerResponseError
    carrying the code."""
    cls = BY_CODE.get(code)
    if cls is not None:
        return cls(text)
    return BrokerResponseError(text, errno=code)
