package medusa.spark;

import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.Collections;
import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.ToLongFunction;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.streaming.state.KeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.NoPrefixKeyStateEncoderSpec;
import org.apache.spark.sql.execution.streaming.state.ReadStateStore;
import org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.StateSchemaProvider;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreConf;
import org.apache.spark.sql.execution.streaming.state.StateStoreId;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import org.apache.spark.sql.execution.streaming.state.UnsafeRowPair;
import org.apache.spark.sql.types.StructType;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Spark's RocksDB state store, with two additions for streaming aggregations: their
 * eviction scan goes through the keys the watermark closes only, not the whole state; and
 * it can be held while the query catches up beside the instance it replaces (a warm move's
 * replica).
 *
 * Spark's windowed aggregation goes through its whole state in every batch to find the
 * windows the watermark has closed: at 1.4 GB, a second of a core and most of the memory
 * bandwidth per batch, whether one window closed or none. Here each such store keeps its
 * keys ordered by their eviction time ({@link EvictionIndex}) and its scan yields them in
 * that order, ending at the first key Spark does not remove (Spark's eviction predicate is
 * "eviction time at most the watermark": every later key stays too). The index is built by
 * one whole scan after the store is loaded, then follows the store's puts and removes from
 * batch to batch while the store's versions follow on; a batch that aborts, another
 * version loaded, or a count of keys that differs from the store's, and the next scan
 * builds it again.
 *
 * Held, a replica's aggregations evict nothing and keep their closed windows a while
 * longer (input below the watermark is dropped before it reaches the state, as always),
 * and its first batch after {@link #releaseEviction} evicts and emits all of them at once;
 * the outputs drop those the old instance wrote, by tuple id. Its first held batch builds
 * the index, so that the batch after the release does not scan the whole state.
 *
 * Only the scans of {@code StateStoreSaveExec} (and, for the hold, of its session-window
 * kin) change: the other operators' full scans (timeouts, joins, deduplication) run as
 * they are. A fragment's query runs in append mode; in complete mode, whose output is such
 * a scan of the whole store, a held query would output nothing (complete mode's scan is
 * not indexed). Whether a store's task belongs to a held query comes from its job's
 * {@value RebuildPriority#QUERY} property. The class's name is kept in each query's
 * checkpoint: it stays.
 */
public class MedusaStateStoreProvider extends RocksDBStateStoreProvider {
  private static final Logger LOG = LoggerFactory.getLogger(MedusaStateStoreProvider.class);
  /** The queries (by {@value RebuildPriority#QUERY}) whose eviction scans are held. */
  private static final Set<String> HELD = ConcurrentHashMap.newKeySet();
  private static final String AGGREGATION_SAVE = "StateStoreSaveExec";
  private static final String AGGREGATION_STATE = "StreamingAggregationStateManager";
  private static final String DEFAULT = StateStore.DEFAULT_COL_FAMILY_NAME();
  /** Eviction scans that went through an index, and whole scans that built one. */
  private static final AtomicLong INDEXED_SCANS = new AtomicLong();
  private static final AtomicLong BUILDING_SCANS = new AtomicLong();
  /** Stores that gave their index up, past the budget. */
  private static final AtomicLong GIVEN_UP = new AtomicLong();

  /** How this store's keys give their eviction time; null if they cannot be indexed. */
  private volatile ToLongFunction<UnsafeRow> evictionTime;
  /** The index as of {@link #indexedVersion}, while no batch has this store open. */
  private EvictionIndex committedIndex;
  private long indexedVersion = -1;

  /** Query {@code query}'s aggregations keep their closed windows from its next batch on. */
  public static void holdEviction(String query) {
    HELD.add(query);
  }

  /** Query {@code query}'s aggregations evict again, from their next scan on. */
  public static void releaseEviction(String query) {
    HELD.remove(query);
  }

  /** This JVM's aggregation eviction scans so far: {through an index, building one}. */
  public static long[] evictionScans() {
    return new long[] {INDEXED_SCANS.get(), BUILDING_SCANS.get()};
  }

  /** How many of this JVM's stores gave their eviction index up, past the budget. */
  public static long indexesGivenUp() {
    return GIVEN_UP.get();
  }

  @Override
  public void init(StateStoreId stateStoreId, StructType keySchema, StructType valueSchema,
                   KeyStateEncoderSpec keyStateEncoderSpec, boolean useColumnFamilies,
                   StateStoreConf storeConfs, Configuration hadoopConf,
                   boolean useMultipleValuesPerKey, Option<StateSchemaProvider> schemas) {
    super.init(stateStoreId, keySchema, valueSchema, keyStateEncoderSpec, useColumnFamilies,
               storeConfs, hadoopConf, useMultipleValuesPerKey, schemas);
    EvictionIndex.budgetKeys(budgetKeys(storeConfs));
    boolean plainKeys = keyStateEncoderSpec instanceof NoPrefixKeyStateEncoderSpec &&
        !useColumnFamilies && !useMultipleValuesPerKey;
    evictionTime = plainKeys ? EvictionIndex.evictionTimeOf(keySchema) : null;
  }

  /** The eviction indexes' budget a session sets, or the default. */
  private static long budgetKeys(StateStoreConf storeConfs) {
    Option<String> setting = storeConfs.sqlConfs().get(EvictionIndex.MAX_KEYS_CONF);
    if (setting.isEmpty()) {
      return EvictionIndex.DEFAULT_BUDGET_KEYS;
    }
    try {
      return Long.parseLong(setting.get().trim());
    } catch (NumberFormatException error) {
      throw new IllegalArgumentException(EvictionIndex.MAX_KEYS_CONF +
          " must be a whole number of keys, not '" + setting.get() + "'", error);
    }
  }

  @Override
  public StateStore getStore(long version, Option<String> uniqueId,
                             boolean forceSnapshotOnCommit, boolean loadEmpty) {
    return wrapped(super.getStore(version, uniqueId, forceSnapshotOnCommit, loadEmpty),
                   version, uniqueId);
  }

  @Override
  public StateStore upgradeReadStoreToWriteStore(ReadStateStore readStore, long version,
                                                 Option<String> uniqueId,
                                                 boolean forceSnapshotOnCommit) {
    return wrapped(super.upgradeReadStoreToWriteStore(readStore, version, uniqueId,
                                                      forceSnapshotOnCommit),
                   version, uniqueId);
  }

  /** The store, through a handler if it is indexed or its task belongs to a held query. */
  private StateStore wrapped(StateStore store, long version, Option<String> uniqueId) {
    TaskContext task = TaskContext.get();
    String query = task == null ? null : task.getLocalProperty(RebuildPriority.QUERY);
    // Checkpoints of format 2 can load one version from two lineages: not indexed.
    EvictionIndex index = null;
    boolean complete = false;
    if (evictionTime != null && uniqueId.isEmpty()) {
      index = takeIndex(version);
      complete = index != null;
      if (!complete) {
        index = new EvictionIndex(evictionTime);
      }
    }
    if (index == null && (query == null || !HELD.contains(query))) {
      return store;
    }
    return (StateStore) Proxy.newProxyInstance(
        MedusaStateStoreProvider.class.getClassLoader(), new Class<?>[] {StateStore.class},
        new Handler(store, query, index, complete));
  }

  /** The committed index if it is of {@code version}; a batch owns it until it commits. */
  private synchronized EvictionIndex takeIndex(long version) {
    EvictionIndex index = committedIndex;
    if (index != null && indexedVersion != version) {
      index.release();
      index = null;
    }
    committedIndex = null;
    indexedVersion = -1;
    return index;
  }

  /** The keys took this JVM's indexes past their budget: this store scans as Spark does. */
  private synchronized void giveUpIndexing(StateStoreId store) {
    if (evictionTime != null) {
      GIVEN_UP.incrementAndGet();
      LOG.warn("Eviction index of {} given up: this JVM's indexes hold {} keys or more " +
               "(an eighth of its heap, or {}); its aggregation scans its whole state each " +
               "batch", store, EvictionIndex.budgetKeys(), EvictionIndex.MAX_KEYS_CONF);
    }
    evictionTime = null;
  }

  @Override
  public void close() {
    synchronized (this) {
      if (committedIndex != null) {
        committedIndex.release();
        committedIndex = null;
      }
    }
    super.close();
  }

  private synchronized void keepIndex(EvictionIndex index, long version) {
    committedIndex = index;
    indexedVersion = version;
  }

  /** A store's iterator over {@code rows}, with nothing to close. */
  private static StateStoreIterator<UnsafeRowPair> storeIterator(Iterator<UnsafeRowPair> rows) {
    return new StateStoreIterator<>(CollectionConverters.asScala(rows),
                                    StateStoreIterator.$lessinit$greater$default$2());
  }

  /** What a store's caller is scanning it for. */
  private enum Scan { AGGREGATION_EVICTION, SAVE, OTHER }

  /**
   * A streaming aggregation's eviction (its state manager's {@code iterator} or {@code keys}
   * under {@code StateStoreSaveExec}: complete mode's output goes through {@code values});
   * another scan of a save (a session window's); or anything else.
   */
  private static Scan scanOf(Method method, Object[] args) {
    if (!method.getName().equals("iterator") || args == null || args.length != 1 ||
        !DEFAULT.equals(args[0])) {
      return Scan.OTHER;
    }
    return StackWalker.getInstance().walk(frames -> {
      boolean evicting = false;
      for (StackWalker.StackFrame frame : (Iterable<StackWalker.StackFrame>)
               frames.limit(32)::iterator) {
        String type = frame.getClassName();
        if (type.contains(AGGREGATION_STATE)) {
          evicting = frame.getMethodName().equals("iterator") ||
              frame.getMethodName().equals("keys");
        } else if (type.endsWith(AGGREGATION_SAVE)) {
          return evicting && type.endsWith("." + AGGREGATION_SAVE) ? Scan.AGGREGATION_EVICTION
                                                                    : Scan.SAVE;
        }
      }
      return Scan.OTHER;
    });
  }

  /** One batch's store: its eviction scans held or indexed, its index kept up to date. */
  private final class Handler implements InvocationHandler {
    private final StateStore store;
    private final String query;
    /** Null if the store is not indexed. */
    private final EvictionIndex index;
    /** Whether the index holds every key of the store (else a whole scan builds it). */
    private boolean complete;
    /** Whether the provider keeps the index for the next batch (this one committed). */
    private boolean kept;

    Handler(StateStore store, String query, EvictionIndex index, boolean complete) {
      this.store = store;
      this.query = query;
      this.index = index;
      this.complete = complete;
    }

    @Override
    public Object invoke(Object proxy, Method method, Object[] args) throws Throwable {
      String name = method.getName();
      if (name.equals("iterator")) {
        Scan scan = scanOf(method, args);
        if (scan != Scan.OTHER && query != null && HELD.contains(query)) {
          if (scan == Scan.AGGREGATION_EVICTION && index != null && !complete) {
            buildHeld(call(method, args));
          }
          return storeIterator(Collections.emptyIterator());
        }
        if (scan == Scan.AGGREGATION_EVICTION && index != null) {
          return complete ? indexedScan() : buildingScan(call(method, args));
        }
      }
      Object result = call(method, args);
      if (index != null && args != null && args.length >= 2 &&
          DEFAULT.equals(args[args.length - 1])) {
        if (name.equals("put")) {
          index.add((UnsafeRow) args[0]);
        } else if (name.equals("remove")) {
          index.remove((UnsafeRow) args[0]);
        }
      }
      if (index != null && name.equals("commit")) {
        committed((Long) result);
      } else if (index != null && name.equals("abort") && !kept) {
        index.release();
      }
      return result;
    }

    private Object call(Method method, Object[] args) throws Throwable {
      try {
        return method.invoke(store, args);
      } catch (InvocationTargetException error) {
        throw error.getCause();
      }
    }

    /** Keeps the index for the next batch if it holds exactly the committed keys. */
    private void committed(long version) {
      if (index.overBudget()) {
        index.release();
        giveUpIndexing(store.id());
        return;
      }
      if (!complete) {
        index.release();
        return;
      }
      long keys = store.metrics().numKeys();
      if (keys >= 0 && keys != index.size()) {
        LOG.warn("Eviction index of {} has {} keys where the store has {} at version {}: " +
                 "the next batch scans the whole state to build it again",
                 store.id(), index.size(), keys, version);
        index.release();
        return;
      }
      kept = true;
      keepIndex(index, version);
    }

    /** The keys in eviction order, up to the first the scan leaves in place. */
    private StateStoreIterator<UnsafeRowPair> indexedScan() {
      INDEXED_SCANS.incrementAndGet();
      Iterator<UnsafeRow> keys = index.inEvictionOrder();
      Iterator<UnsafeRowPair> scan = new Iterator<>() {
        private UnsafeRowPair pending;
        private UnsafeRow last;
        private boolean done;

        @Override
        public boolean hasNext() {
          if (pending != null) {
            return true;
          }
          // Spark removes a key it evicts before it asks for the next one.
          if (done || (last != null && index.contains(last))) {
            done = true;
            return false;
          }
          while (keys.hasNext()) {
            UnsafeRow key = keys.next();
            UnsafeRow value = store.get(key, DEFAULT);
            if (value == null) {
              // Not in the store: the index is off; rebuilt after this batch.
              complete = false;
              continue;
            }
            last = key;
            pending = new UnsafeRowPair(key, value);
            return true;
          }
          done = true;
          return false;
        }

        @Override
        public UnsafeRowPair next() {
          if (!hasNext()) {
            throw new NoSuchElementException();
          }
          UnsafeRowPair next = pending;
          pending = null;
          return next;
        }
      };
      return storeIterator(scan);
    }

    /**
     * A held replica's first batch goes through the whole state once, evicting nothing, to
     * build the index: at the replica's low priority, while it catches up, rather than in
     * the batch after its release, beside the instance it replaces.
     */
    private void buildHeld(Object whole) {
      BUILDING_SCANS.incrementAndGet();
      @SuppressWarnings("unchecked")
      StateStoreIterator<UnsafeRowPair> all = (StateStoreIterator<UnsafeRowPair>) whole;
      try {
        while (all.hasNext()) {
          index.add(all.next().key());
        }
        complete = true;
      } finally {
        all.close();
      }
    }

    /** Spark's whole scan, noting every key it passes; complete once it has ended. */
    private StateStoreIterator<UnsafeRowPair> buildingScan(Object whole) {
      BUILDING_SCANS.incrementAndGet();
      @SuppressWarnings("unchecked")
      StateStoreIterator<UnsafeRowPair> all = (StateStoreIterator<UnsafeRowPair>) whole;
      Iterator<UnsafeRowPair> scan = new Iterator<>() {
        @Override
        public boolean hasNext() {
          boolean more = all.hasNext();
          if (!more) {
            complete = true;
          }
          return more;
        }

        @Override
        public UnsafeRowPair next() {
          UnsafeRowPair pair = all.next();
          index.add(pair.key());
          return pair;
        }
      };
      return new StateStoreIterator<>(CollectionConverters.asScala(scan), all.onClose());
    }
  }
}
