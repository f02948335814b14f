package medusa.spark.sunion;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Replays the SUnion's recorded vectors ({@code tests/vectors/sunion_buckets.json}, written
 * from buckets.py) on {@link Buckets}: each operation's answer, the clock readings it takes
 * (in order and in number) and the state it leaves must be the recorded ones.
 *
 * <p>{@code java -cp <jars> medusa.spark.sunion.BucketsVectors FILE} prints one line per
 * failing vector and a closing count; it exits 1 when one fails.
 */
public final class BucketsVectors {
  private static final ObjectMapper JSON = new ObjectMapper();

  private BucketsVectors() {}

  /** Numbers compare by value: the file's 1000 and a long 1000L, or 1.0 and 1, are one. */
  private static final Comparator<JsonNode> BY_VALUE = (a, b) -> {
    if (a.isNumber() && b.isNumber()) return Double.compare(a.doubleValue(), b.doubleValue());
    return a.equals(b) ? 0 : 1;
  };

  static final class Replayed implements java.util.function.DoubleSupplier {
    final String vector;
    final ArrayDeque<Double> values = new ArrayDeque<>();

    Replayed(String vector) {
      this.vector = vector;
    }

    void load(JsonNode recorded) {
      values.clear();
      for (JsonNode value : recorded) values.addLast(value.doubleValue());
    }

    @Override
    public double getAsDouble() {
      Double value = values.pollFirst();
      if (value == null) {
        throw new AssertionError(vector + ": read a clock more often than recorded");
      }
      return value;
    }
  }

  public static void main(String[] args) throws Exception {
    JsonNode vectors = JSON.readTree(new File(args[0])).get("vectors");
    int passed = 0;
    int failed = 0;
    for (JsonNode vector : vectors) {
      String problem = replay(vector);
      if (problem == null) {
        passed++;
      } else {
        failed++;
        System.out.println("FAIL " + problem);
      }
    }
    System.out.println(passed + " passed, " + failed + " failed");
    System.exit(failed == 0 ? 0 : 1);
  }

  /** Null when the vector replays as recorded, else the first difference. */
  static String replay(JsonNode vector) {
    String name = vector.get("name").asText();
    Replayed clock = new Replayed(name);
    Replayed wall = new Replayed(name);
    Map<String, String> topics = new LinkedHashMap<>();
    for (Map.Entry<String, JsonNode> topic : vector.get("topics").properties()) {
      topics.put(topic.getKey(), topic.getValue().asText());
    }
    Buckets buckets = new Buckets(vector.get("bucket_ms").asLong(), topics,
        longOrNull(vector.get("released_through")), intOrNull(vector.get("max_delay_ms")),
        longOrNull(vector.get("tentative_through")), vector.get("epoch").asInt(), clock, wall);
    int index = 0;
    for (JsonNode op : vector.get("ops")) {
      String where = name + " op " + index++ + " (" + op.get("op").asText() + ")";
      clock.load(op.get("clock"));
      wall.load(op.get("wall"));
      JsonNode got;
      try {
        got = apply(buckets, op);
      } catch (AssertionError | RuntimeException failure) {
        return where + ": " + failure;
      }
      JsonNode expected = op.get("expect");
      if (op.has("expect") && !expected.equals(BY_VALUE, got)) {
        return where + ": expected " + expected + ", got " + got;
      }
      if (!clock.values.isEmpty() || !wall.values.isEmpty()) {
        return where + ": read a clock less often than recorded";
      }
      JsonNode state = state(buckets);
      if (!op.get("state").equals(BY_VALUE, state)) {
        return where + ": state " + state + ", expected " + op.get("state");
      }
    }
    return null;
  }

  private static JsonNode apply(Buckets buckets, JsonNode op) {
    String input = op.path("input").asText();
    int partition = op.path("partition").asInt();
    long offset = op.path("offset").asLong();
    switch (op.get("op").asText()) {
      case "add_partition": {
        JsonNode restored = op.get("restored");
        buckets.addPartition(input, partition, op.get("start").asLong(),
            restored.isNull() ? null : new Buckets.Restored(restored.get("resume").asLong(),
                longOrNull(restored.get("boundary")), restored.get("read").asLong(),
                longOrNull(restored.get("tentative_boundary"))));
        return null;
      }
      case "add_tuple": {
        JsonNode t = op.get("tuple");
        Buckets.Outcome outcome = buckets.addTuple(new Buckets.Held(t.get(0).asLong(),
            t.get(1).asText(), t.get(2).asInt(), t.get(3).asLong(), t.get(4).asBoolean(), null));
        return JsonNodeFactory.instance.textNode(outcome.value);
      }
      case "add_boundary":
        buckets.addBoundary(input, partition, offset, op.get("stime").asLong(),
            op.get("tentative").asBoolean());
        return null;
      case "undo":
        return JsonNodeFactory.instance.numberNode(buckets.undo(input, partition, offset));
      case "pass_over":
        return JsonNodeFactory.instance.booleanNode(buckets.passOver(input, partition, offset));
      case "release":
        return release(buckets.release());
      case "reannouncement":
        return release(buckets.reannouncement());
      case "frontier":
        return tree(buckets.frontier());
      case "resume_offset":
        return JsonNodeFactory.instance.numberNode(buckets.resumeOffset(input, partition));
      case "positions":
        return JSON.valueToTree(buckets.positions());
      case "dpc_state":
        return JsonNodeFactory.instance.textNode(buckets.dpcState().name());
      default:
        throw new IllegalArgumentException("unknown operation " + op.get("op"));
    }
  }

  static JsonNode release(Buckets.Release release) {
    if (release == null) return JsonNodeFactory.instance.nullNode();
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("through", release.through);
    out.put("kind", release.kind.value);
    out.put("epoch", release.epoch);
    out.put("tuples", tuples(release.tuples));
    out.put("uncorrected", tuples(release.uncorrected));
    out.put("positions", release.positions);
    out.put("waited_since", release.waitedSince);
    return JSON.valueToTree(out);
  }

  private static List<List<Object>> tuples(List<Buckets.Held> held) {
    List<List<Object>> out = new ArrayList<>();
    for (Buckets.Held t : held) {
      out.add(List.of(t.stime, t.input, t.partition, t.offset, t.tentative));
    }
    return out;
  }

  private static JsonNode state(Buckets buckets) {
    ObjectNode state = JsonNodeFactory.instance.objectNode();
    state.set("released_through", tree(buckets.releasedThrough));
    state.set("stable_through", tree(buckets.stableThrough));
    state.put("epoch", buckets.epoch);
    List<Buckets.Key> failed = new ArrayList<>(buckets.failed);
    failed.sort(Comparator.naturalOrder());
    List<List<Object>> pairs = new ArrayList<>();
    for (Buckets.Key key : failed) pairs.add(List.of(key.input, key.partition));
    state.set("failed", JSON.valueToTree(pairs));
    state.put("held_tuples", buckets.heldTuples);
    state.put("held_buckets", buckets.heldBuckets());
    return state;
  }

  private static Long longOrNull(JsonNode node) {
    return node == null || node.isNull() ? null : node.asLong();
  }

  private static Integer intOrNull(JsonNode node) {
    return node == null || node.isNull() ? null : node.asInt();
  }

  private static JsonNode tree(Object value) {
    return value == null ? JsonNodeFactory.instance.nullNode() : JSON.valueToTree(value);
  }
}
