import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.iceberg.CatalogUtil;
import org.apache.iceberg.FileScanTask;
import org.apache.iceberg.PartitionField;
import org.apache.iceberg.Snapshot;
import org.apache.iceberg.Table;
import org.apache.iceberg.catalog.Catalog;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.io.CloseableIterable;
import org.apache.iceberg.types.Types;

/**
 * iceberg-core's view of a table strata wrote, through its JDBC catalog on the same SQLite file
 * (an independent reader of the catalog, metadata and manifests; data files are not read).
 * Arguments: the SQLite file, the warehouse URL, the table ("ns.name"), the catalog name.
 * Prints one JSON object: snapshots in commit order with their summaries, the schema's fields
 * with their ids, the partition spec, and the data files and records of the current snapshot.
 */
public final class StrataTableCheck {
  public static void main(String[] args) throws Exception {
    Catalog catalog = CatalogUtil.buildIcebergCatalog(
        args.length > 3 ? args[3] : "strata",
        Map.of(
            "catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog",
            "uri", "jdbc:sqlite:" + args[0],
            "warehouse", args[1],
            "jdbc.schema-version", "V1"),
        new org.apache.hadoop.conf.Configuration());
    Table table = catalog.loadTable(TableIdentifier.parse(args[2]));
    Map<String, Object> out = new LinkedHashMap<>();
    List<Map<String, Object>> snapshots = new ArrayList<>();
    for (Snapshot s : table.snapshots()) {
      Map<String, Object> m = new LinkedHashMap<>();
      m.put("id", s.snapshotId());
      m.put("sequence", s.sequenceNumber());
      m.put("operation", s.operation());
      m.put("summary", s.summary());
      snapshots.add(m);
    }
    snapshots.sort((a, b) -> Long.compare((long) a.get("sequence"), (long) b.get("sequence")));
    out.put("snapshots", snapshots);
    out.put("current", table.currentSnapshot() == null ? null : table.currentSnapshot().snapshotId());
    List<List<Object>> fields = new ArrayList<>();
    for (Types.NestedField f : table.schema().columns()) {
      fields.add(List.of(f.fieldId(), f.name(), f.type().toString()));
    }
    out.put("fields", fields);
    List<String> spec = new ArrayList<>();
    for (PartitionField f : table.spec().fields()) {
      spec.add(f.name() + "=" + f.transform() + "(" + table.schema().findColumnName(f.sourceId()) + ")");
    }
    out.put("spec", spec);
    long files = 0;
    long records = 0;
    try (CloseableIterable<FileScanTask> tasks = table.newScan().planFiles()) {
      for (FileScanTask t : tasks) {
        files++;
        records += t.file().recordCount();
      }
    }
    out.put("files", files);
    out.put("records", records);
    System.out.println(new ObjectMapper().writeValueAsString(out));
  }
}
