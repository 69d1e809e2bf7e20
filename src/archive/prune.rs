//! `strata archive prune --before TIME`: per partition, removes the oldest objects whose
//! records are all older than TIME (by their seals' record times) with their seals, and the
//! state snapshots no longer needed; a dry run unless applied. Never removes an object a dump
//! may not have committed: with the dump task's group reachable, only objects its committed
//! offset has passed; without, never a partition's newest object. A prune mark beside the
//! archive records which offsets were removed, so `ls` and `verify` tell them from losses.

use super::catalog::{prune_mark_key, Catalog, Entry, Litter, Partition, PruneMark, State};
use super::{human, offsets, ts, Archive, ArchiveError};
use crate::config::KafkaConfig;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Deletes sent at once.
const CONCURRENCY: usize = 16;

/// How prune runs.
#[derive(Debug, Clone)]
pub struct PruneOptions {
    pub before: DateTime<Utc>,
    /// Remove; otherwise only say what would go.
    pub apply: bool,
}

/// An object (or the seal of a gone one) prune removes.
#[derive(Debug, Clone, Serialize)]
pub struct PrunedObject {
    pub topic: String,
    pub partition: i32,
    pub key: String,
    pub state: State,
    pub first_offset: i64,
    pub next_offset: Option<i64>,
    pub records: u64,
    pub bytes: u64,
    pub newest_record: Option<String>,
}

/// Why a partition's objects from `first_offset` on stay although old enough by time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Kept {
    pub topic: String,
    pub partition: i32,
    pub first_offset: i64,
    pub why: String,
}

/// `strata archive prune`'s answer.
#[derive(Debug, Clone, Serialize)]
pub struct PruneReport {
    pub location: String,
    /// RFC 3339.
    pub before: String,
    /// Whether anything was removed (`false`: a dry run).
    pub applied: bool,
    /// How committed ranges were told.
    pub committed: String,
    pub objects: Vec<PrunedObject>,
    /// Seals removed: the objects' and leftovers' (uploads that never finished).
    pub seals: u64,
    pub gap_records: Vec<String>,
    pub snapshots: Vec<String>,
    pub kept: Vec<Kept>,
    pub marks: Vec<PruneMark>,
}

/// What the dump group committed, per partition; `Err`: unknown, and why.
pub(crate) type Committed = Result<BTreeMap<(String, i32), i64>, String>;

/// What to remove from one partition (pure).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    /// Indexes into the partition's entries.
    pub entries: Vec<usize>,
    pub kept: Option<(i64, String)>,
}

/// The partition's oldest entries to remove (pure): in offset order while every record of
/// each is older than `before_ms`; the first object that is not stops it, and so does one whose
/// record times are unknown (no seal, or a seal without times) or that may not be committed
/// (`committed`: the group's offset; `None`: unknown, then the newest object stays).
pub(crate) fn decide(
    p: &Partition,
    before_ms: i64,
    committed: Option<i64>,
    group: &str,
) -> Decision {
    let newest = p.entries.iter().rposition(|e| e.state == State::Present);
    let mut d = Decision::default();
    for (i, e) in p.entries.iter().enumerate() {
        let old = e.times().is_some_and(|(_, max)| max < before_ms);
        let stop = |why: String| Some((e.first, why));
        match e.state {
            State::Pruned => {
                d.entries.push(i);
                continue;
            }
            State::Deleted if old => {
                d.entries.push(i);
                continue;
            }
            State::Deleted | State::Pending => break,
            State::Present => {}
        }
        if e.seal.is_none() || e.sealed().is_none() {
            d.kept = stop("it has no readable seal (stored by a strata before the archive kept an index, or by another program): its record times are unknown; it and every later object stay".into());
            break;
        }
        if e.times().is_none() {
            d.kept = stop("its seal has no record times (written by a strata before seals kept them); it and every later object stay".into());
            break;
        }
        if !old {
            break;
        }
        let next = e.next().unwrap_or(i64::MAX);
        match committed {
            Some(c) if c < next => {
                d.kept = stop(format!("group {group} has committed offset {c} only: the dump may not have committed this object yet"));
                break;
            }
            Some(_) => {}
            None if Some(i) == newest => {
                d.kept = stop("the newest object of its partition stays: without the dump group's committed offset (Kafka) it may be stored and not yet committed".into());
                break;
            }
            None => {}
        }
        d.entries.push(i);
    }
    d
}

