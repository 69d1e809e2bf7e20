//! Reading the Iceberg tables strata writes with an independent reader (PyIceberg, from the
//! venv `./dev setup` installs) and checking them against the topic.

use super::consume_all;
use std::collections::BTreeMap;

/// PyIceberg's properties of the embedded catalog on `db` (plus S3 settings in `extra`).
pub fn sql_catalog(
    db: &std::path::Path,
    warehouse: &str,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut p = serde_json::json!({"type": "sql", "uri": format!("sqlite:///{}", db.display()), "warehouse": warehouse});
    if let (Some(p), serde_json::Value::Object(e)) = (p.as_object_mut(), extra) {
        p.extend(e);
    }
    p
}

/// Runs `script` in PyIceberg's venv with the catalog's properties and `args`; its JSON output.
fn pyiceberg(
    what: &str,
    script: &str,
    catalog: &serde_json::Value,
    args: &[String],
) -> serde_json::Value {
    let python = std::env::var("STRATA_TEST_ICEBERG_PYTHON")
        .expect("STRATA_TEST_ICEBERG_PYTHON (./dev test sets it: PyIceberg's venv)");
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(catalog.to_string())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What PyIceberg reads from a table of `catalog` (its properties, with `type`): rows and
/// every snapshot's summary.
pub fn pyiceberg_read(catalog: &serde_json::Value, table: &str) -> serde_json::Value {
    let script = r#"
import sys, json
import pyarrow as pa
from pyiceberg.catalog import load_catalog
props, name = json.loads(sys.argv[1]), sys.argv[2]
cat = load_catalog("strata", **props)
t = cat.load_table(name)
a = t.scan().to_arrow()
ts = a.column("timestamp").cast(pa.int64()).to_pylist()
hx = lambda b: None if b is None else b.hex()
rows = [{"topic": r["topic"], "partition": r["partition"], "offset": r["offset"],
         "ts_us": ts[i], "type": r["timestamp_type"], "key": hx(r["key"]), "value": hx(r["value"]),
         "headers": [[h["key"], hx(h["value"])] for h in r["headers"]]}
        for i, r in enumerate(a.to_pylist())]
# In commit order (the metadata file lists snapshots in no particular order).
snaps = [{"op": s.summary.operation.value, "offsets": s.summary.additional_properties.get("strata.offsets"),
          "ranges": s.summary.additional_properties.get("strata.ranges")}
         for s in sorted(t.snapshots(), key=lambda s: s.sequence_number)]
current = t.current_snapshot().summary.additional_properties.get("strata.offsets")
spec = [[f.name, str(f.transform), t.schema().find_field(f.source_id).name] for f in t.spec().fields]
ids = [[f.field_id, f.name] for f in t.schema().fields]
print(json.dumps({"rows": rows, "snapshots": snaps, "current": current, "spec": spec, "ids": ids,
                  "files": len(list(t.scan().plan_files()))}))
"#;
    pyiceberg("PyIceberg", script, catalog, &[table.to_string()])
}

/// Checks a table PyIceberg read against the topic: every record once and as produced,
/// partitioned by day, every commit's ranges disjoint and the last summary's offsets at the
/// partitions' ends. Returns the number of rows.
pub fn check_table(read: &serde_json::Value, topic: &str) -> usize {
    let consumed = consume_all(topic);
    let rows = read["rows"].as_array().unwrap();
    let mut by_offset = BTreeMap::new();
    for r in rows {
        let key = (
            r["partition"].as_i64().unwrap() as i32,
            r["offset"].as_i64().unwrap(),
        );
        assert!(
            by_offset.insert(key, r).is_none(),
            "offset {key:?} in the table twice"
        );
    }
    assert_eq!(
        by_offset.len(),
        consumed.len(),
        "every record in the table once"
    );
    let hex = |b: &Option<Vec<u8>>| {
        b.as_ref()
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
    };
    for c in &consumed {
        let r = by_offset[&(c.partition.unwrap(), c.offset.unwrap())];
        assert_eq!(r["topic"], topic);
        assert_eq!(r["ts_us"].as_i64(), c.timestamp.map(|t| t * 1000));
        assert_eq!(r["type"], c.timestamp_type.as_str());
        assert_eq!(r["key"].as_str().map(String::from), hex(&c.key));
        assert_eq!(r["value"].as_str().map(String::from), hex(&c.value));
        let headers: Vec<(String, Option<String>)> = c
            .headers
            .iter()
            .map(|h| (h.key.clone(), hex(&h.value)))
            .collect();
        let got: Vec<(String, Option<String>)> = r["headers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| {
                (
                    h[0].as_str().unwrap().to_string(),
                    h[1].as_str().map(String::from),
                )
            })
            .collect();
        assert_eq!(
            got, headers,
            "headers in order, repeated keys and nulls kept"
        );
    }
    assert_eq!(
        read["spec"],
        serde_json::json!([["timestamp_day", "day", "timestamp"]])
    );
    assert_eq!(read["ids"][3], serde_json::json!([4, "timestamp"]));
    // Each commit's ranges, over all snapshots, tile every partition from 0 without overlap.
    let mut covered: BTreeMap<i32, Vec<(i64, i64)>> = BTreeMap::new();
    for s in read["snapshots"].as_array().unwrap() {
        assert_eq!(s["op"], "append");
        let ranges: BTreeMap<String, (i64, i64)> =
            serde_json::from_str(s["ranges"].as_str().expect("strata.ranges")).unwrap();
        for (p, r) in ranges {
            covered.entry(p.parse().unwrap()).or_default().push(r);
        }
    }
    let last = read["snapshots"].as_array().unwrap().last().unwrap();
    assert_eq!(
        last["offsets"], read["current"],
        "the newest commit is the current snapshot"
    );
    let offsets: BTreeMap<String, i64> =
        serde_json::from_str(read["current"].as_str().expect("strata.offsets")).unwrap();
    for (p, mut ranges) in covered {
        ranges.sort_unstable();
        let mut at = 0;
        for (from, to) in ranges {
            assert_eq!(
                from, at,
                "partition {p}: commits neither overlap nor leave gaps"
            );
            at = to;
        }
        assert_eq!(
            offsets[&p.to_string()],
            at,
            "partition {p}: the summary's offset"
        );
        let high = consumed.iter().filter(|c| c.partition == Some(p)).count() as i64;
        assert_eq!(at, high, "partition {p} committed up to its end");
    }
    rows.len()
}

