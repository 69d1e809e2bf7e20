//! `strata archive ls`: per topic and partition, the archived offset ranges and what lies
//! between them (retention gaps, deleted objects, pruned offsets, unexplained stretches),
//! objects, records, bytes and record times, and the state snapshots, all from the listing and
//! the seals: no archive object is read.

use super::catalog::{Catalog, Entry, Partition, SnapshotRef, State};
use super::ranges::{self, Kind, Span};
use super::{human, offsets, ts, Archive, ArchiveError};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// Stretch lines a human listing shows per partition (`--json` has every one).
const STRETCH_LINES: usize = 12;

/// One stretch of a partition's offsets.
#[derive(Debug, Clone, Serialize)]
pub struct StretchListing {
    pub from: i64,
    /// End exclusive.
    pub to: i64,
    pub kind: Kind,
    /// Objects (or seals of gone objects) starting in the stretch.
    pub objects: u64,
    /// Records their seals count.
    pub records: u64,
    pub bytes: u64,
    /// Archived: offsets inside objects that hold no record (compaction or transaction
    /// markers).
    #[serde(skip_serializing_if = "is_zero")]
    pub offsets_without_records: u64,
    /// Archived: objects whose end is unknown (no seal) take the stretch to the next object.
    #[serde(skip_serializing_if = "is_zero")]
    pub unsealed_objects: u64,
    /// What the stretch is, in words.
    pub why: String,
    /// Deleted or pending: the objects concerned.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One object (or bundle), or the seal of one that is gone.
#[derive(Debug, Clone, Serialize)]
pub struct ObjectListing {
    pub key: String,
    pub state: State,
    pub first_offset: i64,
    /// The offset after its last record (`null`: no seal says).
    pub next_offset: Option<i64>,
    pub records: Option<u64>,
    pub bytes: u64,
    pub oldest_record: Option<String>,
    pub newest_record: Option<String>,
    pub sealed: bool,
    /// A bundle's other files.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// Files of a bundle its seal names that are not stored.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub missing_files: Vec<String>,
}

/// One archived partition.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionListing {
    pub topic: String,
    pub partition: i32,
    /// Stored objects.
    pub objects: u64,
    /// Records of the sealed stored objects.
    pub records: u64,
    pub bytes: u64,
    /// The lowest and the next-after-highest offset stored objects hold.
    pub first_offset: Option<i64>,
    pub next_offset: Option<i64>,
    pub oldest_record: Option<String>,
    pub newest_record: Option<String>,
    pub unsealed_objects: u64,
    pub offsets_without_records: u64,
    pub stretches: Vec<StretchListing>,
    pub object_list: Vec<ObjectListing>,
}

/// `strata archive ls`'s answer.
#[derive(Debug, Clone, Serialize)]
pub struct Listing {
    pub location: String,
    pub partitions: Vec<PartitionListing>,
    /// Oldest first.
    pub snapshots: Vec<SnapshotRef>,
    pub litter_seals: u64,
    pub unreadable_seals: Vec<String>,
    pub foreign_objects: u64,
    pub unknown_extensions: Vec<String>,
    /// Print every object in the human listing.
    #[serde(skip)]
    pub show_objects: bool,
}

/// Lists the archive.
pub async fn list(a: &Archive, show_objects: bool) -> Result<Listing, ArchiveError> {
    let c = a.catalog().await?;
    if c.partitions.is_empty() && c.snapshots.is_empty() {
        return Err(ArchiveError::NoArchive {
            location: c.location,
        });
    }
    let mut l = listing(&c, |k| a.store.location(k));
    l.show_objects = show_objects;
    Ok(l)
}

/// The listing of a catalog (pure); `loc` turns keys into locations.
pub(crate) fn listing(c: &Catalog, loc: impl Fn(&str) -> String) -> Listing {
    Listing {
        location: c.location.clone(),
        partitions: c.partitions.values().map(|p| partition(p, &loc)).collect(),
        snapshots: c.snapshots.clone(),
        litter_seals: c.litter_seals,
        unreadable_seals: c.unreadable_seals.clone(),
        foreign_objects: c.foreign,
        unknown_extensions: c.unknown_format.clone(),
        show_objects: false,
    }
}

/// Offsets an object spans that hold no record (pure): compaction or transaction markers.
pub(crate) fn without_records(e: &Entry) -> u64 {
    e.sealed()
        .map_or(0, |s| (s.next_offset - e.first).max(0) as u64)
        .saturating_sub(e.records().unwrap_or(0))
}

