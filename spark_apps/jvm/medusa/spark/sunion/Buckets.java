package medusa.spark.sunion;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.DoubleSupplier;

/**
 * The SUnion's rules in the JVM: buckets by stime, per-partition boundaries, release, DPC's
 * tentative releases after D and the REDO, resume positions.
 *
 * <p>A port of {@code services/medusa/sunion/buckets.py}, which states the invariants; both
 * pass the recorded vectors of {@code tests/vectors/sunion_buckets.json} (see
 * {@link BucketsVectors}), which read the clocks in the same order, so keep the two in step
 * line by line. No Kafka here.
 */
public final class Buckets {
  public static final int CADENCE_GAPS = 8;

  public enum Outcome {
    HELD("held"), ALREADY_RELEASED("already released"), LATE("late");

    public final String value;

    Outcome(String value) {
      this.value = value;
    }
  }

  public enum ReleaseKind {
    STABLE("stable"), TENTATIVE("tentative"), REDO("redo");

    public final String value;

    ReleaseKind(String value) {
      this.value = value;
    }
  }

  public enum DpcState { STABLE, UP_FAILURE, STABILIZATION }

  /** A data record waiting in its bucket; ordered by (stime, input, partition, offset). */
  public static final class Held implements Comparable<Held> {
    public final long stime;
    public final String input;
    public final int partition;
    public final long offset;
    public final boolean tentative;
    /** What the caller keeps with it (the record itself, for the source). */
    public final Object payload;

    public Held(long stime, String input, int partition, long offset, boolean tentative,
        Object payload) {
      this.stime = stime;
      this.input = input;
      this.partition = partition;
      this.offset = offset;
      this.tentative = tentative;
      this.payload = payload;
    }

    @Override
    public int compareTo(Held other) {
      int order = Long.compare(stime, other.stime);
      if (order == 0) order = input.compareTo(other.input);
      if (order == 0) order = Integer.compare(partition, other.partition);
      if (order == 0) order = Long.compare(offset, other.offset);
      return order;
    }
  }

  /** One input partition. */
  public static final class Key implements Comparable<Key> {
    public final String input;
    public final int partition;

    public Key(String input, int partition) {
      this.input = input;
      this.partition = partition;
    }

    @Override
    public boolean equals(Object other) {
      return other instanceof Key k && k.input.equals(input) && k.partition == partition;
    }

    @Override
    public int hashCode() {
      return Objects.hash(input, partition);
    }

    @Override
    public int compareTo(Key other) {
      int order = input.compareTo(other.input);
      return order != 0 ? order : Integer.compare(partition, other.partition);
    }

    @Override
    public String toString() {
      return input + "[" + partition + "]";
    }
  }

  public static final class PartitionState {
    public final String input;
    public final int partition;
    public long nextOffset;
    public Long boundary;
    public Long tentativeBoundary;
    public double advancedAt;
    public double advancedWallMs;
    public Double shortestTransitMs;
    public final ArrayDeque<Long> boundaryGaps = new ArrayDeque<>();
    public long replayedUntil;
    /** (offset, bucket) of the held tuples in offset order; released ones dropped lazily. */
    final ArrayDeque<long[]> held = new ArrayDeque<>();

    PartitionState(String input, int partition, long nextOffset, double advancedAt) {
      this.input = input;
      this.partition = partition;
      this.nextOffset = nextOffset;
      this.advancedAt = advancedAt;
    }

    /** When (wall clock, ms) a boundary at or past {@code stime} is due; null if unknown. */
    Double dueMs(long stime, Integer capMs) {
      if (boundaryGaps.isEmpty() || shortestTransitMs == null) return null;
      long step = Collections.max(boundaryGaps);
      if (capMs != null) step = Math.min(step, capMs);
      double latest = stime + step + shortestTransitMs;
      Long effective = effectiveBoundary();
      if (effective == null || step <= 0) return latest;
      long steps = -Math.floorDiv(-(stime - effective), step);
      return Math.min(latest, advancedWallMs + steps * step);
    }

