//! A change-data-capture source for tests (`../shared/spec/cdc-format.md`): messages of one or
//! more row changes over several tables, at least once (a "restart" sends recent messages
//! again, to the same partition), a column added mid-stream, a few malformed messages, and the
//! true final state of every table to check an archive against.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use strata::format::Record;

/// Table directory (as strata names it) → primary key → column → value.
pub type State = BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>;

pub struct CdcData {
    /// In produce order.
    pub records: Vec<Record>,
    /// What the tables hold after every change.
    pub state: State,
    /// Distinct changes (by GLOBAL_ID) of well-formed messages.
    pub changes: usize,
    /// Changes sent again.
    pub repeated: usize,
    pub malformed: usize,
    /// Indexes in `records` where a restart's repeats begin.
    pub restarts: Vec<usize>,
}

struct Table {
    dir: &'static str,
    database: &'static str,
    schema: Option<&'static str>,
    name: &'static str,
}

const TABLES: [Table; 3] = [
    Table {
        dir: "shop.orders",
        database: "shop",
        schema: None,
        name: "orders",
    },
    Table {
        dir: "shop.users",
        database: "shop",
        schema: None,
        name: "users",
    },
    Table {
        dir: "billing.public.payments",
        database: "billing",
        schema: Some("public"),
        name: "payments",
    },
];

fn row(rng: &mut StdRng, t: usize, id: u64, with_coupon: bool) -> BTreeMap<String, String> {
    let mut r = BTreeMap::from([("id".to_string(), id.to_string())]);
    match t {
        0 => {
            let status = ["new", "paid", "shipped"][rng.random_range(0..3)];
            r.insert("status".into(), status.into());
            r.insert(
                "amount".into(),
                format!(
                    "{}.{:02}",
                    rng.random_range(1..500),
                    rng.random_range(0..100)
                ),
            );
            if with_coupon {
                r.insert("coupon".into(), format!("C{}", rng.random_range(0..9)));
            }
        }
        1 => {
            r.insert("name".into(), format!("user-{}", rng.random_range(0..1000)));
        }
        _ => {
            r.insert(
                "method".into(),
                ["card", "bank"][rng.random_range(0..2)].into(),
            );
        }
    }
    r
}

