"""Topic administration: create the topics a run needs, idempotently."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

# Dead letters belong to medusa.dead_letters; re-exported here for the modules that still
# import them from medusa.topics.
from medusa.dead_letters import DEAD_LETTER_SUFFIX as DEAD_LETTER_SUFFIX
from medusa.dead_letters import dead_letter_topic as dead_letter_topic

log = logging.getLogger("medusa.topics")

RETRY_S = 0.5
"""Between attempts to create topics no broker could take yet."""


def ensure_topics(
    admin_config: dict[str, Any],
    topics: Iterable[str],
    partitions: int = 4,
    replication_factor: int = -1,
    timeout_s: float = 30.0,
    config: dict[str, str] | None = None,
) -> None:
    """Create missing topics (with ``config``, e.g. compaction); existing ones stay as they are.

    ``replication_factor`` -1 takes the cluster's own (a replica per broker, up to 3)."""
    admin = AdminClient(admin_config)
    wanted = {t: NewTopic(t, num_partitions=partitions, replication_factor=replication_factor,
                          config=config or {})
              for t in dict.fromkeys(topics)}
    deadline = time.monotonic() + timeout_s
    while wanted:
        left_s = max(1.0, deadline - time.monotonic())
        futures = admin.create_topics(list(wanted.values()), operation_timeout=left_s,
                                      request_timeout=left_s)
        for topic, future in futures.items():
            try:
                future.result(timeout=left_s)
            except TimeoutError:
                raise RuntimeError(f"could not create topic {topic}: the cluster did not "
                                   f"answer within {timeout_s:.0f}s") from None
            except KafkaException as failure:
                error: KafkaError = failure.args[0]
                if _unplaced(error, replication_factor) and time.monotonic() < deadline:
                    continue  # asked again
                if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RuntimeError(f"could not create topic {topic}: {error.str()}") from None
            del wanted[topic]
        if wanted:
            time.sleep(RETRY_S)


_UNANSWERED = (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)


def _unplaced(error: KafkaError, replication_factor: int) -> bool:
    """Whether a creation failed for want of a broker to place it on: at the cluster's own
    replication factor (never more than its brokers) only while brokers are fenced, for
    the seconds a stalled heartbeat takes to come back."""
    return error.code() == KafkaError.INVALID_REPLICATION_FACTOR and replication_factor == -1


METADATA_ATTEMPT_S = 10.0
"""One metadata request's wait; a cluster that stays silent longer is asked again."""


def partition_count(admin_config: dict[str, Any], topic: str, timeout_s: float = 60.0) -> int:
    """How many partitions ``topic`` has. RuntimeError if it does not exist; TimeoutError if
    the cluster gave no metadata within ``timeout_s`` (a broker stalled for seconds behind
    its disk or a full machine answers a request sent again)."""
    admin = AdminClient(admin_config)
    deadline = time.monotonic() + timeout_s
    while True:
        left_s = deadline - time.monotonic()
        try:
            metadata = admin.list_topics(topic=topic, timeout=max(1.0, min(METADATA_ATTEMPT_S,
                                                                           left_s)))
            break
        except KafkaException as failure:
            error: KafkaError = failure.args[0]
            if error.code() not in _UNANSWERED:
                raise RuntimeError(f"topic {topic}: {error.str()}") from None
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topic {topic}: the cluster gave no metadata within "
                                   f"{timeout_s:.0f}s ({error.str()})") from None
            log.warning("topic %s: no metadata yet (%s); asking again", topic, error.str())
    described = metadata.topics.get(topic)
    if described is None or described.error is not None:
        reason = described.error.str() if described and described.error else "unknown topic"
        raise RuntimeError(f"topic {topic}: {reason}")
    return len(described.partitions)


def delete_topics(admin_config: dict[str, Any], names: Iterable[str],
                  timeout_s: float = 30.0) -> None:
    """Deletes the topics ``names``. Best effort: a topic left behind is only disk used,
    and is logged."""
    names = list(names)
    if not names:
        return
    # Held until every answer is in: a client dropped at once destroys its handle, and
    # the requests fail unsent ("Broker handle destroyed for termination").
    admin = AdminClient(admin_config)
    for topic, future in admin.delete_topics(names, operation_timeout=timeout_s).items():
        try:
            error = future.exception(timeout_s)
        except TimeoutError:
            error = TimeoutError(f"no answer within {timeout_s:.0f}s")
        if error is not None:
            log.warning("could not delete topic %s: %s", topic, error)


def delete_topics_named(admin_config: dict[str, Any], prefix: str,
                        timeout_s: float = 30.0) -> list[str]:
    """Deletes every topic whose name starts with ``prefix`` (a network's ``topic_prefix``);
    returns their names."""
    listed = AdminClient(admin_config).list_topics(timeout=timeout_s).topics
    names = [t for t in listed if t.startswith(prefix)]
    delete_topics(admin_config, names, timeout_s)
    return names
