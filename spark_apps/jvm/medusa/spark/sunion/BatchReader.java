package medusa.spark.sunion;

import java.io.IOException;
import java.io.Serializable;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads one release: from the tracker's memory when the task runs in the driver's JVM and
 * the release is still there, else from Kafka by the ranges its offset names (a restart, a
 * replica, or a node on a Spark cluster), keeping what {@link SUnionOffset} says a release
 * holds. Both give the same rows in the same order: the tuples by (stime, input,
 * partition, offset), then the release's BOUNDARY.
 */
public final class BatchReader implements PartitionReader<InternalRow> {
  private static final Logger LOG = LoggerFactory.getLogger(BatchReader.class);

  /** One slice of a release to read: the input partitions that {@link #sliceOf} puts in
   * it (so that a batch's tasks share the cores); the first slice carries the BOUNDARY. */
  static final class Batch implements InputPartition {
    private static final long serialVersionUID = 1L;
    final String sourceKey;
    final SourceConfig config;
    final String offset;
    final int slice;
    final int slices;

    Batch(String sourceKey, SourceConfig config, SUnionOffset offset, int slice, int slices) {
      this.sourceKey = sourceKey;
      this.config = config;
      this.offset = offset.json();
      this.slice = slice;
      this.slices = slices;
    }
  }

  /** Which of {@code slices} an input partition's tuples go to: the same in every JVM. */
  static int sliceOf(String input, int partition, int slices) {
    return Math.floorMod(input.hashCode() * 31 + partition, slices);
  }

  /** A release's tuples by slice, each in the release's order. */
  static List<List<Buckets.Held>> slices(List<Buckets.Held> tuples, int slices) {
    List<List<Buckets.Held>> out = new ArrayList<>(slices);
    for (int slice = 0; slice < slices; slice++) out.add(new ArrayList<>());
    for (Buckets.Held held : tuples) {
      out.get(slices == 1 ? 0 : sliceOf(held.input, held.partition, slices)).add(held);
    }
    return out;
  }

  /** How many slices a release is read in: one per input partition it read, at most
   * {@code parallelism}. */
  static int slicesOf(SUnionOffset offset, int parallelism) {
    int ranges = 0;
    for (Map<String, long[]> input : offset.ranges.values()) ranges += input.size();
    return Math.max(1, Math.min(ranges, parallelism));
  }