/// iceberg-core's view of a table on the embedded catalog's SQLite file (`StrataTableCheck` of
/// devenv/iceberg-rest, through Java's JDBC catalog): snapshots, fields, spec, files, records.
pub fn java_check(db: &std::path::Path, warehouse: &str, table: &str) -> serde_json::Value {
    let cp = std::env::var("STRATA_TEST_ICEBERG_REST_CLASSPATH")
        .expect("STRATA_TEST_ICEBERG_REST_CLASSPATH (./dev test sets it: devenv/iceberg-rest)");
    let out = std::process::Command::new("java")
        .arg("-cp")
        .arg(cp)
        .arg("StrataTableCheck")
        .arg(db)
        .arg(warehouse)
        .arg(table)
        .output()
        .expect("java");
    assert!(
        out.status.success(),
        "iceberg-core's check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A scratch directory for an Iceberg test: `store/` inside it is the `file://` store's root,
/// and catalog files go beside it.
pub fn scratch() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    std::fs::create_dir_all(&root).unwrap();
    (dir, root)
}

/// Apache Iceberg's REST catalog server (devenv/iceberg-rest, built by `./dev setup`) over a
/// SQLite file, on a free port of 127.0.0.1; stopped when dropped.
pub struct RestCatalog {
    child: std::process::Child,
    pub uri: String,
}

impl RestCatalog {
    /// `auth`: the bearer token every request must carry, and the client credentials
    /// (`id:secret`) the server's token endpoint gives it for.
    pub fn start(db: &std::path::Path, warehouse: &str, auth: Option<(&str, &str)>) -> Self {
        let env: Vec<(&str, String)> = match auth {
            Some((token, credential)) => vec![
                ("STRATA_REST_TOKEN", token.to_string()),
                ("STRATA_REST_CREDENTIAL", credential.to_string()),
            ],
            None => Vec::new(),
        };
        Self::spawn(db, warehouse, &env)
    }

    /// A server that holds table commits while the file `gate` exists (and writes
    /// `<gate>.held` when it holds one).
    pub fn gated(db: &std::path::Path, warehouse: &str, gate: &std::path::Path) -> Self {
        let env = [("STRATA_REST_COMMIT_GATE", gate.display().to_string())];
        Self::spawn(db, warehouse, &env)
    }

    fn spawn(db: &std::path::Path, warehouse: &str, env: &[(&str, String)]) -> Self {
        use std::io::BufRead;
        let cp = std::env::var("STRATA_TEST_ICEBERG_REST_CLASSPATH")
            .expect("STRATA_TEST_ICEBERG_REST_CLASSPATH (./dev test sets it: devenv/iceberg-rest)");
        let mut cmd = std::process::Command::new("java");
        cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        let mut child = cmd
            .arg("-cp")
            .arg(cp)
            .arg("StrataRestCatalog")
            .arg(db)
            .arg(warehouse)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("java");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(port) = line.strip_prefix("LISTENING ") {
                    let _ = tx.send(port.trim().to_string());
                }
            }
        });
        let port = rx
            .recv_timeout(std::time::Duration::from_secs(90))
            .expect("the REST catalog server says where it listens");
        Self {
            child,
            uri: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for RestCatalog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the current-state query of docs/iceberg.md makes of a CDC task's Iceberg tables
/// (DuckDB over PyIceberg's scan): per table directory (`dir=namespace.table` arguments), the
/// final state, the distinct changes and the changes found twice, its schemas and field ids,
/// and the offsets its snapshots hold per writer.
pub fn cdc_tables(catalog: &serde_json::Value, tables: &[(&str, String)]) -> serde_json::Value {
    let script = r#"
import sys, json
from pyiceberg.catalog import load_catalog
cat = load_catalog("strata", **json.loads(sys.argv[1]))
out = {}
for pair in sys.argv[2:]:
    d, name = pair.split("=", 1)
    t = cat.load_table(name)
    con = t.scan().to_duckdb("changes")
    cols = [r[0] for r in con.sql("DESCRIBE changes").fetchall()]
    vals = [c for c in cols if c.startswith("new_")]
    # docs/iceberg.md, "CDC tables": the current state.
    q = f"""SELECT {', '.join(vals)} FROM (
              SELECT *, row_number() OVER (PARTITION BY coalesce(new_id, old_id)
                                           ORDER BY logical_clock DESC) AS rn
              FROM changes)
            WHERE rn = 1 AND type <> 'D'"""
    rows = {}
    for r in con.sql(q).fetchall():
        row = {c[4:]: str(v) for c, v in zip(vals, r) if v is not None}
        rows[row["id"]] = row
    snaps = sorted(t.snapshots(), key=lambda s: s.sequence_number)
    out[d] = {
        "state": rows,
        "changes": con.sql("SELECT count(DISTINCT global_id) FROM changes").fetchone()[0],
        "twice": con.sql("SELECT count(*) - count(DISTINCT global_id) FROM changes").fetchone()[0],
        "schemas": len(t.schemas()),
        "ids": {f.name: f.field_id for f in t.schema().fields},
        "offsets": {k: v for k, v in snaps[-1].summary.additional_properties.items()
                    if k.startswith("strata.offsets")},
    }
print(json.dumps(out))
"#;
    let args: Vec<String> = tables.iter().map(|(d, n)| format!("{d}={n}")).collect();
    pyiceberg("PyIceberg and DuckDB", script, catalog, &args)
}

/// Rolls a table back (PyIceberg) to its newest snapshot whose `strata.offsets` differ from the
/// current one's, as if its last commit never landed; returns the offsets it had and has now.
pub fn roll_back_last_commit(catalog: &serde_json::Value, table: &str) -> (String, String) {
    let script = r#"
import sys, json
from pyiceberg.catalog import load_catalog
cat = load_catalog("strata", **json.loads(sys.argv[1]))
t = cat.load_table(sys.argv[2])
key = "strata.offsets"
now = t.current_snapshot().summary.additional_properties.get(key)
older = [s for s in sorted(t.snapshots(), key=lambda s: s.sequence_number)
         if s.summary.additional_properties.get(key) not in (None, now)]
to = older[-1]
with t.manage_snapshots() as ms:
    ms.rollback_to_snapshot(to.snapshot_id)
t = cat.load_table(sys.argv[2])
print(json.dumps([now, t.current_snapshot().summary.additional_properties.get(key)]))
"#;
    serde_json::from_value(pyiceberg(
        "PyIceberg's rollback",
        script,
        catalog,
        &[table.to_string()],
    ))
    .unwrap()
}
