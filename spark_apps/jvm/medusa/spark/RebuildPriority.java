package medusa.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.spark.TaskContext;
import org.apache.spark.TaskFailedReason;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * Work that rebuilds a query's state beside a serving one (a scale step's new instance, a
 * move's replica, a DPC redo) runs at the lowest thread priority, so that on a busy machine
 * the queries whose results are read get the CPU first. Spark's fair scheduler pools only
 * order the tasks waiting for a slot; once running, a rebuild's tasks and a serving
 * query's would share the cores evenly.
 *
 * Tasks take it from their job's local property {@value #PROPERTY} at their start (an
 * executor plugin, in the task's thread); a query's own thread, which plans its batches,
 * takes it with each batch ({@link #enter}). A Java priority reaches the thread's nice
 * value only with {@code -XX:ThreadPriorityPolicy=1}, which needs the right to lower a
 * nice value again (root with CAP_SYS_NICE): elsewhere this changes nothing.
 *
 * A query's priority can also be set in the middle of a batch ({@link #setQueryPriority}),
 * for good: a move's replica catching up on its lag just before it takes over goes on at
 * the normal priority at once, and the instance it replaces gives way while its fenced
 * batch ends. Its jobs name it in {@value #QUERY}.
 */
public class RebuildPriority implements SparkPlugin {
  public static final String PROPERTY = "medusa.rebuild";
  public static final String QUERY = "medusa.query";

  /** The running tasks of each query that names itself, by thread. */
  private static final Map<Thread, String> TASK_QUERY = new ConcurrentHashMap<>();
  /** Each such query's own thread (which plans its batches and starts their jobs). */
  private static final Map<String, Thread> QUERY_THREAD = new ConcurrentHashMap<>();
  /** A query's priority set by {@link #setQueryPriority}: it wins over its jobs'. */
  private static final Map<String, Integer> SET = new ConcurrentHashMap<>();
  /**
   * A move's replica catching up beside the instance it replaces, just before it takes
   * over: between the two (its own nice value, {@code JavaPriority2_To_OSPriority}).
   */
  public static final int CATCHING_UP = Thread.MIN_PRIORITY + 1;

  @Override
  public DriverPlugin driverPlugin() {
    return null;
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new ExecutorPlugin() {
      @Override
      public void onTaskStart() {
        TaskContext task = TaskContext.get();
        boolean rebuilding = task != null && "true".equals(task.getLocalProperty(PROPERTY));
        String query = task == null ? null : task.getLocalProperty(QUERY);
        if (query != null) {
          TASK_QUERY.put(Thread.currentThread(), query);
        } else {
          TASK_QUERY.remove(Thread.currentThread());
        }
        Integer set = query == null ? null : SET.get(query);
        enter(set != null ? set : priorityOf(rebuilding));
      }

      @Override
      public void onTaskSucceeded() {
        ended();
      }

      @Override
      public void onTaskFailed(TaskFailedReason reason) {
        ended();
      }
    };
  }

  private static void ended() {
    TASK_QUERY.remove(Thread.currentThread());
    enter(false);  // the thread runs other jobs' tasks next
  }

  /**
   * The calling thread, query {@code query}'s own, begins a batch that rebuilds or serves,
   * unless the query's priority was set.
   */
  public static void enterQuery(String query, boolean rebuilding) {
    QUERY_THREAD.put(query, Thread.currentThread());
    enter(SET.getOrDefault(query, priorityOf(rebuilding)));
  }

  /**
   * Query {@code query}'s thread and running tasks rebuild (lowest priority) or serve
   * (normal) from now on, and so do the tasks and batches it starts later, until set
   * again.
   */
  public static void setQueryPriority(String query, boolean rebuilding) {
    setQueryPriority(query, priorityOf(rebuilding));
  }

  /** Query {@code query} catches up ({@link #CATCHING_UP}) from now on, until set again. */
  public static void setQueryCatchingUp(String query) {
    setQueryPriority(query, CATCHING_UP);
  }

  private static void setQueryPriority(String query, int priority) {
    SET.put(query, priority);
    Thread own = QUERY_THREAD.get(query);
    if (own != null && own.isAlive()) {
      own.setPriority(priority);
    }
    for (Map.Entry<Thread, String> task : TASK_QUERY.entrySet()) {
      if (query.equals(task.getValue())) {
        task.getKey().setPriority(priority);
      }
    }
  }

  /** Query {@code query} has stopped. */
  public static void forgetQuery(String query) {
    QUERY_THREAD.remove(query);
    SET.remove(query);
  }

  private static int priorityOf(boolean rebuilding) {
    return rebuilding ? Thread.MIN_PRIORITY : Thread.NORM_PRIORITY;
  }

  /** The calling thread rebuilds (lowest priority) or serves (normal) from now on. */
  public static void enter(boolean rebuilding) {
    enter(priorityOf(rebuilding));
  }

  private static void enter(int priority) {
    Thread current = Thread.currentThread();
    if (current.getPriority() != priority) {
      current.setPriority(priority);
    }
  }

  /**
   * The calling thread's Linux thread id, or -1 where it cannot be read: its nice value
   * can then be set for it alone, which a Java priority cannot (the threads it starts take
   * its Java priority, and their nice value from it).
   */
  public static int currentThreadId() {
    try {
      String self = Files.readSymbolicLink(Paths.get("/proc/thread-self")).toString();
      return Integer.parseInt(self.substring(self.lastIndexOf('/') + 1));
    } catch (IOException | RuntimeException e) {
      return -1;
    }
  }

  /** The calling thread's nice value (Linux), or 0 where it cannot be read. */
  public static int currentNice() {
    try {
      String stat = new String(Files.readAllBytes(Paths.get("/proc/thread-self/stat")),
          StandardCharsets.US_ASCII);
      String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
      return Integer.parseInt(fields[16]);
    } catch (IOException | RuntimeException e) {
      return 0;
    }
  }
}