fn partition(p: &Partition, loc: &impl Fn(&str) -> String) -> PartitionListing {
    let stretches = ranges::sweep(&p.spans(&HashMap::new()));
    let present: Vec<&Entry> = p
        .entries
        .iter()
        .filter(|e| e.state == State::Present)
        .collect();
    let archived: Vec<&Span> = stretches
        .iter()
        .filter(|s| s.kind == Kind::Archived)
        .collect();
    let times = present.iter().filter_map(|e| e.times());
    let oldest = times.clone().map(|t| t.0).min();
    let newest = times.map(|t| t.1).max();
    let gap_of = |s: &Span| {
        p.gaps
            .iter()
            .find(|g| g.from <= s.from && g.to > s.from)
            .or_else(|| p.gaps.iter().find(|g| g.from < s.to && g.to > s.from))
    };
    let mut out: Vec<StretchListing> = stretches
        .iter()
        .map(|s| {
            let why = match s.kind {
                Kind::Archived => "archived".to_string(),
                Kind::Retention => match gap_of(s) {
                    Some(g) => format!(
                        "retention gap: {} (recorded {} by task {})",
                        g.reason, g.found_at, g.task
                    ),
                    None => "retention gap".into(),
                },
                Kind::Deleted => {
                    "deleted: the object's seal remains, the object is gone".into()
                }
                Kind::Pending => "pending: its seal was just written and its upload has not finished (a dump storing it now, or one that crashed: its next run stores it again)".into(),
                Kind::Pruned => match &p.pruned {
                    Some(m) => format!(
                        "pruned: removed by strata archive prune --before {} ({})",
                        m.before, m.pruned_at
                    ),
                    None => "pruned".into(),
                },
                Kind::Unexplained => "unexplained: no object holds these offsets and nothing recorded why (offsets without records between two objects: transaction markers or compacted records; or objects removed together with their seals)".into(),
            };
            StretchListing {
                from: s.from,
                to: s.to,
                kind: s.kind,
                objects: 0,
                records: 0,
                bytes: 0,
                offsets_without_records: 0,
                unsealed_objects: 0,
                why,
                keys: Vec::new(),
            }
        })
        .collect();
    // Each entry counts in the stretch of its kind that holds its first offset.
    for e in &p.entries {
        let kind = match e.state {
            State::Present => Kind::Archived,
            State::Deleted => Kind::Deleted,
            State::Pending => Kind::Pending,
            State::Pruned => Kind::Pruned,
        };
        let at = out.partition_point(|s| s.to <= e.first);
        let Some(s) = out.get_mut(at).filter(|s| s.kind == kind) else {
            continue;
        };
        s.objects += 1;
        s.records += e.records().unwrap_or(0);
        s.bytes += e.size;
        s.offsets_without_records += without_records(e);
        s.unsealed_objects += u64::from(e.seal.is_none());
        if matches!(e.state, State::Deleted | State::Pending) {
            s.keys.push(loc(&e.key));
        }
    }
    PartitionListing {
        topic: p.topic.clone(),
        partition: p.partition,
        objects: present.len() as u64,
        records: present.iter().filter_map(|e| e.records()).sum(),
        bytes: present.iter().map(|e| e.size).sum(),
        first_offset: archived.first().map(|s| s.from),
        next_offset: archived.last().map(|s| s.to),
        oldest_record: oldest.map(|t| ts(Some(t))),
        newest_record: newest.map(|t| ts(Some(t))),
        unsealed_objects: present.iter().filter(|e| e.seal.is_none()).count() as u64,
        offsets_without_records: present.iter().map(|e| without_records(e)).sum(),
        stretches: out,
        object_list: p
            .entries
            .iter()
            .map(|e| ObjectListing {
                key: loc(&e.key),
                state: e.state,
                first_offset: e.first,
                next_offset: e.next(),
                records: e.records(),
                bytes: e.size,
                oldest_record: e.times().map(|t| ts(Some(t.0))),
                newest_record: e.times().map(|t| ts(Some(t.1))),
                sealed: e.seal.is_some(),
                files: e.files.iter().skip(1).map(|f| loc(f)).collect(),
                missing_files: e.missing_files.iter().map(|f| loc(f)).collect(),
            })
            .collect(),
    }
}

