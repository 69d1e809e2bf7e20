//! Cluster state snapshots: what a recovery needs beside the records, captured by each dump task
//! and stored with its archive as `<directory>/.strata/state/<task>/<time>.json` (immutable,
//! names sortable by capture time): the archived topics' definitions and watermarks, and the
//! committed offsets of the consumer groups that read them. Dump writes them; restore and the
//! archive tools read them. The types and names here are the format; I/O is two small helpers.

use crate::layout::DumpDir;
use crate::store::{ErrorKind, ObjectStore, StoreError};
use bytes::Bytes;
use chrono::{DateTime, NaiveDateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The snapshot format's version; a reader refuses newer ones.
pub const VERSION: u32 = 1;

/// Why a snapshot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Occasion {
    /// The start of a `dump --once` run (or of a continuous dump).
    Start,
    /// The successful end of a `dump --once` run.
    End,
    /// Every `state_interval_secs` of a continuous dump.
    Interval,
}

/// One archived topic as the cluster defined it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicState {
    pub name: String,
    /// The topic's id (a UUID), when the client could read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub partitions: i32,
    /// Replicas of partition 0 (every partition has as many, unless reassigned by hand).
    pub replication_factor: i32,
    /// Configs that differ from the broker's defaults; sensitive values are left out.
    pub configs: BTreeMap<String, String>,
    /// Per partition (by index): the earliest retained offset and the high watermark.
    pub watermarks: Vec<(i64, i64)>,
}

/// One consumer group's committed offsets on the archived topics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupState {
    pub group: String,
    /// Topic, then partition, to the committed offset (the next record the group reads).
    pub offsets: BTreeMap<String, BTreeMap<i32, i64>>,
}

/// A snapshot of what the cluster held when it was taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub version: u32,
    pub task: String,
    pub captured_at: DateTime<Utc>,
    pub occasion: Occasion,
    pub topics: Vec<TopicState>,
    pub groups: Vec<GroupState>,
    /// What could not be read, and the right (ACL) that would allow it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
}

impl Snapshot {
    pub fn topic(&self, name: &str) -> Option<&TopicState> {
        self.topics.iter().find(|t| t.name == name)
    }
}

/// Why a stored snapshot cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{location}: not a state snapshot strata can read ({detail}); move it away if it is not strata's")]
    Unreadable { location: String, detail: String },
}

/// Where a task's snapshots live: `<directory>/.strata/state/<task>/`.
pub fn task_prefix(dir: &DumpDir, task: &str) -> String {
    format!("{}.strata/state/{task}/", dir.prefix())
}

/// Where every task's snapshots of a directory live.
pub fn prefix(dir: &DumpDir) -> String {
    format!("{}.strata/state/", dir.prefix())
}

const NAME: &str = "%Y%m%dT%H%M%S%.3fZ";

/// The key of a snapshot of `task` taken at `at`: `<prefix><yyyyMMddTHHmmss.SSS>Z.json`,
/// sortable by time.
pub fn key(dir: &DumpDir, task: &str, at: DateTime<Utc>) -> String {
    format!("{}{}.json", task_prefix(dir, task), at.format(NAME))
}

/// The task and capture time a snapshot key names.
pub fn parse_key(dir: &DumpDir, key: &str) -> Option<(String, DateTime<Utc>)> {
    let rest = key.strip_prefix(&prefix(dir))?;
    let (task, file) = rest.split_once('/')?;
    let stamp = file.strip_suffix(".json")?;
    if task.is_empty() || stamp.contains('/') {
        return None;
    }
    let t = NaiveDateTime::parse_from_str(stamp, NAME).ok()?;
    Some((task.to_string(), t.and_utc()))
}

/// Stores a snapshot under its key; returns the key.
pub async fn store(
    store: &dyn ObjectStore,
    dir: &DumpDir,
    s: &Snapshot,
) -> Result<String, StoreError> {
    let k = key(dir, &s.task, s.captured_at);
    // Plain structs serialize to JSON without failing.
    let body = serde_json::to_vec_pretty(s).unwrap_or_default();
    store.put(&k, Bytes::from(body)).await?;
    Ok(k)
}

/// Every snapshot of a directory (of one task, when given): task, capture time and key,
/// oldest first.
pub async fn list(
    store: &dyn ObjectStore,
    dir: &DumpDir,
    task: Option<&str>,
) -> Result<Vec<(String, DateTime<Utc>, String)>, StoreError> {
    let p = match task {
        Some(t) => task_prefix(dir, t),
        None => prefix(dir),
    };
    let mut out: Vec<(String, DateTime<Utc>, String)> = store
        .list(&p)
        .await?
        .into_iter()
        .filter_map(|o| parse_key(dir, &o.key).map(|(t, at)| (t, at, o.key)))
        .collect();
    out.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    Ok(out)
}

