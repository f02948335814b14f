package medusa.spark;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.TaskContext;
import org.apache.spark.sql.execution.streaming.state.ReadStateStore;
import org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider;
import org.apache.spark.sql.execution.streaming.state.StateStore;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;

import scala.Option;

/**
 * Spark's RocksDB state store, with one addition: the eviction scan of a query's streaming
 * aggregations can be held while the query catches up beside the instance it replaces (a
 * warm move's replica).
 *
 * Spark's windowed aggregation goes through its whole state in every batch to find the
 * windows the watermark has closed: at 1.4 GB, a second of a core and most of the memory
 * bandwidth per batch. A replica doing the same beside the running instance, for the
 * minute it rebuilds, slowed that instance's batches and paused its output. Held, the
 * replica's aggregations keep their closed windows a while longer (input below the
 * watermark is dropped before it reaches the state, as always), and its first batch
 * after {@link #releaseEviction} evicts and emits all of them at once; the outputs drop
 * those the old instance wrote, by tuple id.
 *
 * Only the scans of {@code StateStoreSaveExec} (and of its session-window kin) are held:
 * the other operators' full scans (timeouts, joins, deduplication) run as they are. A
 * fragment's query runs in append mode; in complete mode, whose output is such a scan of
 * the whole store, a held query would output nothing. Whether a store's task belongs to a
 * held query comes from its job's {@value RebuildPriority#QUERY} property. The class's
 * name is kept in each query's checkpoint: it stays.
 */
public class MedusaStateStoreProvider extends RocksDBStateStoreProvider {
  /** The queries (by {@value RebuildPriority#QUERY}) whose eviction scans are held. */
  private static final Set<String> HELD = ConcurrentHashMap.newKeySet();
  private static final String AGGREGATION_SAVE = "StateStoreSaveExec";

  /** Query {@code query}'s aggregations keep their closed windows from its next batch on. */
  public static void holdEviction(String query) {
    HELD.add(query);
  }

  /** Query {@code query}'s aggregations evict again, from their next scan on. */
  public static void releaseEviction(String query) {
    HELD.remove(query);
  }

  @Override
  public StateStore getStore(long version, Option<String> uniqueId,
                             boolean forceSnapshotOnCommit, boolean loadEmpty) {
    return holding(super.getStore(version, uniqueId, forceSnapshotOnCommit, loadEmpty));
  }

  @Override
  public StateStore upgradeReadStoreToWriteStore(ReadStateStore readStore, long version,
                                                 Option<String> uniqueId,
                                                 boolean forceSnapshotOnCommit) {
    return holding(super.upgradeReadStoreToWriteStore(readStore, version, uniqueId,
                                                      forceSnapshotOnCommit));
  }

  /** The store itself, unless its task belongs to a held query. */
  private static StateStore holding(StateStore store) {
    TaskContext task = TaskContext.get();
    String query = task == null ? null : task.getLocalProperty(RebuildPriority.QUERY);
    if (query == null || !HELD.contains(query)) {
      return store;
    }
    return (StateStore) Proxy.newProxyInstance(
        MedusaStateStoreProvider.class.getClassLoader(), new Class<?>[] {StateStore.class},
        (proxy, method, args) -> {
          if (isEvictionScan(method, args) && HELD.contains(query)) {
            return new StateStoreIterator<>(scala.collection.Iterator$.MODULE$.empty(),
                                            StateStoreIterator.$lessinit$greater$default$2());
          }
          try {
            return method.invoke(store, args);
          } catch (InvocationTargetException error) {
            throw error.getCause();
          }
        });
  }

  /** A scan of the whole default column family by a streaming aggregation's save. */
  private static boolean isEvictionScan(Method method, Object[] args) {
    if (!method.getName().equals("iterator") || args == null || args.length != 1 ||
        !StateStore.DEFAULT_COL_FAMILY_NAME().equals(args[0])) {
      return false;
    }
    return StackWalker.getInstance().walk(frames -> frames.limit(32).anyMatch(
        frame -> frame.getClassName().endsWith(AGGREGATION_SAVE)));
  }
}