/// The snapshots to remove (pure): per task, every one older than the newest taken at or
/// before `before` (that one still describes the kept archive's start).
pub(crate) fn snapshots_to_remove(c: &Catalog, before: DateTime<Utc>) -> Vec<String> {
    let mut by_task: BTreeMap<&str, Vec<&super::catalog::SnapshotRef>> = BTreeMap::new();
    for s in &c.snapshots {
        by_task.entry(s.task.as_str()).or_default().push(s);
    }
    let mut out = Vec::new();
    for list in by_task.values() {
        let Some(keep) = list.iter().rposition(|s| s.captured_at <= before) else {
            continue;
        };
        out.extend(list[..keep].iter().map(|s| s.key.clone()));
    }
    out
}

/// The mark after removing `removed` from a partition (pure).
fn mark(
    p: &Partition,
    removed: &[&Entry],
    gaps_from: Option<i64>,
    before: &str,
    now: &str,
) -> Option<PruneMark> {
    let to = removed
        .iter()
        .map(|e| e.next().unwrap_or(e.first + 1))
        .max()?;
    let from = removed
        .iter()
        .map(|e| e.first)
        .chain(gaps_from)
        .chain(p.pruned.as_ref().map(|m| m.from))
        .min()?;
    let old = p.pruned.as_ref();
    Some(PruneMark {
        topic: p.topic.clone(),
        partition: p.partition,
        from,
        to: old.map_or(to, |m| m.to.max(to)),
        before: before.to_string(),
        pruned_at: now.to_string(),
    })
}

/// The dump group's committed offsets of every partition of the archive.
async fn committed_offsets(
    group: &Option<(String, KafkaConfig)>,
    partitions: Vec<(String, i32)>,
) -> Committed {
    let Some((group, kafka)) = group.clone() else {
        return Err("no dump task of the config file writes to this location (pass --config with the dump task's file, and --task)".into());
    };
    tokio::task::spawn_blocking(move || {
        let c = crate::kafka::group_reader(&kafka, &group).map_err(|e| e.to_string())?;
        let mut tpl = rdkafka::TopicPartitionList::new();
        for (t, p) in &partitions {
            tpl.add_partition(t, *p);
        }
        let got = crate::kafka::committed_offsets(&c, &tpl, Duration::from_secs(10))
            .map_err(|e| format!("Kafka at {}: {e}", crate::kafka::servers(&kafka)))?;
        let mut out = BTreeMap::new();
        for e in got.elements() {
            if let rdkafka::Offset::Offset(o) = e.offset() {
                out.insert((e.topic().to_string(), e.partition()), o);
            }
        }
        Ok(out)
    })
    .await
    .unwrap_or_else(|e| Err(format!("internal: {e}")))
}

