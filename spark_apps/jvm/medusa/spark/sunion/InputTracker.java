package medusa.spark.sunion;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The SUnion on the driver: one thread per input cluster reads its partitions
 * (read_committed, assigned, never committing) into {@link Buckets}, and the query's
 * trigger asks for the next release ({@link #next}). A release is decided only when
 * asked, so each batch is one release and its offset says everything it holds.
 *
 * <p>A cluster that cannot be reached only stops its partitions' boundaries (and, with DPC,
 * makes the releases tentative after D): its thread logs and tries again, and never fails
 * the query, as Spark's own Kafka source would.
 */
final class InputTracker implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(InputTracker.class);
  static final int REANNOUNCEMENTS = 3;
  static final long METADATA_EVERY_MS = 5000;
  static final Duration POLL = Duration.ofMillis(20);

  /** The releases this JVM's tasks read from memory, by source and release: each one's
   * tuples split into the slices its tasks read ({@link BatchReader#sliceOf}). */
  static final Map<String, Map<Long, List<List<Buckets.Held>>>> RELEASES =
      new ConcurrentHashMap<>();

  private final SourceConfig config;
  private final String sourceKey;
  private final Buckets buckets;
  private final Map<Buckets.Key, Long> startOffsets = new HashMap<>();
  private final List<ClusterReader> readers = new ArrayList<>();
  private final Map<String, KafkaProducer<byte[], byte[]>> deadLetterProducers = new HashMap<>();
  /** Inputs whose partitions are known (listed, or restored): none may be released before. */
  private final Set<String> inputsKnown = new java.util.HashSet<>();
  private int unflushedLetters;
  private SUnionOffset last;
  private int reannounced;
  private long nextReannounceAtMs;
  private final long idleEveryMs;
  final AtomicLong recordsIn = new AtomicLong();
  final AtomicLong deadLettered = new AtomicLong();
  long releases;
  long tentativeReleases;
  long redos;

  InputTracker(SourceConfig config, SUnionOffset start, String sourceKey) {
    this.config = config;
    this.sourceKey = sourceKey;
    this.last = start;
    Map<String, Object> positions = start.positions;
    this.buckets = new Buckets(config.bucketMs, config.topics(),
        positions == null ? null : Buckets.longOrNull(positions.get("released_through")),
        config.maxDelayMs,
        positions == null ? null : Buckets.longOrNull(positions.get("tentative_through")),
        positions == null || positions.get("epoch") == null ? 0
            : ((Number) positions.get("epoch")).intValue(),
        () -> System.nanoTime() / 1e9, () -> System.currentTimeMillis() / 1000.0);
    this.idleEveryMs = Math.max(200, config.bucketMs);
    this.nextReannounceAtMs = System.currentTimeMillis() + idleEveryMs;
    RELEASES.put(sourceKey, new ConcurrentHashMap<>());
    Map<String, List<SourceConfig.Input>> byCluster = new LinkedHashMap<>();
    for (SourceConfig.Input input : config.inputs) {
      byCluster.computeIfAbsent(input.bootstrap, b -> new ArrayList<>()).add(input);
    }
    for (Map.Entry<String, List<SourceConfig.Input>> cluster : byCluster.entrySet()) {
      readers.add(new ClusterReader(cluster.getKey(), cluster.getValue()));
    }
    // Restored, the partitions are known at once: a cut-off cluster holds its partitions'
    // buckets back from the first release on, instead of being left out of it.
    for (SourceConfig.Input input : config.inputs) {
      Map<Integer, Buckets.Restored> restored = Buckets.restoredPartitions(positions, input.name);
      for (Map.Entry<Integer, Buckets.Restored> p : restored.entrySet()) {
        if (!config.owns(p.getKey())) continue;
        buckets.addPartition(input.name, p.getKey(), p.getValue().resume, p.getValue());
        startOffsets.put(new Buckets.Key(input.name, p.getKey()), p.getValue().resume);
      }
      if (!restored.isEmpty()) inputsKnown.add(input.name);
    }
  }

  void start() {
    for (ClusterReader reader : readers) reader.thread.start();
  }

  synchronized boolean isAt(SUnionOffset offset) {
    return last.json().equals(offset.json());
  }

  /** The next release as an offset, or the last one when nothing may go out yet. */
  synchronized SUnionOffset next() {
    long now = System.currentTimeMillis();
    if (inputsKnown.size() < config.inputs.size()) return last;  // every partition first
    Long stableBefore = buckets.stableThrough;
    Long releasedBefore = buckets.releasedThrough;
    Buckets.Release release = buckets.release();
    boolean reannouncement = false;
    if (release == null) {
      if (reannounced >= REANNOUNCEMENTS || now < nextReannounceAtMs) return last;
      // Idle: the same boundary again, a few times; a query passes its newest boundaries
      // on one or two batches after it read them.
      release = buckets.reannouncement();
      if (release == null) return last;
      reannounced++;
      reannouncement = true;
    } else {
      reannounced = 0;
    }
    nextReannounceAtMs = now + idleEveryMs;
    for (Buckets.Held held : release.uncorrected) {
      @SuppressWarnings("unchecked")
      ConsumerRecord<byte[], byte[]> record = (ConsumerRecord<byte[], byte[]>) held.payload;
      deadLetter(held.input, record, "TENTATIVE tuple never corrected: its input's stable "
          + "BOUNDARY passed it without an UNDO");
    }
    flushDeadLetters();
    Map<String, Map<String, long[]>> ranges = new LinkedHashMap<>();
    if (!reannouncement) {
      Map<String, Map<Integer, Buckets.Restored>> resumes = new HashMap<>();
      for (Map.Entry<Buckets.Key, Buckets.PartitionState> entry : buckets.partitions.entrySet()) {
        Buckets.Key key = entry.getKey();
        long from = resumeIn(resumes.computeIfAbsent(key.input,
            input -> Buckets.restoredPartitions(last.positions, input)), key);
        long to = entry.getValue().nextOffset;
        if (to > from) {
          ranges.computeIfAbsent(key.input, i -> new LinkedHashMap<>())
              .put(String.valueOf(key.partition), new long[] {from, to});
        }
      }
    }
    Long fromStime = release.kind == Buckets.ReleaseKind.TENTATIVE ? releasedBefore
        : stableBefore;
    if (reannouncement) fromStime = release.through;
    SUnionOffset next = new SUnionOffset(last.seq + 1, release.kind.value, release.epoch,
        fromStime, release.through, ranges, release.positions);
    if (!reannouncement) {
      RELEASES.get(sourceKey).put(next.seq, BatchReader.slices(release.tuples,
          BatchReader.slicesOf(next, config.parallelism)));
      releases++;
      if (release.kind == Buckets.ReleaseKind.TENTATIVE) tentativeReleases++;
      if (release.kind == Buckets.ReleaseKind.REDO) {
        redos++;
        LOG.info("{}: every input is back: REDO of UP_FAILURE period {} through stime {} ({} "
            + "tuple(s))", config.fragment, release.epoch, release.through, release.tuples.size());
      }
    }
    last = next;
    return next;
  }

  /** Where {@code key} was to be read from after the last release ({@code restored}: its
   * input's partitions in that release's positions). */
  private long resumeIn(Map<Integer, Buckets.Restored> restored, Buckets.Key key) {
    Buckets.Restored resume = restored.get(key.partition);
    if (resume != null) return resume.resume;
    Long start = startOffsets.get(key);
    return start == null ? 0 : start;
  }

  /** The releases up to {@code seq} are in Spark's commit log: no task reads them again. */
  void committed(long seq) {
    Map<Long, List<List<Buckets.Held>>> releasesOfSource = RELEASES.get(sourceKey);
    if (releasesOfSource != null) releasesOfSource.keySet().removeIf(s -> s <= seq);
  }

  synchronized Map<String, String> metrics() {
    Map<String, String> metrics = new LinkedHashMap<>();
    metrics.put("recordsIn", String.valueOf(recordsIn.get()));
    metrics.put("deadLettered", String.valueOf(deadLettered.get()));
    metrics.put("heldTuples", String.valueOf(buckets.heldTuples));
    metrics.put("heldBuckets", String.valueOf(buckets.heldBuckets()));
    metrics.put("releasedThrough", String.valueOf(buckets.releasedThrough));
    metrics.put("stableThrough", String.valueOf(buckets.stableThrough));
    metrics.put("dpcState", buckets.dpcState().name());
    metrics.put("epoch", String.valueOf(buckets.epoch));
    metrics.put("releases", String.valueOf(releases));
    metrics.put("tentativeReleases", String.valueOf(tentativeReleases));
    metrics.put("redos", String.valueOf(redos));
    metrics.put("partitions", String.valueOf(buckets.partitions.size()));
    List<String> failedInputs = new ArrayList<>();
    for (Buckets.Key key : buckets.failed) failedInputs.add(key.toString());
    java.util.Collections.sort(failedInputs);
    metrics.put("failedInputs", String.join(",", failedInputs));
    List<String> unknown = new ArrayList<>();
    for (SourceConfig.Input input : config.inputs) {
      if (!inputsKnown.contains(input.name)) unknown.add(input.name);
    }
    // Inputs whose partitions could not be listed yet: nothing is released before.
    metrics.put("waitingForInputs", String.join(",", unknown));
    long behind = 0;
    for (ClusterReader reader : readers) behind = Math.max(behind, reader.lag);
    // Named as Spark's Kafka source names it: what the node's status reads as lag.
    metrics.put("maxOffsetsBehindLatest", String.valueOf(behind));
    return metrics;
  }

  // -- the readers' side -----------------------------------------------------------------

  /** Starts following a partition; returns the offset to read from. */
  private synchronized long follow(SourceConfig.Input input, int partition, long earliest) {
    Buckets.Key key = new Buckets.Key(input.name, partition);
    Buckets.PartitionState known = buckets.partitions.get(key);
    if (known != null) return known.nextOffset;
    Buckets.Restored restored = Buckets.restoredPartitions(last.positions, input.name)
        .get(partition);
    // Start positions apply only where the SUnion has no state yet.
    Long configured = config.startPositions == null || last.positions != null ? null
        : Optional.ofNullable(config.startPositions.get(input.name))
            .map(p -> p.get(partition)).orElse(null);
    long start = configured != null ? configured : earliest;
    startOffsets.put(key, restored != null ? restored.resume : start);
    return buckets.addPartition(input.name, partition, start, restored).nextOffset;
  }

  private synchronized void known(String input) {
    inputsKnown.add(input);
  }

  private synchronized void take(SourceConfig.Input input, ConsumerRecords<byte[], byte[]> batch,
      TopicPartition tp) {
    for (ConsumerRecord<byte[], byte[]> record : batch.records(tp)) {
      recordsIn.incrementAndGet();
      Records.Envelope envelope = Records.envelope(record);
      String reason;
      int partition = record.partition();
      long offset = record.offset();
      switch (envelope.kind) {
        case STABLE, TENTATIVE -> {
          Buckets.Outcome outcome = buckets.addTuple(new Buckets.Held(envelope.stime,
              input.name, partition, offset, envelope.kind == Records.Kind.TENTATIVE, record));
          if (outcome != Buckets.Outcome.LATE) continue;
          reason = "stime " + envelope.stime + " came after the boundary: everything below "
              + buckets.releasedThrough + " was already released";
        }
        case BOUNDARY -> {
          buckets.addBoundary(input.name, partition, offset, envelope.stime,
              envelope.tentativeMark);
          continue;
        }
        case UNDO -> {
          int dropped = buckets.undo(input.name, partition, offset);
          LOG.info("{}: UNDO from {} [{}]: {} tentative tuple(s) withdrawn", config.fragment,
              input.name, partition, dropped);
          continue;
        }
        case REC_DONE -> {
          buckets.passOver(input.name, partition, offset);
          continue;
        }
        default -> reason = envelope.reason;
      }
      if (buckets.passOver(input.name, partition, offset)) deadLetter(input.name, record, reason);
    }
  }

  private void deadLetter(String inputName, ConsumerRecord<byte[], byte[]> record,
      String reason) {
    SourceConfig.Input input = config.input(inputName);
    deadLettered.incrementAndGet();
    if (!config.deadLetters) return;
    LOG.warn("{}: dead letter from {} [{}] @{}: {}", config.fragment, input.topic,
        record.partition(), record.offset(), reason);
    List<Header> headers = new ArrayList<>();
    for (Header header : record.headers()) headers.add(header);
    headers.add(new RecordHeader("medusa.dlq.reason", bytes(reason)));
    headers.add(new RecordHeader("medusa.dlq.topic", bytes(input.topic)));
    headers.add(new RecordHeader("medusa.dlq.partition", bytes(String.valueOf(record.partition()))));
    headers.add(new RecordHeader("medusa.dlq.offset", bytes(String.valueOf(record.offset()))));
    headers.add(new RecordHeader("medusa.dlq.box", bytes(config.fragment)));
    KafkaProducer<byte[], byte[]> producer = deadLetterProducers.computeIfAbsent(
        input.bootstrap, b -> {
          java.util.Properties props = config.deadLetterProducer(b);
          props.put("delivery.timeout.ms", "30000");
          return new KafkaProducer<>(props);
        });
    producer.send(new ProducerRecord<>(input.topic + ".dlq", null, record.key(), record.value(),
        headers));
    unflushedLetters++;
  }

  /** Before a release goes out, the dead letters of what it passed are written. */
  private void flushDeadLetters() {
    if (unflushedLetters == 0) return;
    for (KafkaProducer<byte[], byte[]> producer : deadLetterProducers.values()) producer.flush();
    unflushedLetters = 0;
  }

  private static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public void close() {
    for (ClusterReader reader : readers) reader.stop();
    for (ClusterReader reader : readers) {
      try {
        reader.thread.join(10_000);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    synchronized (this) {
      for (KafkaProducer<byte[], byte[]> producer : deadLetterProducers.values()) {
        producer.close(Duration.ofSeconds(5));
      }
      deadLetterProducers.clear();
    }
    RELEASES.remove(sourceKey);
  }

  /** One input cluster: its partitions, followed as they appear, read into the buckets. */
  private final class ClusterReader implements Runnable {
    final String bootstrap;
    final Map<String, SourceConfig.Input> byTopic = new LinkedHashMap<>();
    final Thread thread;
    private volatile boolean stopped;
    private KafkaConsumer<byte[], byte[]> consumer;
    private final Map<String, Long> quietUntil = new HashMap<>();
    /** The most records a partition of this cluster had left to read at the last poll. */
    volatile long lag;
    private final Map<TopicPartition, Long> readCounts = new HashMap<>();

    ClusterReader(String bootstrap, List<SourceConfig.Input> inputs) {
      this.bootstrap = bootstrap;
      for (SourceConfig.Input input : inputs) byTopic.put(input.topic, input);
      this.thread = new Thread(this, "sunion " + config.fragment + " " + bootstrap);
      this.thread.setDaemon(true);
    }

    void stop() {
      stopped = true;
      KafkaConsumer<byte[], byte[]> c = consumer;
      if (c != null) c.wakeup();
    }

    @Override
    public void run() {
      try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(config.consumer(bootstrap,
          "medusa-sunion-" + config.fragment))) {
        consumer = c;
        ensureDeadLetterTopics();
        long nextMetadataAt = 0;
        while (!stopped) {
          try {
            long now = System.currentTimeMillis();
            if (now >= nextMetadataAt) {
              nextMetadataAt = now + METADATA_EVERY_MS;
              followNewPartitions(c);
            }
            if (c.assignment().isEmpty()) {
              Thread.sleep(POLL.toMillis());
              continue;
            }
            ConsumerRecords<byte[], byte[]> records = c.poll(POLL);
            for (TopicPartition tp : records.partitions()) {
              take(byTopic.get(tp.topic()), records, tp);
              if (config.readLimit > 0) {
                long read = readCounts.merge(tp, (long) records.records(tp).size(), Long::sum);
                if (read >= config.readLimit) c.pause(List.of(tp));
              }
            }
            long most = 0;
            for (TopicPartition tp : c.assignment()) {
              java.util.OptionalLong left = c.currentLag(tp);
              if (left.isPresent()) most = Math.max(most, left.getAsLong());
            }
            lag = most;
          } catch (WakeupException | InterruptedException e) {
            break;
          } catch (Exception e) {
            // A cut-off cluster, a topic not there yet: this input only waits.
            warnOnceAMinute(e);
            try {
              Thread.sleep(1000);
            } catch (InterruptedException interrupted) {
              break;
            }
          }
        }
      } catch (Exception e) {
        if (!stopped) LOG.error("{}: the reader of {} stopped", config.fragment, bootstrap, e);
      }
    }

    private void followNewPartitions(KafkaConsumer<byte[], byte[]> c) {
      Set<TopicPartition> assigned = new java.util.HashSet<>(c.assignment());
      List<TopicPartition> added = new ArrayList<>();
      List<String> listed = new ArrayList<>();
      for (SourceConfig.Input input : byTopic.values()) {
        List<PartitionInfo> infos = c.partitionsFor(input.topic, Duration.ofSeconds(5));
        if (infos == null || infos.isEmpty()) {
          warnOnceAMinute(new IllegalStateException("input " + input.name + ": topic "
              + input.topic + " has no partitions on " + bootstrap + " (yet)"));
          continue;
        }
        listed.add(input.name);
        for (PartitionInfo info : infos) {
          TopicPartition tp = new TopicPartition(input.topic, info.partition());
          if (!assigned.contains(tp) && config.owns(info.partition())) added.add(tp);
        }
      }
      if (added.isEmpty()) {
        for (String name : listed) known(name);
        return;
      }
      Map<TopicPartition, Long> earliest = c.beginningOffsets(added, Duration.ofSeconds(10));
      Set<TopicPartition> all = new java.util.HashSet<>(assigned);
      all.addAll(added);
      c.assign(all);
      for (TopicPartition tp : added) {
        long from = follow(byTopic.get(tp.topic()), tp.partition(), earliest.get(tp));
        c.seek(tp, from);
      }
      for (String name : listed) known(name);
      LOG.info("{}: following {} partition(s) of {}", config.fragment, added.size(), bootstrap);
    }

    private void ensureDeadLetterTopics() {
      java.util.Properties props = new java.util.Properties();
      props.putAll(config.kafka);
      props.put("bootstrap.servers", bootstrap);
      props.put("default.api.timeout.ms", "10000");
      props.put("request.timeout.ms", "5000");
      try (Admin admin = Admin.create(props)) {
        List<NewTopic> topics = new ArrayList<>();
        for (String topic : byTopic.keySet()) {
          topics.add(new NewTopic(topic + ".dlq", Optional.of(1), Optional.empty()));
        }
        admin.createTopics(topics).values().forEach((name, future) -> {
          try {
            future.get();
          } catch (Exception e) {
            // There already, most often; a dead letter's send waits for it otherwise.
          }
        });
      } catch (Exception e) {
        warnOnceAMinute(e);
      }
    }

    private void warnOnceAMinute(Exception e) {
      String what = String.valueOf(e.getMessage());
      long now = System.currentTimeMillis();
      if (now >= quietUntil.getOrDefault(what, 0L)) {
        quietUntil.put(what, now + 60_000);
        LOG.warn("{}: input cluster {}: {}", config.fragment, bootstrap, e.toString());
      }
    }
  }
}
