"""Topic administration: create the topics a run needs, idempotently."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

# Dead letters belong to medusa.dead_letters; re-exported here for the modules that still
# import them from medusa.topics.
from medusa.dead_letters import DEAD_LETTER_SUFFIX as DEAD_LETTER_SUFFIX
from medusa.dead_letters import dead_letter_topic as dead_letter_topic


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
    wanted = [NewTopic(t, num_partitions=partitions, replication_factor=replication_factor,
                       config=config or {})
              for t in dict.fromkeys(topics)]
    if not wanted:
        return
    futures = admin.create_topics(wanted, operation_timeout=timeout_s, request_timeout=timeout_s)
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except TimeoutError:
            raise RuntimeError(f"could not create topic {topic}: the cluster did not answer "
                               f"within {timeout_s:.0f}s") from None
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                reason = error.args[0].str()
                raise RuntimeError(f"could not create topic {topic}: {reason}") from None


def partition_count(admin_config: dict[str, Any], topic: str, timeout_s: float = 10.0) -> int:
    metadata = AdminClient(admin_config).list_topics(topic=topic, timeout=timeout_s)
    described = metadata.topics.get(topic)
    if described is None or described.error is not None:
        reason = described.error.str() if described and described.error else "unknown topic"
        raise RuntimeError(f"topic {topic}: {reason}")
    return len(described.partitions)


def delete_topics(admin_config: dict[str, Any], names: Iterable[str],
                  timeout_s: float = 30.0) -> None:
    """Deletes the topics ``names``. Best effort: a topic left behind is only disk used."""
    names = list(names)
    if names:
        for future in AdminClient(admin_config).delete_topics(
                names, operation_timeout=timeout_s).values():
            future.exception(timeout_s)


def delete_topics_named(admin_config: dict[str, Any], prefix: str,
                        timeout_s: float = 30.0) -> list[str]:
    """Deletes every topic whose name starts with ``prefix`` (a network's ``topic_prefix``);
    returns their names."""
    listed = AdminClient(admin_config).list_topics(timeout=timeout_s).topics
    names = [t for t in listed if t.startswith(prefix)]
    delete_topics(admin_config, names, timeout_s)
    return names