  static final class Factory implements PartitionReaderFactory, Serializable {
    private static final long serialVersionUID = 1L;

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new BatchReader((Batch) partition);
    }
  }

  /** Batches this JVM read back from Kafka rather than from a tracker's memory. */
  static final java.util.concurrent.atomic.AtomicLong READ_FROM_KAFKA =
      new java.util.concurrent.atomic.AtomicLong();

  public static long readFromKafka() {
    return READ_FROM_KAFKA.get();
  }

  private final Iterator<InternalRow> rows;
  private InternalRow current;
  /** Whether the rows came from the tracker's memory (for tests and metrics). */
  final boolean fromMemory;

  BatchReader(Batch batch) {
    SUnionOffset offset = SUnionOffset.parse(batch.offset);
    Buckets.ReleaseKind kind = kindOf(offset.kind);
    Map<Long, List<List<Buckets.Held>>> kept = InputTracker.RELEASES.get(batch.sourceKey);
    List<List<Buckets.Held>> release = kept == null ? null : kept.get(offset.seq);
    fromMemory = release != null && release.size() == batch.slices;
    List<Buckets.Held> tuples = fromMemory ? release.get(batch.slice)
        : read(batch.config, offset, batch.slice, batch.slices);
    if (!fromMemory) READ_FROM_KAFKA.incrementAndGet();
    List<InternalRow> out = new ArrayList<>(tuples.size() + 1);
    for (Buckets.Held held : tuples) {
      @SuppressWarnings("unchecked")
      ConsumerRecord<byte[], byte[]> record = (ConsumerRecord<byte[], byte[]>) held.payload;
      out.add(Records.tupleRow(record, held.input, kind, offset.epoch));
    }
    if (batch.slice == 0) {
      out.add(Records.boundaryRow(batch.config.fragment, offset.through, kind, offset.epoch,
          System.currentTimeMillis()));
    }
    rows = out.iterator();
  }

  static Buckets.ReleaseKind kindOf(String kind) {
    for (Buckets.ReleaseKind k : Buckets.ReleaseKind.values()) {
      if (k.value.equals(kind)) return k;
    }
    throw new IllegalArgumentException("unknown release kind " + kind);
  }

  /** The release's tuples read back from its input partitions. */
  static List<Buckets.Held> read(SourceConfig config, SUnionOffset offset, int slice,
      int slices) {
    boolean tentative = "tentative".equals(offset.kind);
    long low = offset.fromStime == null ? Long.MIN_VALUE : offset.fromStime;
    long high = offset.through;
    List<Buckets.Held> tuples = new ArrayList<>();
    for (Map.Entry<String, Map<String, long[]>> input : offset.ranges.entrySet()) {
      SourceConfig.Input spec = config.input(input.getKey());
      for (Map.Entry<String, long[]> range : input.getValue().entrySet()) {
        int partition = Integer.parseInt(range.getKey());
        if (sliceOf(spec.name, partition, slices) != slice) continue;
        List<ConsumerRecord<byte[], byte[]>> records = readRange(config, spec, partition,
            range.getValue()[0], range.getValue()[1]);
        // A TENTATIVE tuple is withdrawn by a later UNDO of its partition.
        TreeSet<Long> undos = new TreeSet<>();
        List<Buckets.Held> kept = new ArrayList<>();
        for (ConsumerRecord<byte[], byte[]> record : records) {
          Records.Envelope envelope = Records.envelope(record);
          if (envelope.kind == Records.Kind.UNDO) undos.add(record.offset());
          if (!envelope.data() || envelope.stime < low || envelope.stime >= high) continue;
          boolean upstreamTentative = envelope.kind == Records.Kind.TENTATIVE;
          if (upstreamTentative && !tentative) continue;
          kept.add(new Buckets.Held(envelope.stime, spec.name, partition, record.offset(),
              upstreamTentative, record));
        }
        for (Buckets.Held held : kept) {
          if (held.tentative && undos.higher(held.offset) != null) continue;
          tuples.add(held);
        }
      }
    }
    Collections.sort(tuples);
    return tuples;
  }

  /** Offsets [from, to) of one partition, committed records only; waits out a cut link. */
  private static List<ConsumerRecord<byte[], byte[]>> readRange(SourceConfig config,
      SourceConfig.Input input, int partition, long from, long to) {
    List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
    TopicPartition tp = new TopicPartition(input.topic, partition);
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config.consumer(
        input.bootstrap, "medusa-sunion-replay-" + config.fragment))) {
      consumer.assign(List.of(tp));
      consumer.seek(tp, from);
      long warnAt = System.currentTimeMillis() + 30_000;
      while (true) {
        if (Thread.currentThread().isInterrupted()) {
          throw new IllegalStateException("interrupted while reading " + tp);
        }
        long position;
        try {
          position = consumer.position(tp, Duration.ofSeconds(5));
        } catch (org.apache.kafka.common.errors.TimeoutException e) {
          position = -1;
        }
        if (position >= to) break;
        for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(200))) {
          if (record.offset() < to) out.add(record);
        }
        if (System.currentTimeMillis() > warnAt) {
          warnAt = System.currentTimeMillis() + 30_000;
          LOG.warn("{}: still reading {} [{}, {}) on {} for a batch", config.fragment, tp, from,
              to, input.bootstrap);
        }
      }
    }
    return out;
  }

  @Override
  public boolean next() {
    if (!rows.hasNext()) return false;
    current = rows.next();
    return true;
  }

  @Override
  public InternalRow get() {
    return current;
  }

  @Override
  public void close() throws IOException {}
}
