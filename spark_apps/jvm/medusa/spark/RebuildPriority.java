package medusa.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;

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
 */
public class RebuildPriority implements SparkPlugin {
  public static final String PROPERTY = "medusa.rebuild";

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
        enter(task != null && "true".equals(task.getLocalProperty(PROPERTY)));
      }

      @Override
      public void onTaskSucceeded() {
        enter(false);  // the thread runs other jobs' tasks next
      }

      @Override
      public void onTaskFailed(TaskFailedReason reason) {
        enter(false);
      }
    };
  }

  /** The calling thread rebuilds (lowest priority) or serves (normal) from now on. */
  public static void enter(boolean rebuilding) {
    int priority = rebuilding ? Thread.MIN_PRIORITY : Thread.NORM_PRIORITY;
    Thread current = Thread.currentThread();
    if (current.getPriority() != priority) {
      current.setPriority(priority);
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
