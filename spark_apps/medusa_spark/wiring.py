"""Where a network's data lives: its topics, their schemas, and each fragment's wiring.

Declared streams are topics of their participant's cluster. A box output that
another fragment reads gets a topic of its own, ``medusa.<network>.<box>``, on
its participant's cluster (``participant:`` on the box, else the network's).
Arrows inside a fragment have no topic. Each fragment reads one more topic, the
one its SUnion writes on the cluster of the node that runs it; its name carries
the fragment's fingerprint, so a changed definition starts on a topic (and a
checkpoint) of its own instead of resuming from state that no longer fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from medusa.endpoints import Endpoints
from medusa.envelope import boundary
from medusa.registry import register
from medusa.schemas import load_schema
from medusa.settings import kafka_config
from medusa.topics import dead_letter_topic, ensure_topics, partition_count
from medusa_spark.avro_types import record_schema, struct_of
from medusa_spark.durations import duration_ms
from medusa_spark.fragment import FragmentOutput, FragmentWiring, Instance
from medusa_spark.network.fragments import Fragment, read_elsewhere
from medusa_spark.network.validate import Plan
from medusa_spark.streams import KafkaStream

SUNION_PARTITIONS = 1
"""One partition: a bucket's transaction then becomes visible to Spark all at once."""


def announce_start(stream: KafkaStream, partitions: int) -> None:
    """A BOUNDARY at stime 0 on every partition of a new box topic.

    The SUnion of a fragment that reads the topic holds everything back until every
    partition has shown a boundary; this first one lets it go as soon as the upstream
    fragment's own boundaries come.
    """
    producer = Producer(kafka_config(stream.bootstrap, **{"enable.idempotence": True}))
    for partition in range(partitions):
        envelope = boundary(f"{stream.topic}/start", partition, 0)
        producer.produce(stream.topic, value=None, partition=partition,
                         headers=envelope.headers())
    if producer.flush(30) != 0:
        raise RuntimeError(f"could not write the start boundary of {stream.topic}")


@dataclass
class NetworkTopics:
    """The topics of one copy of a network (``prefix``), by stream or box name."""

    plan: Plan
    prefix: str
    streams: dict[str, KafkaStream]
    """Declared streams, and the box outputs that leave their fragment."""
    participants: dict[str, str]
    """Stream or box name -> participant of its topic."""


def network_topics(plan: Plan, fragments: dict[str, Fragment], endpoints: Endpoints,
                   registry: SchemaRegistryClient, topic_prefix: str = "",
                   announce: bool = True) -> NetworkTopics:
    """Creates the topics and registers the schemas the network needs (idempotently).

    ``topic_prefix`` runs a copy of the network on topics of its own (tests, benchmarks).
    ``announce`` writes the start BOUNDARY into new box topics: once, when the network is
    deployed, not again when a node starts or takes over a fragment. Without it, nothing
    is created either (the deploy did): a node cut off from another participant's cluster
    still starts its fragments, which then go on within their availability bound.
    """
    network = plan.network
    prefix = network.topic_prefix + topic_prefix
    streams: dict[str, KafkaStream] = {}
    participants: dict[str, str] = {}
    for name, spec in network.streams.items():
        bootstrap = endpoints.bootstrap(spec.participant)
        topic = prefix + spec.topic
        if announce:
            ensure_topics(kafka_config(bootstrap), [topic, dead_letter_topic(topic)],
                          partitions=network.partitions)
        streams[name] = _registered(registry, topic, bootstrap,
                                    load_schema(spec.schema_name).text)
        participants[name] = spec.participant
    leaving = {box for fragment in fragments.values() for box in fragment.outputs}
    for box in plan.order:
        declared = plan.output_stream[box]
        if declared is not None:
            streams[box] = streams[declared]
            participants[box] = participants[declared]
            continue
        if box not in leaving:
            continue  # a DataFrame edge inside its fragment
        participant = network.boxes[box].participant or network.participant
        bootstrap = endpoints.bootstrap(participant)
        topic = prefix + network.intermediate_topic(box)
        if announce:
            ensure_topics(kafka_config(bootstrap), [topic, dead_letter_topic(topic)],
                          partitions=network.partitions)
        schema = record_schema(plan.output_schemas[box], box,
                               f"medusa.network.{network.name.replace('-', '_')}")
        streams[box] = _registered(registry, topic, bootstrap, schema)
        participants[box] = participant
        if announce:
            announce_start(streams[box], network.partitions)
    return NetworkTopics(plan, prefix, streams, participants)


def sunion_topic(topics: NetworkTopics, fragment: Fragment) -> str:
    network = topics.plan.network
    fingerprint = fragment.fingerprint(topics.plan, topics.prefix)
    return f"{topics.prefix}medusa.{network.name}.{fragment.name}.{fingerprint}.in"


def topic_uses(topics: NetworkTopics, fragment: Fragment) -> dict[str, Any]:
    """What the fragment reads and writes, by cluster: the catalog keeps it with the
    fragment, and the ACLs a partner that runs it gets are made from it."""
    network = topics.plan.network

    def use(name: str) -> dict[str, str]:
        return {"participant": topics.participants[name], "topic": topics.streams[name].topic}
    reads = [use(name) for name in fragment.inputs]
    # A fragment moved off its origin's node rebases from its SUnion topic there.
    reads.append({"participant": network.participant, "topic": sunion_topic(topics, fragment)})
    return {"reads": reads, "writes": [use(box) for box in fragment.outputs],
            "source_topic": sunion_topic(topics, fragment)}


def fragment_wiring(topics: NetworkTopics, network_name: str, fragment: Fragment,
                    node_bootstrap: str, max_delay_ms: int | None = None,
                    instance: Instance | None = None) -> FragmentWiring:
    """How ``fragment`` (or one ``instance`` of it) runs on a node whose cluster is at
    ``node_bootstrap``, with DPC's delay ``max_delay_ms`` (see
    ``fragments.fragment_delays``)."""
    plan = topics.plan
    source_topic = sunion_topic(topics, fragment) + (instance.suffix if instance else "")
    in_query = plan.network.sunion == "in-query"
    if not in_query:
        ensure_topics(kafka_config(node_bootstrap), [source_topic],
                      partitions=SUNION_PARTITIONS)
    outputs = {}
    shared = read_elsewhere(plan.network, fragment.boxes) if instance else {}
    for box in fragment.outputs:
        stream = topics.streams[box]
        partitions = partition_count(kafka_config(stream.bootstrap), stream.topic)
        owned = None
        if instance is not None and instance.count > 1 and box in shared:
            owned = tuple(p for p in range(partitions) if p % instance.count == instance.index)
        outputs[box] = FragmentOutput(
            box, stream, struct_of(stream.schema), tuple(plan.network.boxes[box].key),
            partitions, owned)
    return FragmentWiring(
        network=network_name, fragment=fragment,
        source=KafkaStream(source_topic, node_bootstrap, 0, ""),
        inputs={name: topics.streams[name] for name in fragment.inputs},
        outputs=outputs, bucket_ms=duration_ms(plan.network.bucket),
        fingerprint=fragment.fingerprint(plan, topics.prefix), topic_prefix=topics.prefix,
        max_delay_ms=max_delay_ms, instance=instance, sunion_in_query=in_query)


def _registered(registry: SchemaRegistryClient, topic: str, bootstrap: str,
                schema_text: str) -> KafkaStream:
    registration = register(registry, topic, schema_text)
    return KafkaStream(topic, bootstrap, registration.schema_id, schema_text)