/// Reads one snapshot.
pub async fn read(store: &dyn ObjectStore, key: &str) -> Result<Snapshot, StateError> {
    let raw = store.get(key).await?;
    let s: Snapshot = serde_json::from_slice(&raw).map_err(|e| StateError::Unreadable {
        location: store.location(key),
        detail: e.to_string(),
    })?;
    if s.version > VERSION {
        return Err(StateError::Unreadable {
            location: store.location(key),
            detail: format!(
                "format version {} is newer than this strata's {VERSION}; use a newer strata",
                s.version
            ),
        });
    }
    Ok(s)
}

/// The newest snapshot of the directory (of one task, when given) taken at or before `at`
/// (`None`: the newest of all); `None` when there is none.
pub async fn at_or_before(
    store: &dyn ObjectStore,
    dir: &DumpDir,
    task: Option<&str>,
    at: Option<DateTime<Utc>>,
) -> Result<Option<Snapshot>, StateError> {
    let listed = list(store, dir, task).await?;
    let Some((_, _, key)) = listed
        .iter()
        .rev()
        .find(|(_, t, _)| at.is_none_or(|at| *t <= at))
    else {
        return Ok(None);
    };
    match read(store, key).await {
        Ok(s) => Ok(Some(s)),
        Err(StateError::Store(e)) if e.kind == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn snapshot(task: &str, at: DateTime<Utc>) -> Snapshot {
        Snapshot {
            version: VERSION,
            task: task.into(),
            captured_at: at,
            occasion: Occasion::End,
            topics: vec![TopicState {
                name: "orders".into(),
                id: None,
                partitions: 2,
                replication_factor: 3,
                configs: BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
                watermarks: vec![(0, 10), (5, 7)],
            }],
            groups: vec![GroupState {
                group: "billing".into(),
                offsets: BTreeMap::from([("orders".into(), BTreeMap::from([(0, 4), (1, 7)]))]),
            }],
            missing: Vec::new(),
        }
    }

    #[test]
    fn keys_sort_by_time_and_parse_back() {
        let dir = DumpDir::parse("backups").unwrap();
        let a = Utc.with_ymd_and_hms(2026, 12, 6, 9, 5, 0).unwrap();
        let b = a + chrono::Duration::milliseconds(1500);
        let (ka, kb) = (key(&dir, "nightly", a), key(&dir, "nightly", b));
        assert_eq!(
            ka,
            "backups/.strata/state/nightly/20261206T090500.000Z.json"
        );
        assert!(ka < kb);
        assert_eq!(parse_key(&dir, &kb), Some(("nightly".into(), b)));
        for bad in [
            "backups/.strata/state/nightly/x.json",
            "backups/.strata/state/20261206T090500.000Z.json",
            "backups/.strata/state/nightly/20261206T090500.000Z",
            "backups/.strata/index/nightly/20261206T090500.000Z.json",
        ] {
            assert_eq!(parse_key(&dir, bad), None, "{bad}");
        }
    }

    #[tokio::test]
    async fn the_snapshot_at_or_before_a_time_is_found() {
        let root = tempfile::tempdir().unwrap();
        let store = crate::store::FsStore::new(root.path().to_path_buf());
        let dir = DumpDir::parse("d").unwrap();
        let t0 = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        for (task, hours) in [("a", 0), ("a", 2), ("b", 1)] {
            let s = snapshot(task, t0 + chrono::Duration::hours(hours));
            super::store(&store, &dir, &s).await.unwrap();
        }
        let pick = |task: Option<&'static str>, hours: Option<i64>| {
            let (store, dir) = (&store, &dir);
            async move {
                at_or_before(
                    store,
                    dir,
                    task,
                    hours.map(|h| t0 + chrono::Duration::hours(h)),
                )
                .await
                .unwrap()
                .map(|s| (s.task, s.captured_at))
            }
        };
        assert_eq!(
            pick(None, None).await,
            Some(("a".into(), t0 + chrono::Duration::hours(2)))
        );
        assert_eq!(
            pick(None, Some(1)).await,
            Some(("b".into(), t0 + chrono::Duration::hours(1)))
        );
        assert_eq!(pick(Some("a"), Some(1)).await, Some(("a".into(), t0)));
        assert_eq!(pick(Some("b"), Some(0)).await, None);
        // What was stored reads back whole.
        let listed = list(&store, &dir, Some("a")).await.unwrap();
        let back = read(&store, &listed[0].2).await.unwrap();
        assert_eq!(back, snapshot("a", t0));
    }

    #[tokio::test]
    async fn a_newer_format_or_a_foreign_file_is_refused_by_name() {
        let root = tempfile::tempdir().unwrap();
        let store = crate::store::FsStore::new(root.path().to_path_buf());
        let dir = DumpDir::parse("d").unwrap();
        let mut s = snapshot("a", Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap());
        s.version = VERSION + 1;
        let k = super::store(&store, &dir, &s).await.unwrap();
        let e = read(&store, &k).await.unwrap_err().to_string();
        assert!(
            e.contains("newer than this strata") && e.contains(&k),
            "{e}"
        );
        store
            .put(&k, Bytes::from_static(b"not json"))
            .await
            .unwrap();
        let e = read(&store, &k).await.unwrap_err().to_string();
        assert!(e.contains("not a state snapshot"), "{e}");
    }
}