    public Long effectiveBoundary() {
      if (tentativeBoundary == null) return boundary;
      if (boundary == null) return tentativeBoundary;
      return Math.max(boundary, tentativeBoundary);
    }

    long resume(long releasedBucketEnd) {
      while (!held.isEmpty() && held.peekFirst()[1] < releasedBucketEnd) held.pollFirst();
      return held.isEmpty() ? nextOffset : held.peekFirst()[0];
    }
  }

  /** Consecutive buckets that go out together. */
  public static final class Release {
    public final long through;
    public final List<Held> tuples;
    public final Map<String, Object> positions;
    public final ReleaseKind kind;
    public final int epoch;
    public final List<Held> uncorrected;
    public final Double waitedSince;

    Release(long through, List<Held> tuples, Map<String, Object> positions, ReleaseKind kind,
        int epoch, List<Held> uncorrected, Double waitedSince) {
      this.through = through;
      this.tuples = tuples;
      this.positions = positions;
      this.kind = kind;
      this.epoch = epoch;
      this.uncorrected = uncorrected;
      this.waitedSince = waitedSince;
    }
  }

  /** Where one input partition starts, from the positions of the last release. */
  public static final class Restored {
    public final long resume;
    public final Long boundary;
    public final long read;
    public final Long tentativeBoundary;

    public Restored(long resume, Long boundary, long read, Long tentativeBoundary) {
      this.resume = resume;
      this.boundary = boundary;
      this.read = read;
      this.tentativeBoundary = tentativeBoundary;
    }
  }

  /** Partition -> start of {@code input} in a positions map (empty when absent). */
  @SuppressWarnings("unchecked")
  public static Map<Integer, Restored> restoredPartitions(Map<String, Object> positions,
      String input) {
    Map<Integer, Restored> restored = new TreeMap<>();
    if (positions == null) return restored;
    Map<String, Object> inputs = (Map<String, Object>) positions.get("inputs");
    Map<String, Object> entry = inputs == null ? null : (Map<String, Object>) inputs.get(input);
    Map<String, Object> partitions =
        entry == null ? null : (Map<String, Object>) entry.get("partitions");
    if (partitions == null) return restored;
    for (Map.Entry<String, Object> p : partitions.entrySet()) {
      Map<String, Object> at = (Map<String, Object>) p.getValue();
      long resume = ((Number) at.get("resume")).longValue();
      Number read = (Number) at.get("read");
      restored.put(Integer.parseInt(p.getKey()), new Restored(resume,
          longOrNull(at.get("boundary")), read == null ? resume : read.longValue(),
          longOrNull(at.get("tentative_boundary"))));
    }
    return restored;
  }

  static Long longOrNull(Object value) {
    return value == null ? null : ((Number) value).longValue();
  }

  public final long bucketMs;
  public final Map<String, String> topics;
  public Long stableThrough;
  public Long releasedThrough;
  public final Integer maxDelayMs;
  public int epoch;
  public final Set<Key> failed = new HashSet<>();
  private final DoubleSupplier clock;
  private final DoubleSupplier wallClock;
  private Double waitingSince;
  public final Map<Key, PartitionState> partitions = new LinkedHashMap<>();
  private final TreeMap<Long, List<Held>> buckets = new TreeMap<>();
  public int heldTuples;

  /**
   * {@code releasedThrough} is the last stable release's (a restart's), {@code
   * tentativeThrough} the tentative releases' beyond it; {@code clock} times the waits in
   * seconds, {@code wallClock} (seconds) is compared with boundary stimes (ms).
   */
  public Buckets(long bucketMs, Map<String, String> topics, Long releasedThrough,
      Integer maxDelayMs, Long tentativeThrough, int epoch, DoubleSupplier clock,
      DoubleSupplier wallClock) {
    if (bucketMs <= 0) {
      throw new IllegalArgumentException("bucket_ms must be positive, got " + bucketMs);
    }
    this.bucketMs = bucketMs;
    this.topics = new LinkedHashMap<>(topics);
    this.stableThrough = releasedThrough;
    this.releasedThrough = releasedThrough;
    if (tentativeThrough != null && tentativeThrough > orZero(releasedThrough)) {
      this.releasedThrough = tentativeThrough;
    }
    this.maxDelayMs = maxDelayMs;
    this.epoch = epoch;
    this.clock = clock;
    this.wallClock = wallClock;
  }

