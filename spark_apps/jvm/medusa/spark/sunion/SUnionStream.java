package medusa.spark.sunion;

import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;

/**
 * A fragment's SUnion as its query's micro-batch source. Each batch is one release of the
 * buckets (stable, tentative after D, or a REDO), decided when the trigger asks for it
 * ({@link #latestOffset(Offset, ReadLimit)}), and its offset ({@link SUnionOffset}) carries
 * the release and the input positions after it, so Spark's offset log is the SUnion's
 * state: a restarted query's tracker starts from the last offset, and a batch replayed from
 * the log reads the same records from Kafka.
 */
public final class SUnionStream implements MicroBatchStream, SupportsAdmissionControl,
    ReportsSourceMetrics {
  private final SourceConfig config;
  private final String sourceKey = UUID.randomUUID().toString();
  private InputTracker tracker;

  SUnionStream(SourceConfig config) {
    this.config = config;
  }

  @Override
  public Offset initialOffset() {
    return SUnionOffset.initial();
  }

  @Override
  public Offset deserializeOffset(String json) {
    return SUnionOffset.parse(json);
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("the SUnion source is read with admission control");
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return ReadLimit.allAvailable();
  }

  @Override
  public synchronized Offset latestOffset(Offset start, ReadLimit limit) {
    SUnionOffset from = (SUnionOffset) start;
    if (tracker != null && !tracker.isAt(from)) {
      // The query went back (it never should): follow it from there.
      tracker.close();
      tracker = null;
    }
    if (tracker == null) {
      tracker = new InputTracker(config, from, sourceKey);
      tracker.start();
    }
    return tracker.next();
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    SUnionOffset last = (SUnionOffset) end;
    if (!last.releases() || last.seq == ((SUnionOffset) start).seq) return new InputPartition[0];
    int slices = BatchReader.slicesOf(last, config.parallelism);
    InputPartition[] batches = new InputPartition[slices];
    for (int slice = 0; slice < slices; slice++) {
      batches[slice] = new BatchReader.Batch(sourceKey, config, last, slice, slices);
    }
    return batches;
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new BatchReader.Factory();
  }

  @Override
  public synchronized void commit(Offset end) {
    if (tracker != null) tracker.committed(((SUnionOffset) end).seq);
  }

  @Override
  public synchronized void stop() {
    if (tracker != null) tracker.close();
    tracker = null;
  }

  @Override
  public synchronized Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    return tracker == null ? Map.of() : tracker.metrics();
  }

  @Override
  public String toString() {
    return "SUnion[" + config.fragment + "]";
  }
}
