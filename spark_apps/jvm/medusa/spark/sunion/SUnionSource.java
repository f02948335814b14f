package medusa.spark.sunion;

import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.readStream.format("medusa.spark.sunion.SUnionSource").option("config", json)}:
 * a fragment's inputs, wherever they live, merged by its SUnion inside the query (see
 * {@link SUnionStream}). Its rows have the columns of Spark's Kafka source.
 */
public final class SUnionSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "medusa-sunion";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return Records.SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning,
      Map<String, String> properties) {
    return new SUnionTable(SourceConfig.of(properties));
  }

  static final class SUnionTable implements Table, SupportsRead {
    private final SourceConfig config;

    SUnionTable(SourceConfig config) {
      this.config = config;
    }

    @Override
    public String name() {
      return "sunion " + config.fragment;
    }

    @Override
    public StructType schema() {
      return Records.SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Set.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new Scan() {
        @Override
        public StructType readSchema() {
          return Records.SCHEMA;
        }

        @Override
        public String description() {
          return "SUnion of " + config.fragment;
        }

        @Override
        public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
          return new SUnionStream(config);
        }
      };
    }
  }
}