/// `messages` well-formed messages for `topic` over `partitions`, timestamps from `base_ts`.
pub fn generate(topic: &str, partitions: i32, messages: usize, base_ts: i64, seed: u64) -> CdcData {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut state: State = BTreeMap::new();
    let mut next_id = [1u64; 3];
    let mut clock: u64 = 1_617_327_447_310_000_000;
    let mut gid = 0u64;
    let mut records = Vec::new();
    let mut sent: Vec<Vec<Record>> = vec![Vec::new(); partitions as usize];
    let (mut changes, mut repeated, mut malformed) = (0, 0, 0);
    let mut restarts = Vec::new();
    let record = |p: i32, value: Vec<u8>, key: &str, i: usize| Record {
        topic: topic.to_string(),
        partition: Some(p),
        offset: None,
        timestamp: Some(base_ts + i as i64 * 1000),
        key: Some(key.as_bytes().to_vec()),
        value: Some(value),
        ..Default::default()
    };
    for i in 0..messages {
        let with_coupon = i >= messages / 2;
        let n = rng.random_range(1..=3);
        let mut items = Vec::new();
        let mut key = String::new();
        for _ in 0..n {
            let t = rng.random_range(0..3);
            let table = &TABLES[t];
            let rows = state.entry(table.dir.to_string()).or_default();
            let kind = if rows.is_empty() || rng.random_bool(0.5) {
                "I"
            } else if rng.random_bool(0.7) {
                "U"
            } else {
                "D"
            };
            let (old, new) = match kind {
                "I" => {
                    let id = next_id[t];
                    next_id[t] += 1;
                    let r = row(&mut rng, t, id, t == 0 && with_coupon);
                    rows.insert(id.to_string(), r.clone());
                    (None, Some(r))
                }
                _ => {
                    let pk = rows
                        .keys()
                        .nth(rng.random_range(0..rows.len()))
                        .unwrap()
                        .clone();
                    let old = rows[&pk].clone();
                    if kind == "U" {
                        let id: u64 = pk.parse().unwrap();
                        let r = row(&mut rng, t, id, t == 0 && with_coupon);
                        rows.insert(pk, r.clone());
                        (Some(old), Some(r))
                    } else {
                        rows.remove(&pk);
                        (Some(old), None)
                    }
                }
            };
            gid += 1;
            clock += 1;
            let mut c = json!({
                "TIME": chrono::DateTime::from_timestamp_millis(base_ts + i as i64 * 1000).unwrap().format("%Y%m%d%H%M%S").to_string(),
                "GLOBAL_ID": format!("g{gid}"),
                "DATABASE": table.database,
                "TABLE": table.name,
                "TYPE": kind,
                "LOGICAL_CLOCK": clock.to_string(),
            });
            if let Some(s) = table.schema {
                c["SCHEMA"] = json!(s);
            } else {
                c["OFFSET"] = json!({"BINLOG_NAME": "mysql-bin.000003", "BINLOG_POS": (4 + gid * 100).to_string()});
            }
            if let Some(o) = old {
                c["OLD_VALUES"] = json!(o);
            }
            if let Some(n) = new {
                c["NEW_VALUES"] = json!(n);
            }
            key = format!("{}:{}", table.dir, gid);
            items.push(c);
            changes += 1;
        }
        // A source that sends a number unquoted: the message cannot be rebuilt from typed
        // rows as it came, so the archive keeps it whole as well.
        if i % 97 == 13 {
            if let Some(v) = items[0].get_mut("NEW_VALUES").and_then(|v| v.get_mut("id")) {
                let id: u64 = v.as_str().unwrap().parse().unwrap();
                *v = json!(id);
            }
        }
        let p = (i as i32 / 7) % partitions;
        // Canonical form: compact, keys sorted (serde_json's Value); now and then a source
        // that writes spaces (the rows rebuild it as equal JSON, not byte for byte).
        let value = if i % 41 == 5 {
            serde_json::to_string_pretty(&Value::Array(items)).unwrap()
        } else {
            Value::Array(items).to_string()
        };
        let r = record(p, value.into_bytes(), &key, i);
        records.push(r.clone());
        sent[p as usize].push(r);
        // A restart of the transfer task: the last few messages of the partition again.
        if i % 53 == 52 {
            let again: Vec<Record> = sent[p as usize].iter().rev().take(3).cloned().collect();
            restarts.push(records.len());
            for r in again.into_iter().rev() {
                let v: Value = serde_json::from_slice(r.value.as_ref().unwrap()).unwrap();
                repeated += v.as_array().unwrap().len();
                records.push(r);
            }
        }
        if i % 71 == 70 {
            let bad: &[u8] = match malformed % 3 {
                0 => b"{not json",
                1 => b"[]",
                _ => br#"[{"TYPE":"I","NEW_VALUES":{"id":"1"}}]"#,
            };
            records.push(record(p, bad.to_vec(), "bad", i));
            malformed += 1;
        }
    }
    CdcData {
        records,
        state,
        changes,
        repeated,
        malformed,
        restarts,
    }
}