/// Prunes the archive (or says what a prune would remove).
pub async fn prune(a: &Archive, opts: PruneOptions) -> Result<PruneReport, ArchiveError> {
    let c = a.catalog().await?;
    if c.partitions.is_empty() && c.snapshots.is_empty() {
        return Err(ArchiveError::NoArchive {
            location: c.location,
        });
    }
    let keys: Vec<(String, i32)> = c.partitions.keys().cloned().collect();
    let committed = committed_offsets(&a.settings.group, keys).await;
    let group = a.settings.group.as_ref().map_or("", |g| g.0.as_str());
    let before = opts
        .before
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let now = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let loc = |k: &str| a.store.location(k);
    let mut report = PruneReport {
        location: c.location.clone(),
        before: before.clone(),
        applied: opts.apply,
        committed: match &committed {
            Ok(_) => format!("the committed offsets of the dump task's group {group}"),
            Err(why) => format!("unknown ({why}): each partition's newest object stays"),
        },
        objects: Vec::new(),
        seals: 0,
        gap_records: Vec::new(),
        snapshots: Vec::new(),
        kept: Vec::new(),
        marks: Vec::new(),
    };
    let snapshot_keys = snapshots_to_remove(&c, opts.before);
    report.snapshots = snapshot_keys.iter().map(|k| loc(k)).collect();
    let before_ms = opts.before.timestamp_millis();
    // Per partition: its mark, then what goes (files, seals, gap records).
    let mut plan: Vec<(PruneMark, Vec<String>, Vec<String>)> = Vec::new();
    for p in c.partitions.values() {
        let offset = match &committed {
            Ok(m) => m.get(&(p.topic.clone(), p.partition)).copied(),
            Err(_) => None,
        };
        let d = decide(p, before_ms, offset, group);
        if let Some((first, why)) = d.kept {
            report.kept.push(Kept {
                topic: p.topic.clone(),
                partition: p.partition,
                first_offset: first,
                why,
            });
        }
        let removed: Vec<&Entry> = d.entries.iter().map(|i| &p.entries[*i]).collect();
        let Some(reach) = removed
            .iter()
            .map(|e| e.next().unwrap_or(e.first + 1))
            .max()
        else {
            continue;
        };
        let gaps: Vec<usize> = (0..p.gaps.len())
            .filter(|i| p.gaps[*i].to <= reach)
            .collect();
        let gaps_from = gaps.iter().map(|i| p.gaps[*i].from).min();
        let Some(m) = mark(p, &removed, gaps_from, &before, &now) else {
            continue;
        };
        let mut files = Vec::new();
        let mut seals = Vec::new();
        for e in &removed {
            if e.state == State::Present {
                files.extend(e.files.iter().cloned());
            }
            if let Some(s) = &e.seal {
                seals.push(s.key.clone());
            }
            report.objects.push(PrunedObject {
                topic: p.topic.clone(),
                partition: p.partition,
                key: loc(&e.key),
                state: e.state,
                first_offset: e.first,
                next_offset: e.next(),
                records: e.records().unwrap_or(0),
                bytes: e.size,
                newest_record: e.times().map(|t| ts(Some(t.1))),
            });
        }
        seals.extend(
            c.litter
                .iter()
                .filter(|l: &&Litter| {
                    l.topic == p.topic && l.partition == p.partition && l.next <= m.to
                })
                .map(|l| l.key.clone()),
        );
        report.seals += seals.len() as u64;
        for i in gaps {
            report.gap_records.push(loc(&p.gap_keys[i]));
            seals.push(p.gap_keys[i].clone());
        }
        report.marks.push(m.clone());
        plan.push((m, files, seals));
    }
    if !opts.apply {
        return Ok(report);
    }
    let store = a.store.as_ref();
    for (m, files, records) in &plan {
        // The mark first: an interrupted prune leaves seals below it, which ls and verify
        // then tell from deleted objects, and the next prune removes.
        let body = serde_json::to_vec_pretty(m).unwrap_or_default();
        store
            .put(
                &prune_mark_key(&a.settings.directory, &m.topic, m.partition),
                Bytes::from(body),
            )
            .await
            .map_err(ArchiveError::Store)?;
        delete_all(store, files).await?;
        delete_all(store, records).await?;
    }
    delete_all(store, &snapshot_keys).await?;
    Ok(report)
}

/// Deletes keys, a few at once; the first failure stops it (a prune run again goes on).
async fn delete_all(
    store: &dyn crate::store::ObjectStore,
    keys: &[String],
) -> Result<(), ArchiveError> {
    let mut results =
        futures::stream::iter(keys.iter().map(|k| store.delete(k))).buffer_unordered(CONCURRENCY);
    while let Some(r) = results.next().await {
        r.map_err(|e| {
            ArchiveError::Store(crate::store::StoreError {
                message: format!(
                    "{}; the prune stopped part way: run it again to finish",
                    e.message
                ),
                ..e
            })
        })?;
    }
    Ok(())
}