  private static long orZero(Long value) {
    return value == null ? 0L : value;
  }

  public boolean tentative() {
    return orZero(releasedThrough) > orZero(stableThrough);
  }

  public DpcState dpcState() {
    if (!tentative()) return DpcState.STABLE;
    double now = clock.getAsDouble();
    boolean silent = false;
    for (Key key : failed) {
      if ((now - partitions.get(key).advancedAt) * 1000
          >= (maxDelayMs == null ? 0 : maxDelayMs)) {
        silent = true;
        break;
      }
    }
    if (silent) return DpcState.UP_FAILURE;
    for (PartitionState p : partitions.values()) {
      if (p.tentativeBoundary != null && orZero(p.boundary) < p.tentativeBoundary) {
        return DpcState.UP_FAILURE;
      }
    }
    return DpcState.STABILIZATION;
  }

  // -- input -----------------------------------------------------------------------------

  public PartitionState addPartition(String input, int partition, long startOffset,
      Restored restored) {
    if (!topics.containsKey(input)) {
      throw new IllegalArgumentException("unknown input '" + input + "' (known: "
          + String.join(", ", topics.keySet()) + ")");
    }
    Key key = new Key(input, partition);
    PartitionState known = partitions.get(key);
    if (known != null) return known;
    PartitionState state = new PartitionState(input, partition, startOffset,
        clock.getAsDouble());
    if (restored != null) {
      state.nextOffset = restored.resume;
      state.boundary = restored.boundary;
      state.tentativeBoundary = restored.tentativeBoundary;
      state.replayedUntil = restored.read;
    }
    partitions.put(key, state);
    return state;
  }

  public Outcome addTuple(Held held) {
    PartitionState state = partitions.get(new Key(held.input, held.partition));
    state.nextOffset = held.offset + 1;
    if (stableThrough != null && held.stime < stableThrough) {
      return held.offset < state.replayedUntil ? Outcome.ALREADY_RELEASED : Outcome.LATE;
    }
    long bucket = Math.floorDiv(held.stime, bucketMs);
    buckets.computeIfAbsent(bucket, b -> new ArrayList<>()).add(held);
    state.held.addLast(new long[] {held.offset, bucket});
    heldTuples += 1;
    return Outcome.HELD;
  }

  public void addBoundary(String input, int partition, long offset, long stime,
      boolean tentative) {
    PartitionState state = partitions.get(new Key(input, partition));
    state.nextOffset = offset + 1;
    Long before = state.effectiveBoundary();
    if (tentative) {
      if (state.tentativeBoundary == null || stime > state.tentativeBoundary) {
        state.tentativeBoundary = stime;
      }
    } else if (state.boundary == null || stime > state.boundary) {
      state.boundary = stime;
    }
    double wallMs = wallClock.getAsDouble() * 1000;
    if (state.shortestTransitMs == null || wallMs - stime < state.shortestTransitMs) {
      state.shortestTransitMs = wallMs - stime;
    }
    Long after = state.effectiveBoundary();
    if (after != null && (before == null || after > before)) {
      state.advancedAt = clock.getAsDouble();
      state.advancedWallMs = wallMs;
      if (before != null) {
        if (state.boundaryGaps.size() == CADENCE_GAPS) state.boundaryGaps.pollFirst();
        state.boundaryGaps.addLast(after - before);
      }
    }
  }

