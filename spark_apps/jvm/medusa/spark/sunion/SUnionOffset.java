package medusa.spark.sunion;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * The SUnion source's offset: one release of its buckets, and everything needed to read it
 * again. It lands in Spark's offset log, so a batch is a pure function of its end offset
 * and a restart, a warm move's replica or a takeover reads it identically:
 *
 * <pre>
 * {"seq": n, "kind": "stable" | "tentative" | "redo" | null, "epoch": e,
 *  "from_stime": s | null, "through": t | null,
 *  "ranges": {input: {"partition": [from, to]}},
 *  "positions": the Buckets' positions after the release (null before the first)}
 * </pre>
 *
 * The batch holds every data record of each range (offsets [from, to)) whose stime is in
 * [from_stime, through) (no lower bound when null): of STABLE type for a stable release or
 * a REDO; for a tentative release also the TENTATIVE ones no later UNDO of their partition
 * withdrew before {@code to}. Then one BOUNDARY at {@code through}. A release with no
 * ranges (a re-announcement) carries only the BOUNDARY.
 */
public final class SUnionOffset extends Offset {
  private static final ObjectMapper JSON = new ObjectMapper();

  public final long seq;
  public final String kind;
  public final int epoch;
  public final Long fromStime;
  public final Long through;
  public final Map<String, Map<String, long[]>> ranges;
  public final Map<String, Object> positions;
  private final String json;

  public SUnionOffset(long seq, String kind, int epoch, Long fromStime, Long through,
      Map<String, Map<String, long[]>> ranges, Map<String, Object> positions) {
    this.seq = seq;
    this.kind = kind;
    this.epoch = epoch;
    this.fromStime = fromStime;
    this.through = through;
    this.ranges = ranges;
    this.positions = positions;
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("seq", seq);
    out.put("kind", kind);
    out.put("epoch", epoch);
    out.put("from_stime", fromStime);
    out.put("through", through);
    out.put("ranges", ranges);
    out.put("positions", positions);
    try {
      this.json = JSON.writeValueAsString(out);
    } catch (Exception e) {
      throw new IllegalStateException("cannot write the SUnion offset", e);
    }
  }

  public static SUnionOffset initial() {
    return new SUnionOffset(0, null, 0, null, null, new LinkedHashMap<>(), null);
  }

  public static SUnionOffset parse(String json) {
    try {
      Map<String, Object> in = JSON.readValue(json, new TypeReference<LinkedHashMap<String, Object>>() {});
      Map<String, Map<String, long[]>> ranges = new LinkedHashMap<>();
      @SuppressWarnings("unchecked")
      Map<String, Map<String, java.util.List<Number>>> raw =
          (Map<String, Map<String, java.util.List<Number>>>) in.get("ranges");
      if (raw != null) {
        for (Map.Entry<String, Map<String, java.util.List<Number>>> input : raw.entrySet()) {
          Map<String, long[]> of = new LinkedHashMap<>();
          for (Map.Entry<String, java.util.List<Number>> p : input.getValue().entrySet()) {
            of.put(p.getKey(), new long[] {p.getValue().get(0).longValue(),
                p.getValue().get(1).longValue()});
          }
          ranges.put(input.getKey(), of);
        }
      }
      @SuppressWarnings("unchecked")
      Map<String, Object> positions = (Map<String, Object>) in.get("positions");
      Number epoch = (Number) in.get("epoch");
      return new SUnionOffset(((Number) in.get("seq")).longValue(), (String) in.get("kind"),
          epoch == null ? 0 : epoch.intValue(), Buckets.longOrNull(in.get("from_stime")),
          Buckets.longOrNull(in.get("through")), ranges, positions);
    } catch (Exception e) {
      throw new IllegalArgumentException("not a SUnion source offset: " + json, e);
    }
  }

  /** Whether this offset releases something: data, or a boundary to pass on. */
  public boolean releases() {
    return through != null && kind != null;
  }

  @Override
  public String json() {
    return json;
  }
}