impl fmt::Display for PruneReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.applied {
            "removed"
        } else {
            "would remove"
        };
        if !self.applied {
            writeln!(
                f,
                "dry run: nothing is removed; pass --apply to remove what is listed"
            )?;
        }
        let bytes: u64 = self.objects.iter().map(|o| o.bytes).sum();
        let records: u64 = self.objects.iter().map(|o| o.records).sum();
        let stored = self
            .objects
            .iter()
            .filter(|o| o.state == State::Present)
            .count();
        writeln!(
            f,
            "prune {} --before {}: {verb} {stored} object(s) ({}, {records} record(s)), {} seal(s), {} gap record(s), {} state snapshot(s)",
            self.location,
            self.before,
            human(bytes as f64),
            self.seals,
            self.gap_records.len(),
            self.snapshots.len()
        )?;
        writeln!(f, "committed ranges: {}", self.committed)?;
        /// Objects, records, bytes and the offsets `from..to` removed from a partition.
        struct Sum(u64, u64, u64, i64, i64);
        let mut per: BTreeMap<(&str, i32), Sum> = BTreeMap::new();
        for o in &self.objects {
            let e = per.entry((o.topic.as_str(), o.partition)).or_insert(Sum(
                0,
                0,
                0,
                i64::MAX,
                i64::MIN,
            ));
            e.0 += u64::from(o.state == State::Present);
            e.1 += o.records;
            e.2 += o.bytes;
            e.3 = e.3.min(o.first_offset);
            e.4 = e.4.max(o.next_offset.unwrap_or(o.first_offset + 1));
        }
        let w = per.keys().map(|(t, _)| t.len()).max().unwrap_or(0).max(5);
        if !per.is_empty() {
            writeln!(
                f,
                "{:<w$} {:>4} {:>8} {:>11} {:>10}  OFFSETS",
                "TOPIC", "PART", "OBJECTS", "RECORDS", "BYTES"
            )?;
        }
        for ((t, p), Sum(n, r, b, from, to)) in &per {
            writeln!(
                f,
                "{t:<w$} {p:>4} {n:>8} {r:>11} {:>10}  {}",
                human(*b as f64),
                offsets(*from, *to)
            )?;
        }
        for k in &self.kept {
            writeln!(
                f,
                "kept: {}-{} from offset {}: {}",
                k.topic, k.partition, k.first_offset, k.why
            )?;
        }
        for s in &self.snapshots {
            writeln!(f, "snapshot: {s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::catalog::FoundSeal;
    use super::*;
    use crate::dump::index::Seal;

    fn entry(first: i64, next: i64, newest_ms: Option<i64>, state: State, sealed: bool) -> Entry {
        Entry {
            first,
            key: format!("t+0+{first:020}.jsonl"),
            files: vec![format!("t+0+{first:020}.jsonl")],
            extension: "jsonl".into(),
            size: 10,
            seal: sealed.then(|| FoundSeal {
                topic: "t".into(),
                partition: 0,
                first,
                tag: "x".into(),
                key: format!("seal{first}"),
                modified: None,
                seal: Some(Seal {
                    key: format!("t+0+{first:020}.jsonl"),
                    last_offset: next - 1,
                    next_offset: next,
                    records: (next - first) as u64,
                    bytes: 10,
                    files: Vec::new(),
                    crc32c: vec![1],
                    times: newest_ms.map(|n| (n - 5, n)),
                }),
            }),
            state,
            missing_files: Vec::new(),
        }
    }

    fn part(entries: Vec<Entry>) -> Partition {
        Partition {
            topic: "t".into(),
            partition: 0,
            entries,
            ..Partition::default()
        }
    }

    #[test]
    fn the_oldest_objects_go_up_to_the_first_with_a_newer_record() {
        let p = part(vec![
            entry(0, 100, Some(10), State::Present, true),
            entry(100, 200, Some(20), State::Present, true),
            entry(200, 300, Some(40), State::Present, true),
            // A late batch: old records behind a newer object stay (one contiguous archive).
            entry(300, 400, Some(15), State::Present, true),
        ]);
        let d = decide(&p, 30, Some(400), "g");
        assert_eq!(
            d,
            Decision {
                entries: vec![0, 1],
                kept: None
            }
        );
        // Everything old and committed: the newest goes too.
        let d = decide(&p, 50, Some(400), "g");
        assert_eq!(d.entries, vec![0, 1, 2, 3]);
    }

    #[test]
    fn an_object_the_group_has_not_committed_stays() {
        let p = part(vec![
            entry(0, 100, Some(10), State::Present, true),
            entry(100, 200, Some(20), State::Present, true),
        ]);
        let d = decide(&p, 50, Some(150), "nightly");
        assert_eq!(d.entries, vec![0]);
        let (first, why) = d.kept.unwrap();
        assert_eq!(first, 100);
        assert!(
            why.contains("group nightly has committed offset 150"),
            "{why}"
        );
        // Without Kafka: the newest object stays, whatever its age.
        let d = decide(&p, 50, None, "");
        assert_eq!(d.entries, vec![0]);
        assert!(d.kept.unwrap().1.contains("newest object"));
    }

    #[test]
    fn objects_without_times_stop_the_prune_and_say_so() {
        let p = part(vec![
            entry(0, 100, Some(10), State::Present, true),
            entry(100, 200, None, State::Present, true),
            entry(200, 300, Some(20), State::Present, true),
        ]);
        let d = decide(&p, 50, Some(300), "g");
        assert_eq!(d.entries, vec![0]);
        assert!(d.kept.unwrap().1.contains("no record times"));
        let p = part(vec![
            entry(0, 100, None, State::Present, false),
            entry(100, 200, Some(20), State::Present, true),
        ]);
        let d = decide(&p, 50, Some(300), "g");
        assert!(d.entries.is_empty());
        assert!(d.kept.unwrap().1.contains("no readable seal"));
    }

    #[test]
    fn seals_of_gone_objects_go_with_their_neighbours() {
        let p = part(vec![
            entry(0, 100, Some(10), State::Pruned, true),
            entry(100, 200, Some(10), State::Deleted, true),
            entry(200, 300, Some(20), State::Present, true),
            entry(300, 400, Some(20), State::Present, true),
            entry(400, 500, Some(99), State::Pending, true),
        ]);
        let d = decide(&p, 50, None, "");
        assert_eq!(d.entries, vec![0, 1, 2], "the newest stored object stays");
        let removed: Vec<&Entry> = d.entries.iter().map(|i| &p.entries[*i]).collect();
        let m = mark(&p, &removed, Some(50), "b", "n").unwrap();
        assert_eq!((m.from, m.to), (0, 300));
        assert_eq!(mark(&p, &[], None, "b", "n"), None);
    }

    #[test]
    fn the_newest_snapshot_at_or_before_the_time_stays() {
        let t = |h: i64| DateTime::from_timestamp(h * 3600, 0).unwrap();
        let snap = |task: &str, h: i64| super::super::catalog::SnapshotRef {
            task: task.into(),
            captured_at: t(h),
            key: format!("{task}-{h}"),
        };
        let c = Catalog {
            snapshots: vec![
                snap("a", 1),
                snap("b", 1),
                snap("a", 2),
                snap("a", 3),
                snap("a", 5),
                snap("b", 6),
            ],
            ..Catalog::default()
        };
        assert_eq!(snapshots_to_remove(&c, t(4)), vec!["a-1", "a-2"]);
        assert_eq!(snapshots_to_remove(&c, t(3)), vec!["a-1", "a-2"]);
        assert_eq!(snapshots_to_remove(&c, t(0)), Vec::<String>::new());
        assert_eq!(
            snapshots_to_remove(&c, t(9)),
            vec!["a-1", "a-2", "a-3", "b-1"]
        );
    }
}
