package medusa.spark.sunion;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * What a fragment's SUnion source reads and how: the SUnion's own configuration (the JSON
 * of {@code medusa.sunion.config.SUnionConfig}, option {@code config}) and the Kafka
 * clients' settings (options {@code kafka.*}, as Spark's Kafka source takes them).
 */
public final class SourceConfig implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final ObjectMapper JSON = new ObjectMapper();

  /** One input of the fragment: a network stream or an upstream fragment's output. */
  public static final class Input implements Serializable {
    private static final long serialVersionUID = 1L;
    public final String name;
    public final String topic;
    public final String bootstrap;

    Input(String name, String topic, String bootstrap) {
      this.name = name;
      this.topic = topic;
      this.bootstrap = bootstrap;
    }
  }

  public final String fragment;
  public final List<Input> inputs;
  public final long bucketMs;
  public final Integer maxDelayMs;
  /** (index, count): only the partitions p with p % count == index; null: all. */
  public final int[] partitionShare;
  /** Input -> partition -> first offset, where nothing is known yet; null: earliest. */
  public final Map<String, Map<Integer, Long>> startPositions;
  public final Map<String, String> kafka;
  /** The most tasks a release is read in (option {@code parallelism}; 2 by default). */
  public final int parallelism;
  /** Records read of each partition at most, then it pauses (option {@code read_limit}; a
   * rehearsal's; 0: no limit). */
  public final long readLimit;
  /** Whether unusable records are dead-lettered (option {@code dead_letters}; a
   * rehearsal's are not: the running query's source sends them). */
  public final boolean deadLetters;

  private SourceConfig(String fragment, List<Input> inputs, long bucketMs, Integer maxDelayMs,
      int[] partitionShare, Map<String, Map<Integer, Long>> startPositions,
      Map<String, String> kafka, int parallelism, long readLimit, boolean deadLetters) {
    this.parallelism = parallelism;
    this.readLimit = readLimit;
    this.deadLetters = deadLetters;
    this.fragment = fragment;
    this.inputs = Collections.unmodifiableList(inputs);
    this.bucketMs = bucketMs;
    this.maxDelayMs = maxDelayMs;
    this.partitionShare = partitionShare;
    this.startPositions = startPositions;
    this.kafka = kafka;
  }

  /** From the source's options; an unusable one is named in the error. */
  public static SourceConfig of(Map<String, String> options) {
    String text = options.get("config");
    if (text == null) {
      throw new IllegalArgumentException("the SUnion source needs the option 'config' (the "
          + "fragment's SUnion configuration as JSON)");
    }
    JsonNode config;
    try {
      config = JSON.readTree(text);
    } catch (Exception e) {
      throw new IllegalArgumentException("the SUnion source's option 'config' is not JSON: "
          + e.getMessage());
    }
    List<Input> inputs = new ArrayList<>();
    for (JsonNode input : config.path("inputs")) {
      inputs.add(new Input(input.get("name").asText(), input.get("topic").asText(),
          input.get("bootstrap").asText()));
    }
    if (inputs.isEmpty()) {
      throw new IllegalArgumentException("the SUnion source's config names no inputs");
    }
    JsonNode delay = config.path("max_delay_ms");
    JsonNode share = config.path("partition_share");
    int[] partitionShare = share.isArray() ? new int[] {share.get(0).asInt(), share.get(1).asInt()}
        : null;
    Map<String, Map<Integer, Long>> starts = null;
    if (config.path("start_positions").isObject()) {
      starts = new HashMap<>();
      for (Map.Entry<String, JsonNode> input : config.get("start_positions").properties()) {
        Map<Integer, Long> offsets = new HashMap<>();
        for (Map.Entry<String, JsonNode> p : input.getValue().properties()) {
          offsets.put(Integer.parseInt(p.getKey()), p.getValue().asLong());
        }
        starts.put(input.getKey(), offsets);
      }
    }
    Map<String, String> kafka = new LinkedHashMap<>();
    for (Map.Entry<String, String> option : options.entrySet()) {
      String key = option.getKey();
      if (key.regionMatches(true, 0, "kafka.", 0, 6)) kafka.put(key.substring(6), option.getValue());
    }
    kafka.remove("bootstrap.servers");  // each input names its own cluster
    return new SourceConfig(config.path("fragment").asText("fragment"), inputs,
        config.path("bucket_ms").asLong(1000), delay.isNumber() ? delay.asInt() : null,
        partitionShare, starts, kafka, parallelism(options.get("parallelism")),
        options.containsKey("read_limit") ? Long.parseLong(options.get("read_limit").trim()) : 0,
        !"false".equalsIgnoreCase(options.getOrDefault("dead_letters", "true")));
  }

  private static int parallelism(String text) {
    if (text == null) return 2;
    try {
      int parallelism = Integer.parseInt(text.trim());
      if (parallelism >= 1) return parallelism;
    } catch (NumberFormatException e) {
      // named below
    }
    throw new IllegalArgumentException("the SUnion source's option 'parallelism': expected a "
        + "whole number of tasks, 1 or more, got '" + text + "'");
  }

  public Map<String, String> topics() {
    Map<String, String> topics = new LinkedHashMap<>();
    for (Input input : inputs) topics.put(input.name, input.topic);
    return topics;
  }

  public boolean owns(int partition) {
    return partitionShare == null || partition % partitionShare[1] == partitionShare[0];
  }

  public Input input(String name) {
    for (Input input : inputs) {
      if (input.name.equals(name)) return input;
    }
    throw new IllegalArgumentException("unknown input " + name);
  }

  /** A read_committed consumer's settings for {@code bootstrap}, assigned, never committing. */
  public Properties consumer(String bootstrap, String clientId) {
    Properties props = new Properties();
    props.putAll(kafka);
    props.put("bootstrap.servers", bootstrap);
    props.put("client.id", clientId);
    props.put("isolation.level", "read_committed");
    props.put("enable.auto.commit", "false");
    props.put("auto.offset.reset", "earliest");
    // At the end of the log a fetch would wait the default 500 ms for more to come.
    props.putIfAbsent("fetch.max.wait.ms", "10");
    props.put("key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    props.put("value.deserializer",
        "org.apache.kafka.common.serialization.ByteArrayDeserializer");
    return props;
  }

  /** An idempotent producer's settings for the dead letters on {@code bootstrap}. */
  public Properties deadLetterProducer(String bootstrap) {
    Properties props = new Properties();
    props.putAll(kafka);
    props.put("bootstrap.servers", bootstrap);
    props.put("enable.idempotence", "true");
    props.put("acks", "all");
    props.put("key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
    props.put("value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
    return props;
  }
}