impl fmt::Display for Listing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let objects: u64 = self.partitions.iter().map(|p| p.objects).sum();
        let records: u64 = self.partitions.iter().map(|p| p.records).sum();
        let bytes: u64 = self.partitions.iter().map(|p| p.bytes).sum();
        let topics: std::collections::BTreeSet<&str> =
            self.partitions.iter().map(|p| p.topic.as_str()).collect();
        writeln!(
            f,
            "archive {}: {} topic(s), {} partition(s), {objects} object(s), {records} record(s), {}",
            self.location,
            topics.len(),
            self.partitions.len(),
            human(bytes as f64)
        )?;
        let w = self
            .partitions
            .iter()
            .map(|p| p.topic.len())
            .max()
            .unwrap_or(0)
            .max(5);
        if !self.partitions.is_empty() {
            writeln!(
                f,
                "{:<w$} {:>4} {:>8} {:>11} {:>10}  {:<25} {:<24}  NEWEST RECORD",
                "TOPIC", "PART", "OBJECTS", "RECORDS", "BYTES", "OFFSETS", "OLDEST RECORD"
            )?;
        }
        for p in &self.partitions {
            let range = match (p.first_offset, p.next_offset) {
                (Some(a), Some(b)) => offsets(a, b),
                _ => "-".into(),
            };
            writeln!(
                f,
                "{:<w$} {:>4} {:>8} {:>11} {:>10}  {:<25} {:<24}  {}",
                p.topic,
                p.partition,
                p.objects,
                p.records,
                human(p.bytes as f64),
                range,
                p.oldest_record.as_deref().unwrap_or("-"),
                p.newest_record.as_deref().unwrap_or("-")
            )?;
            let simple = p.stretches.len() == 1
                && p.stretches[0].kind == Kind::Archived
                && p.stretches[0].unsealed_objects == 0
                && p.stretches[0].offsets_without_records == 0;
            if !simple {
                for s in p.stretches.iter().take(STRETCH_LINES) {
                    writeln!(f, "    {:<25} {}", offsets(s.from, s.to), stretch_words(s))?;
                }
                if p.stretches.len() > STRETCH_LINES {
                    writeln!(
                        f,
                        "    ... {} more stretch(es); --json lists every one",
                        p.stretches.len() - STRETCH_LINES
                    )?;
                }
            }
            if self.show_objects {
                for o in &p.object_list {
                    writeln!(
                        f,
                        "      {:<9} {:>20} {:>20} {:>10} {:>10}  {}{}",
                        format!("{:?}", o.state).to_lowercase(),
                        o.first_offset,
                        o.next_offset.map_or("?".into(), |n| n.to_string()),
                        o.records.map_or("?".into(), |n| n.to_string()),
                        o.bytes,
                        o.key,
                        if o.sealed { "" } else { "  (no seal)" }
                    )?;
                }
            }
        }
        snapshots(f, &self.snapshots)?;
        let unsealed: u64 = self.partitions.iter().map(|p| p.unsealed_objects).sum();
        if unsealed > 0 {
            writeln!(f, "note: {unsealed} object(s) have no seal (stored by a strata before the archive kept an index, or by another program): their ends and record times are unknown here, and verify can only decode them")?;
        }
        if self.litter_seals > 0 {
            writeln!(f, "note: {} seal(s) of uploads that never made their object visible (crashes, lost races); the dump removes them in time", self.litter_seals)?;
        }
        for u in &self.unreadable_seals {
            writeln!(
                f,
                "note: {u} is not a readable seal; its object counts as unsealed"
            )?;
        }
        if self.foreign_objects > 0 {
            writeln!(
                f,
                "note: {} file(s) under the directory are not archive objects",
                self.foreign_objects
            )?;
        }
        for u in &self.unknown_extensions {
            writeln!(
                f,
                "note: {u}: an archive name with an extension no format reads"
            )?;
        }
        Ok(())
    }
}

fn stretch_words(s: &StretchListing) -> String {
    match s.kind {
        Kind::Archived => {
            let mut w = format!("archived: {} object(s), {} record(s)", s.objects, s.records);
            if s.offsets_without_records > 0 {
                w.push_str(&format!(
                    "; {} offset(s) inside objects hold no record (compaction or transaction markers)",
                    s.offsets_without_records
                ));
            }
            if s.unsealed_objects > 0 {
                w.push_str(&format!(
                    "; {} object(s) without a seal: taken to reach the next object",
                    s.unsealed_objects
                ));
            }
            w
        }
        Kind::Deleted | Kind::Pending if !s.keys.is_empty() => {
            format!("{}: {}", s.why, s.keys.join(", "))
        }
        _ => s.why.clone(),
    }
}

