"""SUnion throughput next to a bare confluent-kafka consume-produce loop, on the same input.

``measure(bootstrap)`` writes N records (with BOUNDARY records) to a fresh input
topic, then times (a) a bare loop that copies them with a transactional producer,
committing every ~1000 records or 100 ms, reading with read_committed, and (b) the
SUnion over the same input; each until all N data records are committed on its
output. ``ratio`` is sunion/bare: the share of the bare loop's rate the SUnion keeps
(0.5 = a factor 2 slower). Topics are deleted afterwards.

``python -m medusa.sunion.bench --bootstrap 127.0.0.1:19092 --records 20000``
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from medusa.envelope import Envelope, TupleType, boundary
from medusa.settings import KafkaClientSettings
from medusa.sunion.config import SUnionConfig, SUnionInput
from medusa.sunion.service import SUnion
from medusa.topics import dead_letter_topic, delete_topics, ensure_topics

BASE_MS = 1_700_000_000_000
INPUT_PARTITIONS = 2
BOUNDARY_EVERY = 1000
"""Records between two rounds of boundaries: with one record per ms of stime, one
round per 1 s bucket, as producers at 1000 records/s would send."""
PAYLOAD = b"\x00\x00\x00\x00\x01" + bytes(range(48))
"""Confluent wire format: magic byte, schema id 1, a 48-byte body."""
PROGRESS_EVERY_S = 2.0


def measure(bootstrap: str, records: int = 100_000,
            kafka: KafkaClientSettings | None = None) -> dict[str, float]:
    """Times the bare loop and the SUnion over the same ``records`` input records."""
    kafka = kafka or KafkaClientSettings()
    run = uuid.uuid4().hex[:8]
    input_topic = f"medusa.bench.sunion.{run}.input"
    bare_output, sunion_output = f"{input_topic}.bare", f"{input_topic}.sunion"
    admin_config = kafka.librdkafka(bootstrap_servers=bootstrap)
    ensure_topics(admin_config, [input_topic], partitions=INPUT_PARTITIONS)
    ensure_topics(admin_config, [bare_output, sunion_output], partitions=1)
    try:
        _write_input(kafka, bootstrap, input_topic, records)
        bare_s = _bare_loop(kafka, bootstrap, input_topic, bare_output, records)
        print(f"bare loop: {records} records in {bare_s:.2f}s "
              f"({records / bare_s:,.0f}/s)", flush=True)
        sunion_s = _sunion(kafka, bootstrap, input_topic, sunion_output, records)
        print(f"SUnion:    {records} records in {sunion_s:.2f}s "
              f"({records / sunion_s:,.0f}/s)", flush=True)
    finally:
        delete_topics(admin_config, [input_topic, bare_output, sunion_output,
                                     dead_letter_topic(input_topic)])
    bare_rate, sunion_rate = records / bare_s, records / sunion_s
    return {"records": records, "bare_records_per_s": bare_rate,
            "sunion_records_per_s": sunion_rate, "ratio": sunion_rate / bare_rate}


def _write_input(kafka: KafkaClientSettings, bootstrap: str, topic: str, records: int) -> None:
    """One record per ms of stime, keys spread over the partitions, boundaries every
    BOUNDARY_EVERY records and a final one past the last bucket."""
    print(f"writing {records} records to {topic}", flush=True)
    producer = Producer(kafka.librdkafka(bootstrap_servers=bootstrap,
                                         **{"enable.idempotence": True, "linger.ms": 20}))

    def send(**kwargs: Any) -> None:
        while True:
            try:
                producer.produce(topic, **kwargs)
                return
            except BufferError:
                producer.poll(0.1)

    def boundaries(stime: int) -> None:
        for partition in range(INPUT_PARTITIONS):
            send(value=None, partition=partition,
                 headers=boundary("bench", partition, stime).headers())

    for index in range(records):
        stime = BASE_MS + index
        send(key=f"k{index % 97}".encode(), value=PAYLOAD,
             headers=Envelope(TupleType.STABLE, f"bench/{index}", stime).headers())
        if (index + 1) % BOUNDARY_EVERY == 0:
            boundaries(stime)
    boundaries(BASE_MS + records + 10 * BOUNDARY_EVERY)
    if producer.flush(60) != 0:
        raise RuntimeError(f"{topic}: input records undelivered after 60s")


def _bare_loop(kafka: KafkaClientSettings, bootstrap: str, input_topic: str, output: str,
               records: int) -> float:
    """Copies every record, one transaction per ~1000 records or 100 ms; the seconds until
    ``records`` data records are committed."""
    print("bare consume-produce loop ...", flush=True)
    started = time.monotonic()
    consumer = Consumer(kafka.librdkafka(
        bootstrap_servers=bootstrap, **{"group.id": f"medusa.bench.bare.{output}",
                                        "enable.auto.commit": False,
                                        "isolation.level": "read_committed",
                                        "fetch.wait.max.ms": 100}))
    consumer.assign([TopicPartition(input_topic, p, 0) for p in range(INPUT_PARTITIONS)])
    producer = Producer(kafka.librdkafka(
        bootstrap_servers=bootstrap, **{"transactional.id": f"medusa.bench.bare.{output}",
                                        "linger.ms": 5}))
    producer.init_transactions(60)
    committed = in_transaction = data = 0
    transaction_started = time.monotonic()
    next_progress = started + PROGRESS_EVERY_S
    producer.begin_transaction()
    try:
        while committed < records:
            for message in consumer.consume(1000 - in_transaction, timeout=0.05):
                if message.error() is not None:
                    continue
                value = message.value()
                while True:
                    try:
                        producer.produce(output, value, message.key(), 0,
                                         headers=message.headers())
                        break
                    except BufferError:
                        producer.poll(0.1)
                in_transaction += 1
                data += value is not None
            now = time.monotonic()
            if in_transaction and (in_transaction >= 1000 or now - transaction_started >= 0.1):
                producer.commit_transaction(60)
                committed, in_transaction = data, 0
                producer.begin_transaction()
                transaction_started = now
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY_S
                print(f"  bare: {committed} committed", flush=True)
        return time.monotonic() - started
    finally:
        producer.abort_transaction(60)
        consumer.close()


def _sunion(kafka: KafkaClientSettings, bootstrap: str, input_topic: str, output: str,
            records: int) -> float:
    """The SUnion over the same input; the seconds until ``records`` tuples are committed."""
    print("SUnion ...", flush=True)
    config = SUnionConfig(fragment=f"bench/{output}", output_topic=output,
                          output_bootstrap=bootstrap,
                          inputs=[SUnionInput(name="input", topic=input_topic,
                                              bootstrap=bootstrap)])
    stop = threading.Event()
    started = time.monotonic()
    with SUnion(config, kafka) as sunion:
        failures: list[BaseException] = []

        def loop() -> None:
            try:
                sunion.run(stop)
            except BaseException as error:  # re-raised below
                failures.append(error)

        thread = threading.Thread(target=loop, name="sunion-bench", daemon=True)
        thread.start()
        next_progress = started + PROGRESS_EVERY_S
        try:
            while sunion.counters.records_out < records:
                if failures:
                    raise failures[0]
                if not thread.is_alive():
                    raise RuntimeError("the SUnion stopped before writing every record")
                time.sleep(0.01)
                if time.monotonic() >= next_progress:
                    next_progress = time.monotonic() + PROGRESS_EVERY_S
                    print(f"  SUnion: {sunion.counters.records_out} committed", flush=True)
            elapsed = time.monotonic() - started
        finally:
            stop.set()
            thread.join(60)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m medusa.sunion.bench",
                                     description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--bootstrap", default=KafkaClientSettings().bootstrap_servers)
    parser.add_argument("--records", type=int, default=100_000)
    args = parser.parse_args()
    print(json.dumps(measure(args.bootstrap, args.records)))


if __name__ == "__main__":
    main()