  /** An upstream UNDO: the partition's tentative tuples and boundary are withdrawn. */
  public int undo(String input, int partition, long offset) {
    PartitionState state = partitions.get(new Key(input, partition));
    state.nextOffset = offset + 1;
    state.tentativeBoundary = null;
    int dropped = 0;
    Iterator<Map.Entry<Long, List<Held>>> entries = buckets.entrySet().iterator();
    while (entries.hasNext()) {
      List<Held> tuples = entries.next().getValue();
      int before = tuples.size();
      tuples.removeIf(t -> t.tentative && t.input.equals(input) && t.partition == partition);
      dropped += before - tuples.size();
      if (tuples.isEmpty()) entries.remove();
    }
    heldTuples -= dropped;
    return dropped;
  }

  /** Skips a record that is not held; false when it was handled before a restart. */
  public boolean passOver(String input, int partition, long offset) {
    PartitionState state = partitions.get(new Key(input, partition));
    state.nextOffset = offset + 1;
    return offset >= state.replayedUntil;
  }

  // -- output ----------------------------------------------------------------------------

  public Long frontier() {
    if (partitions.isEmpty()) return null;
    Long lowest = null;
    for (PartitionState state : partitions.values()) {
      if (state.boundary == null) return null;
      if (lowest == null || state.boundary < lowest) lowest = state.boundary;
    }
    return lowest;
  }

  public Long stableThroughFrontier() {
    Long frontier = frontier();
    return frontier == null ? null : floor(frontier);
  }

  /** Takes every releasable bucket out, in order, as one release; null when there is none. */
  public Release release() {
    Long through = stableThroughFrontier();
    long released = orZero(releasedThrough);
    if (through != null && through > orZero(stableThrough)) {
      if (!tentative()) return take(through, ReleaseKind.STABLE);
      if (through >= released) return take(through, ReleaseKind.REDO);
    }
    if (maxDelayMs == null) return null;
    Long live = liveThrough();
    if (tentative() && live != null && live > released) {
      return take(live, ReleaseKind.TENTATIVE);
    }
    boolean waits = false;
    for (PartitionState p : partitions.values()) {
      if (floor(orZero(p.effectiveBoundary())) > released) {
        waits = true;
        break;
      }
    }
    if (!waits) {
      waitingSince = null;
      return null;
    }
    double now = clock.getAsDouble();
    if (waitingSince == null) {
      waitingSince = now + dueInS(released + bucketMs);
      return null;
    }
    if ((now - waitingSince) * 1000 < maxDelayMs) return null;
    for (Map.Entry<Key, PartitionState> entry : partitions.entrySet()) {
      if (floor(orZero(entry.getValue().effectiveBoundary())) <= released) {
        failed.add(entry.getKey());
      }
    }
    if (!tentative()) epoch += 1;
    live = liveThrough();
    if (live == null || live <= released) return null;
    return take(live, ReleaseKind.TENTATIVE);
  }

  private double dueInS(long bucketEnd) {
    Double due = null;
    for (PartitionState state : partitions.values()) {
      if (floor(orZero(state.effectiveBoundary())) >= bucketEnd) continue;
      Double at = state.dueMs(bucketEnd, maxDelayMs);
      if (at == null) return 0.0;
      due = due == null ? at : Math.max(due, at);
    }
    if (due == null) return 0.0;
    return Math.max(0.0, (due - wallClock.getAsDouble() * 1000) / 1000);
  }

  /** The last release's boundary again (no tuples), for an idle query to pass it on. */
  public Release reannouncement() {
    if (releasedThrough == null) return null;
    ReleaseKind kind = tentative() ? ReleaseKind.TENTATIVE : ReleaseKind.STABLE;
    return new Release(releasedThrough, new ArrayList<>(), positions(), kind, epoch,
        new ArrayList<>(), null);
  }