/// The snapshots, one line per task.
fn snapshots(f: &mut fmt::Formatter<'_>, all: &[SnapshotRef]) -> fmt::Result {
    if all.is_empty() {
        return writeln!(f, "state snapshots: none");
    }
    let mut by_task: BTreeMap<&str, Vec<&SnapshotRef>> = BTreeMap::new();
    for s in all {
        by_task.entry(s.task.as_str()).or_default().push(s);
    }
    writeln!(f, "state snapshots: {}", all.len())?;
    for (task, list) in by_task {
        let (first, last) = (list[0], list[list.len() - 1]);
        writeln!(
            f,
            "  task {task}: {} snapshot(s), {} .. {}; newest {}",
            list.len(),
            first
                .captured_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            last.captured_at
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            last.key
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::catalog::{FoundSeal, Partition};
    use super::*;
    use crate::dump::index::Seal;
    use crate::dump::start::GapRecord;

    fn entry(first: i64, next: i64, records: u64, state: State) -> Entry {
        Entry {
            first,
            key: format!("t+0+{first:020}.jsonl"),
            files: vec![format!("t+0+{first:020}.jsonl")],
            extension: "jsonl".into(),
            size: 100,
            seal: Some(FoundSeal {
                topic: "t".into(),
                partition: 0,
                first,
                tag: "x".into(),
                key: "s".into(),
                modified: None,
                seal: Some(Seal {
                    key: format!("t+0+{first:020}.jsonl"),
                    last_offset: next - 1,
                    next_offset: next,
                    records,
                    bytes: 100,
                    files: Vec::new(),
                    crc32c: vec![1],
                    times: Some((first * 1000, next * 1000)),
                }),
            }),
            state,
            missing_files: Vec::new(),
        }
    }

    #[test]
    fn a_partition_lists_its_stretches_with_their_counts() {
        let p = Partition {
            topic: "t".into(),
            partition: 0,
            entries: vec![
                entry(0, 100, 100, State::Present),
                entry(100, 200, 90, State::Present),
                entry(200, 300, 100, State::Deleted),
                entry(400, 500, 100, State::Present),
                entry(501, 600, 99, State::Present),
            ],
            gaps: vec![GapRecord {
                task: "nightly".into(),
                topic: "t".into(),
                partition: 0,
                from: 300,
                to: 400,
                found_at: "2026-12-01T00:00:00Z".into(),
                reason: "deleted by the topic's retention before they were archived".into(),
            }],
            gap_keys: vec!["g".into()],
            pruned: None,
        };
        let l = partition(&p, &|k: &str| format!("file:///a/{k}"));
        let kinds: Vec<(i64, i64, Kind, u64, u64)> = l
            .stretches
            .iter()
            .map(|s| (s.from, s.to, s.kind, s.objects, s.records))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (0, 200, Kind::Archived, 2, 190),
                (200, 300, Kind::Deleted, 1, 100),
                (300, 400, Kind::Retention, 0, 0),
                (400, 500, Kind::Archived, 1, 100),
                (500, 501, Kind::Unexplained, 0, 0),
                (501, 600, Kind::Archived, 1, 99),
            ]
        );
        assert_eq!(l.stretches[0].offsets_without_records, 10);
        assert_eq!(
            l.stretches[1].keys,
            vec!["file:///a/t+0+00000000000000000200.jsonl".to_string()]
        );
        assert!(l.stretches[2]
            .why
            .contains("recorded 2026-12-01T00:00:00Z by task nightly"));
        assert_eq!((l.objects, l.records, l.bytes), (4, 389, 400));
        assert_eq!((l.first_offset, l.next_offset), (Some(0), Some(600)));
        assert_eq!(l.oldest_record.as_deref(), Some("1970-01-01T00:00:00.000Z"));
        assert_eq!(l.newest_record.as_deref(), Some("1970-01-01T00:10:00.000Z"));
        assert_eq!(l.offsets_without_records, 10);
        assert_eq!(l.object_list.len(), 5);
        let text = Listing {
            location: "file:///a".into(),
            partitions: vec![l],
            snapshots: Vec::new(),
            litter_seals: 0,
            unreadable_seals: Vec::new(),
            foreign_objects: 0,
            unknown_extensions: Vec::new(),
            show_objects: false,
        }
        .to_string();
        assert!(text.contains("0..199"), "{text}");
        assert!(text.contains("retention gap"), "{text}");
        assert!(text.contains("500 "), "{text}");
        assert!(text.contains("unexplained"), "{text}");
    }
}
