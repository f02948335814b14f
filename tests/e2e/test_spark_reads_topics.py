"""Spark with the fetched connectors reads a producer's topic and decodes its Avro."""

import pytest
from pyspark.sql import functions as F

from medusa.envelope import ID_HEADER, STIME_HEADER, TYPE_HEADER
from medusa.producing import TupleProducer
from medusa.schemas import load_schema
from medusa.sensors import sensor_readings, to_dict
from medusa.settings import spark_kafka_options
from medusa.topics import ensure_topics
from medusa_spark.wire import decode_avro, header, schema_id

pytestmark = pytest.mark.e2e


def test_spark_decodes_the_wire_format_with_the_writer_schema(
        spark, kafka_config, registry, topic) -> None:
    ensure_topics(kafka_config, [topic], partitions=2)
    readings = list(sensor_readings(sensors=5, start_ms=5_000, interval_ms=1000, count=40))
    with TupleProducer(kafka_config, registry, topic, load_schema("sensor_reading"), "smoke",
                       to_dict=to_dict) as producer:
        for reading in readings:
            producer.produce(reading, reading.tuple_id, reading.measured_at, key=reading.sensor_id)

    raw = (spark.read.format("kafka")
           .options(**spark_kafka_options(kafka_config["bootstrap.servers"]))
           .option("subscribe", topic).option("startingOffsets", "earliest")
           .option("includeHeaders", "true").load())
    data = raw.where(F.col("value").isNotNull())
    ids = {row.id for row in data.select(schema_id(F.col("value")).alias("id")).collect()}
    assert len(ids) == 1
    writer_schema = registry.get_schema(ids.pop()).schema_str

    decoded = data.select(
        header(TYPE_HEADER).alias("type"), header(ID_HEADER).alias("tuple_id"),
        header(STIME_HEADER).cast("long").alias("stime"),
        decode_avro(F.col("value"), writer_schema).alias("reading"),
    ).select("type", "tuple_id", "stime", "reading.*")
    rows = {row.tuple_id: row for row in decoded.collect()}
    assert len(rows) == len(readings)
    for reading in readings:
        row = rows[reading.tuple_id]
        assert row.type == "STABLE"
        assert row.stime == reading.measured_at
        assert (row.sensor_id, row.kind, row.value, row.unit, row.site) == (
            reading.sensor_id, reading.kind, reading.value, reading.unit, reading.site)
        assert int(row.measured_at.timestamp() * 1000) == reading.measured_at

    boundaries = raw.where(header(TYPE_HEADER) == "BOUNDARY").count()
    assert boundaries >= 2, "BOUNDARY records are visible to Spark too"
