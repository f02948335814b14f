package medusa.spark.sunion;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The tuple envelope of an input record (the headers {@code medusa.type}, {@code medusa.id},
 * {@code medusa.stime}, {@code medusa.tentative}), and the rows the source gives the query:
 * the columns of Spark's Kafka source, so that the fragment reads them as it read the
 * SUnion's topic, each tuple's headers with the input it came from and its DPC marks.
 */
public final class Records {
  public static final String TYPE = "medusa.type";
  public static final String ID = "medusa.id";
  public static final String STIME = "medusa.stime";
  public static final String TENTATIVE_MARK = "medusa.tentative";
  public static final String REDO_MARK = "medusa.redo";
  public static final String INPUT = "medusa.input";

  public static final StructType SCHEMA = new StructType(new StructField[] {
      DataTypes.createStructField("key", DataTypes.BinaryType, true),
      DataTypes.createStructField("value", DataTypes.BinaryType, true),
      DataTypes.createStructField("topic", DataTypes.StringType, true),
      DataTypes.createStructField("partition", DataTypes.IntegerType, true),
      DataTypes.createStructField("offset", DataTypes.LongType, true),
      DataTypes.createStructField("timestamp", DataTypes.TimestampType, true),
      DataTypes.createStructField("timestampType", DataTypes.IntegerType, true),
      DataTypes.createStructField("headers", DataTypes.createArrayType(new StructType(
          new StructField[] {DataTypes.createStructField("key", DataTypes.StringType, true),
              DataTypes.createStructField("value", DataTypes.BinaryType, true)}), true), true)});

  public enum Kind { STABLE, TENTATIVE, BOUNDARY, UNDO, REC_DONE, INVALID }

  /** What an input record is to the SUnion. */
  public static final class Envelope {
    public final Kind kind;
    public final long stime;
    /** Set on a BOUNDARY: it promises only about tentative records. */
    public final boolean tentativeMark;
    /** Why an INVALID record cannot be merged. */
    public final String reason;

    Envelope(Kind kind, long stime, boolean tentativeMark, String reason) {
      this.kind = kind;
      this.stime = stime;
      this.tentativeMark = tentativeMark;
      this.reason = reason;
    }

    public boolean data() {
      return kind == Kind.STABLE || kind == Kind.TENTATIVE;
    }
  }

  private Records() {}

  /** The record's envelope, as the Python SUnion reads it (the last of a repeated header). */
  public static Envelope envelope(ConsumerRecord<byte[], byte[]> record) {
    byte[] type = null;
    byte[] id = null;
    byte[] stimeRaw = null;
    boolean mark = false;
    for (Header header : record.headers()) {
      switch (header.key()) {
        case TYPE -> type = header.value();
        case ID -> id = header.value();
        case STIME -> stimeRaw = header.value();
        case TENTATIVE_MARK -> mark = true;
        default -> { }
      }
    }
    Long stime = null;
    if (stimeRaw != null) {
      try {
        stime = Long.parseLong(new String(stimeRaw, StandardCharsets.US_ASCII).trim());
      } catch (NumberFormatException e) {
        stime = null;
      }
    }
    if (stime == null || id == null || type == null) {
      return invalid("record lacks a valid envelope (medusa.type, medusa.id, medusa.stime)");
    }
    String kind = new String(type, StandardCharsets.UTF_8);
    switch (kind) {
      case "STABLE", "TENTATIVE" -> {
        byte[] value = record.value();
        if (value == null || value.length == 0) return invalid(kind + " tuple without a value");
        if (value[0] != 0) {
          return invalid("value does not start with the Confluent wire format's magic byte 0");
        }
        return new Envelope(kind.equals("STABLE") ? Kind.STABLE : Kind.TENTATIVE, stime, mark,
            null);
      }
      case "BOUNDARY" -> {
        return new Envelope(Kind.BOUNDARY, stime, mark, null);
      }
      case "UNDO" -> {
        return new Envelope(Kind.UNDO, stime, mark, null);
      }
      case "REC_DONE" -> {
        return new Envelope(Kind.REC_DONE, stime, mark, null);
      }
      default -> {
        return invalid(kind + " records are not merged by the SUnion");
      }
    }
  }

  private static Envelope invalid(String reason) {
    return new Envelope(Kind.INVALID, 0, false, reason);
  }

  private static InternalRow header(String key, byte[] value) {
    return new GenericInternalRow(new Object[] {UTF8String.fromString(key), value});
  }

  /** A tuple's row, its headers marked as a release of {@code kind} (of {@code epoch}). */
  public static InternalRow tupleRow(ConsumerRecord<byte[], byte[]> record, String input,
      Buckets.ReleaseKind kind, int epoch) {
    List<Object> headers = new ArrayList<>(8);
    boolean tentative = kind == Buckets.ReleaseKind.TENTATIVE;
    for (Header h : record.headers()) {
      if (tentative && (h.key().equals(TYPE) || h.key().equals(TENTATIVE_MARK))) continue;
      headers.add(header(h.key(), h.value()));
    }
    byte[] epochText = String.valueOf(epoch).getBytes(StandardCharsets.US_ASCII);
    if (tentative) {
      headers.add(header(TYPE, "TENTATIVE".getBytes(StandardCharsets.US_ASCII)));
      headers.add(header(TENTATIVE_MARK, epochText));
    } else if (kind == Buckets.ReleaseKind.REDO) {
      headers.add(header(REDO_MARK, epochText));
    }
    headers.add(header(INPUT, input.getBytes(StandardCharsets.UTF_8)));
    return new GenericInternalRow(new Object[] {record.key(), record.value(),
        UTF8String.fromString(record.topic()), record.partition(), record.offset(),
        record.timestamp() * 1000L, record.timestampType().id,
        new GenericArrayData(headers.toArray())});
  }

  /** The release's BOUNDARY: every input has passed {@code through} (or, tentatively, the
   * inputs that are not failed). */
  public static InternalRow boundaryRow(String fragment, long through, Buckets.ReleaseKind kind,
      int epoch, long nowMs) {
    List<Object> headers = new ArrayList<>(5);
    headers.add(header(TYPE, "BOUNDARY".getBytes(StandardCharsets.US_ASCII)));
    headers.add(header(ID, (fragment + "/sunion/boundary/0/" + through)
        .getBytes(StandardCharsets.UTF_8)));
    headers.add(header(STIME, String.valueOf(through).getBytes(StandardCharsets.US_ASCII)));
    byte[] epochText = String.valueOf(epoch).getBytes(StandardCharsets.US_ASCII);
    if (kind == Buckets.ReleaseKind.TENTATIVE) headers.add(header(TENTATIVE_MARK, epochText));
    if (kind == Buckets.ReleaseKind.REDO) headers.add(header(REDO_MARK, epochText));
    return new GenericInternalRow(new Object[] {null, null,
        UTF8String.fromString(fragment + "/sunion"), 0, -1L, nowMs * 1000L, 0,
        new GenericArrayData(headers.toArray())});
  }
}