/// Runs a DuckDB script (from the tools virtualenv) and returns its JSON output.
pub fn duckdb_json(script: &str, args: &[&str]) -> Value {
    let python =
        std::env::var("STRATA_TEST_PYTHON").expect("STRATA_TEST_PYTHON (./dev test sets it)");
    let out = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "duckdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What DuckDB makes of a CDC archive under `root` (a local directory): every table's final
/// state (last change per primary key by LOGICAL_CLOCK, deletes removed) and the number of
/// changes, reading each table as one location with `union_by_name`.
pub fn archive_state(root: &std::path::Path, tables: &[&str]) -> (State, usize) {
    let script = r#"
import sys, json, duckdb
root = sys.argv[1]
out = {"state": {}, "changes": 0}
for t in sys.argv[2:]:
    rel = f"read_parquet('{root}/{t}/**/*.parquet', union_by_name=true)"
    cols = [r[0] for r in duckdb.sql(f"DESCRIBE SELECT * FROM {rel}").fetchall()]
    out["changes"] += duckdb.sql(f"SELECT count(DISTINCT global_id) FROM {rel}").fetchone()[0]
    assert duckdb.sql(f"SELECT count(*) - count(DISTINCT global_id) FROM {rel}").fetchone()[0] == 0, "a change twice in " + t
    vals = [c for c in cols if c.startswith("new_")]
    q = f"""SELECT {', '.join(vals)} FROM (
              SELECT *, coalesce(new_id, old_id) AS pk FROM {rel}
              QUALIFY row_number() OVER (PARTITION BY pk ORDER BY logical_clock DESC) = 1)
            WHERE type <> 'D' ORDER BY pk"""
    rows = {}
    for r in duckdb.sql(q).fetchall():
        row = {c[4:]: None if v is None else str(v) for c, v in zip(vals, r) if v is not None}
        rows[row["id"]] = row
    out["state"][t] = rows
print(json.dumps(out))
"#;
    let root = root.to_string_lossy().to_string();
    let mut args = vec![root.as_str()];
    args.extend_from_slice(tables);
    let v = duckdb_json(script, &args);
    let state: State = serde_json::from_value(v["state"].clone()).unwrap();
    (state, v["changes"].as_u64().unwrap() as usize)
}

/// The table directories a data set writes.
pub fn table_dirs() -> BTreeSet<&'static str> {
    TABLES.iter().map(|t| t.dir).collect()
}

/// A CDC archive read back: every table row (with its message's position) and every message
/// kept whole, by side directory (`_repeats`, `_errors`, `_verbatim`).
pub struct CdcArchive {
    pub rows: Vec<strata::cdc::table::Fragment>,
    pub sides: BTreeMap<String, Vec<Record>>,
}

pub async fn read_cdc_archive(store: &dyn strata::store::ObjectStore, prefix: &str) -> CdcArchive {
    let mut out = CdcArchive {
        rows: Vec::new(),
        sides: BTreeMap::new(),
    };
    for meta in store.list(prefix).await.expect("list archive") {
        if meta.key.contains(".strata/") {
            continue;
        }
        let data = store.get(&meta.key).await.expect("get object");
        if strata::cdc::table::is_table_file(&data) {
            out.rows.extend(
                strata::cdc::table::decode(data, u64::MAX)
                    .unwrap_or_else(|e| panic!("decode {}: {e}", meta.key)),
            );
            continue;
        }
        let rel = meta.key.strip_prefix(prefix).unwrap_or(&meta.key);
        let side = rel.split('/').next().unwrap().to_string();
        assert!(
            side.starts_with('_'),
            "not a table file nor a side: {}",
            meta.key
        );
        let spec = strata::format::FormatSpec::from_extension("parquet", Default::default())
            .expect("parquet");
        let records = strata::format::decode(&spec, "", data, u64::MAX)
            .unwrap_or_else(|e| panic!("decode {}: {e}", meta.key));
        out.sides.entry(side).or_default().extend(records);
    }
    out
}

impl CdcArchive {
    /// Checks that every offset of `[low, high)` per partition is archived (as table rows or
    /// kept whole), none twice: each change once in the tables, each message once per side.
    pub fn assert_exactly_once(&self, watermarks: &[(i64, i64)]) {
        let mut seen: BTreeSet<(i32, i64)> = BTreeSet::new();
        let mut rows = BTreeSet::new();
        for f in &self.rows {
            assert!(
                rows.insert((f.partition, f.offset, f.change.index)),
                "change {}/{}#{} twice in the tables",
                f.partition,
                f.offset,
                f.change.index
            );
            seen.insert((f.partition, f.offset));
        }
        for (side, records) in &self.sides {
            let mut once = BTreeSet::new();
            for r in records {
                let at = (r.partition.unwrap(), r.offset.unwrap());
                assert!(once.insert(at), "{side}: message {at:?} twice");
                seen.insert(at);
            }
        }
        for (p, (low, high)) in watermarks.iter().enumerate() {
            for o in *low..*high {
                assert!(
                    seen.contains(&(p as i32, o)),
                    "partition {p} offset {o} is not archived"
                );
            }
        }
        let expected: usize = watermarks.iter().map(|(l, h)| (h - l) as usize).sum();
        assert_eq!(
            seen.len(),
            expected,
            "offsets archived beyond the high watermarks"
        );
    }
}