  private Long liveThrough() {
    long released = orZero(releasedThrough);
    failed.removeIf(k -> floor(orZero(partitions.get(k).effectiveBoundary())) > released);
    Long lowest = null;
    for (Map.Entry<Key, PartitionState> entry : partitions.entrySet()) {
      if (failed.contains(entry.getKey())) continue;
      Long boundary = entry.getValue().effectiveBoundary();
      if (boundary == null) return null;
      if (lowest == null || boundary < lowest) lowest = boundary;
    }
    return lowest == null ? null : floor(lowest);
  }

  private Release take(long through, ReleaseKind kind) {
    long lastBucket = Math.floorDiv(through, bucketMs);
    List<Held> tuples = new ArrayList<>();
    List<Held> uncorrected = new ArrayList<>();
    if (kind == ReleaseKind.TENTATIVE) {
      long firstBucket = Math.floorDiv(orZero(releasedThrough), bucketMs);
      for (List<Held> bucket : buckets.subMap(firstBucket, true, lastBucket, false).values()) {
        List<Held> sorted = new ArrayList<>(bucket);
        Collections.sort(sorted);
        tuples.addAll(sorted);
      }
      releasedThrough = through;
    } else {
      Map<Long, List<Held>> below = buckets.headMap(lastBucket, false);
      for (List<Held> taken : below.values()) {
        heldTuples -= taken.size();
        Collections.sort(taken);
        for (Held held : taken) (held.tentative ? uncorrected : tuples).add(held);
      }
      below.clear();
      releasedThrough = through;
      stableThrough = through;
      failed.clear();
    }
    Double waited = waitingSince;
    waitingSince = null;
    return new Release(through, tuples, positions(), kind, epoch, uncorrected, waited);
  }

  private long floor(long stime) {
    return Math.floorDiv(stime, bucketMs) * bucketMs;
  }

  // -- state -----------------------------------------------------------------------------

  public int heldBuckets() {
    return buckets.size();
  }

  public long resumeOffset(String input, int partition) {
    return partitions.get(new Key(input, partition)).resume(stableBucketEnd());
  }

  /** The resume state, as buckets.py's ``positions`` (the same JSON once serialised). */
  public Map<String, Object> positions() {
    long stableBucketEnd = stableBucketEnd();
    Map<String, Object> inputs = new LinkedHashMap<>();
    for (Map.Entry<String, String> topic : topics.entrySet()) {
      Map<String, Object> entry = new LinkedHashMap<>();
      entry.put("topic", topic.getValue());
      entry.put("partitions", new LinkedHashMap<String, Object>());
      inputs.put(topic.getKey(), entry);
    }
    List<Key> keys = new ArrayList<>(partitions.keySet());
    keys.sort(Comparator.naturalOrder());
    for (Key key : keys) {
      PartitionState state = partitions.get(key);
      Map<String, Object> entry = new LinkedHashMap<>();
      entry.put("resume", state.resume(stableBucketEnd));
      entry.put("boundary", state.boundary);
      entry.put("read", state.nextOffset);
      if (state.tentativeBoundary != null) {
        entry.put("tentative_boundary", state.tentativeBoundary);
      }
      @SuppressWarnings("unchecked")
      Map<String, Object> of = (Map<String, Object>) ((Map<String, Object>) inputs.get(
          key.input)).get("partitions");
      of.put(String.valueOf(key.partition), entry);
    }
    Map<String, Object> positions = new LinkedHashMap<>();
    positions.put("released_through", stableThrough);
    positions.put("inputs", inputs);
    if (tentative()) positions.put("tentative_through", releasedThrough);
    if (epoch != 0) positions.put("epoch", epoch);
    return positions;
  }

  /** The held tuples, bucket by bucket (unsorted within a bucket). */
  public List<Held> held() {
    List<Held> all = new ArrayList<>();
    for (List<Held> bucket : buckets.values()) all.addAll(bucket);
    return all;
  }

  private long stableBucketEnd() {
    if (stableThrough == null) return -(1L << 62);
    return Math.floorDiv(stableThrough, bucketMs);
  }
}
