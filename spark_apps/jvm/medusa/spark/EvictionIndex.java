package medusa.spark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.ToLongFunction;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampNTZType$;

/**
 * The keys of one streaming aggregation's state (one partition of it) ordered by the time
 * at which the watermark evicts them: their window's end, or their event time.
 *
 * Spark evicts a key when that time is at most the watermark ({@code WatermarkSupport}),
 * so the keys it evicts in a batch are a prefix of this order, and a scan in this order can
 * stop at the first key it does not evict. The index holds a copy of every key in the
 * JVM's heap (about {@value #BYTES_PER_KEY} bytes each, beside the state's values, which
 * RocksDB keeps off it); all indexes together may take an eighth of the heap (or the keys
 * {@value #MAX_KEYS_CONF} says), and an index that would go past that is given up
 * ({@link #overBudget}).
 */
final class EvictionIndex {
  /** A key's copy and its place in the index, about (a window and a short group key). */
  static final long BYTES_PER_KEY = 160;
  /** The keys all of a JVM's indexes may hold together unless a session says otherwise. */
  static final long DEFAULT_BUDGET_KEYS = Runtime.getRuntime().maxMemory() / 8 / BYTES_PER_KEY;
  /** The session setting of the budget, in keys, read as each store opens. */
  static final String MAX_KEYS_CONF = "spark.sql.streaming.stateStore.medusa.evictionIndexMaxKeys";
  /** The budget set by the store opened last (see {@link #budgetKeys(long)}). */
  private static volatile long budgetKeys = DEFAULT_BUDGET_KEYS;
  private static final AtomicLong INDEXED_KEYS = new AtomicLong();
  /** Spark's mark of a query's event-time column ({@code EventTimeWatermark.delayKey}). */
  static final String EVENT_TIME_MARK = "spark.watermarkDelayMs";
  /** A key without an eviction time (a null window): Spark never evicts it either. */
  private static final long NEVER = Long.MAX_VALUE;

  private final ToLongFunction<UnsafeRow> evictionTime;
  private final TreeMap<Long, Set<UnsafeRow>> byTime = new TreeMap<>();
  private long size;
  private boolean overBudget;

  EvictionIndex(ToLongFunction<UnsafeRow> evictionTime) {
    this.evictionTime = evictionTime;
  }

  /**
   * How to read a key's eviction time from keys of this schema; null unless exactly one of
   * its columns is the event time (a window, or a timestamp).
   */
  static ToLongFunction<UnsafeRow> evictionTimeOf(StructType keySchema) {
    StructField[] fields = keySchema.fields();
    int column = -1;
    for (int i = 0; i < fields.length; i++) {
      if (fields[i].metadata().contains(EVENT_TIME_MARK)) {
        if (column >= 0) {
          return null;
        }
        column = i;
      }
    }
    if (column < 0) {
      return null;
    }
    final int at = column;
    DataType type = fields[at].dataType();
    if (isTimestamp(type)) {
      return key -> key.isNullAt(at) ? NEVER : key.getLong(at);
    }
    if (type instanceof StructType window && window.fields().length == 2 &&
        isTimestamp(window.fields()[1].dataType())) {
      return key -> {
        if (key.isNullAt(at)) {
          return NEVER;
        }
        InternalRow bounds = key.getStruct(at, 2);
        return bounds.isNullAt(1) ? NEVER : bounds.getLong(1);
      };
    }
    return null;
  }

  private static boolean isTimestamp(DataType type) {
    return type.equals(DataTypes.TimestampType) || type.equals(TimestampNTZType$.MODULE$);
  }

  /** The keys all of this JVM's indexes may hold together. */
  static long budgetKeys() {
    return budgetKeys;
  }

  /** Sets the budget of this JVM's indexes: an index past it is given up at its commit. */
  static void budgetKeys(long keys) {
    budgetKeys = keys;
  }

  long size() {
    return size;
  }

  /** Whether adding keys took this JVM's indexes past their budget: this one is given up. */
  boolean overBudget() {
    return overBudget;
  }

  /** Gives this index's keys back to the budget: it is no longer used. */
  void release() {
    INDEXED_KEYS.addAndGet(-size);
    byTime.clear();
    size = 0;
  }

  boolean contains(UnsafeRow key) {
    Set<UnsafeRow> bucket = byTime.get(evictionTime.applyAsLong(key));
    return bucket != null && bucket.contains(key);
  }

  /** Notes {@code key} (a copy of it: Spark reuses its rows), unless it is already here. */
  void add(UnsafeRow key) {
    Set<UnsafeRow> bucket = byTime.computeIfAbsent(evictionTime.applyAsLong(key),
                                                   time -> new HashSet<>());
    if (!bucket.contains(key)) {
      bucket.add(key.copy());
      size++;
      if (INDEXED_KEYS.incrementAndGet() > budgetKeys) {
        overBudget = true;
      }
    }
  }

  void remove(UnsafeRow key) {
    long time = evictionTime.applyAsLong(key);
    Set<UnsafeRow> bucket = byTime.get(time);
    if (bucket != null && bucket.remove(key)) {
      size--;
      INDEXED_KEYS.decrementAndGet();
      if (bucket.isEmpty()) {
        byTime.remove(time);
      }
    }
  }

  /**
   * The keys, earliest eviction time first. Keys may be removed while it runs (the scan
   * evicts them): it goes through a copy of one time's keys at a time.
   */
  Iterator<UnsafeRow> inEvictionOrder() {
    return new Iterator<>() {
      private Long time;
      private Iterator<UnsafeRow> keys = Collections.emptyIterator();

      @Override
      public boolean hasNext() {
        while (!keys.hasNext()) {
          Long next = time == null ? (byTime.isEmpty() ? null : byTime.firstKey())
                                   : byTime.higherKey(time);
          if (next == null) {
            return false;
          }
          time = next;
          keys = new ArrayList<>(byTime.get(next)).iterator();
        }
        return true;
      }

      @Override
      public UnsafeRow next() {
        if (!hasNext()) {
          throw new NoSuchElementException();
        }
        return keys.next();
      }
    };
  }
}
