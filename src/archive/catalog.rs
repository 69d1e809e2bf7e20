//! An archive as one listing of its directory describes it, with no object read: the objects
//! (found by name at any depth, as restore finds them), the seal of each (its entry in the
//! index), seals whose object is gone, retention gaps, prune marks and state snapshots.
//! [`assemble`] is the pure part; [`scan`] does the I/O around it.

use super::ranges::{Kind, Span};
use crate::config::TopicSelector;
use crate::dump::index::{self, Seal};
use crate::dump::start::GapRecord;
use crate::kafka::Tp;
use crate::layout::DumpDir;
use crate::restore::plan::{self, PlannedObject, Selection};
use crate::store::{ErrorKind, ObjectMeta, ObjectStore, StoreError};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// Requests the catalog sends at once (seal reads, tag lookups).
const CONCURRENCY: usize = 32;

/// A seal as found in the index.
#[derive(Debug, Clone)]
pub struct FoundSeal {
    pub topic: String,
    pub partition: i32,
    pub first: i64,
    pub tag: String,
    /// The seal's own key.
    pub key: String,
    pub modified: Option<DateTime<Utc>>,
    /// `None`: the seal could not be read as one.
    pub seal: Option<Seal>,
}

impl FoundSeal {
    /// Every file the seal names, with the tag of its upload.
    fn files(&self) -> Vec<(String, String)> {
        match &self.seal {
            Some(s) if !s.files.is_empty() => s.files.clone(),
            Some(s) => vec![(s.key.clone(), self.tag.clone())],
            None => Vec::new(),
        }
    }
}

/// What became of an entry's object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Stored.
    Present,
    /// Its seal remains, the object is gone.
    Deleted,
    /// Its seal was written moments ago and the upload has not finished (or crashed).
    Pending,
    /// Its seal remains below a prune mark: a prune was interrupted after removing the object.
    Pruned,
}

/// One archive object (or CDC bundle), or the seal of one that is gone.
#[derive(Debug, Clone)]
pub struct Entry {
    pub first: i64,
    /// The object's key (of a bundle: the first file's).
    pub key: String,
    /// Every stored file (one, or a bundle's); for a gone object, the files its seal names.
    pub files: Vec<String>,
    pub extension: String,
    /// Stored bytes, every file together.
    pub size: u64,
    pub seal: Option<FoundSeal>,
    pub state: State,
    /// Files of a bundle its seal names that are not stored.
    pub missing_files: Vec<String>,
}

impl Entry {
    pub fn sealed(&self) -> Option<&Seal> {
        self.seal.as_ref().and_then(|s| s.seal.as_ref())
    }

    /// The offset after the object's last record, when its seal says.
    pub fn next(&self) -> Option<i64> {
        self.sealed().map(|s| s.next_offset)
    }

    pub fn records(&self) -> Option<u64> {
        self.sealed().map(|s| s.records)
    }

    /// Record timestamps `[min, max]` in ms, when its seal says.
    pub fn times(&self) -> Option<(i64, i64)> {
        self.sealed().and_then(|s| s.times)
    }
}

/// A prune's mark beside the archive: offsets `from..to` (end exclusive) of the partition
/// were removed by `strata archive prune`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PruneMark {
    pub topic: String,
    pub partition: i32,
    pub from: i64,
    pub to: i64,
    /// The `--before` time of the prune that last moved the mark (RFC 3339).
    pub before: String,
    /// When that prune ran (RFC 3339).
    pub pruned_at: String,
}

/// Where a partition's prune mark lives: `<dir>.strata/pruned/<topic>/<partition>.json`.
pub fn prune_mark_key(dir: &DumpDir, topic: &str, partition: i32) -> String {
    format!("{}.strata/pruned/{topic}/{partition}.json", dir.prefix())
}

/// One archived partition.
#[derive(Debug, Clone, Default)]
pub struct Partition {
    pub topic: String,
    pub partition: i32,
    /// By first offset.
    pub entries: Vec<Entry>,
    pub gaps: Vec<GapRecord>,
    /// The seal key of each gap record, in the order of `gaps`.
    pub gap_keys: Vec<String>,
    pub pruned: Option<PruneMark>,
}

impl Partition {
    /// The partition's offsets as spans of their kinds (see [`super::ranges::sweep`]). An
    /// object without a seal is taken to reach the next object (its end is unknown until read);
    /// `ends` gives ends learnt otherwise (by key).
    pub fn spans(&self, ends: &HashMap<String, i64>) -> Vec<Span> {
        let mut out = Vec::with_capacity(self.entries.len() + self.gaps.len() + 1);
        for (i, e) in self.entries.iter().enumerate() {
            let following = self.entries[i + 1..]
                .iter()
                .find(|n| n.state == State::Present && n.first > e.first)
                .map(|n| n.first);
            let to = e
                .next()
                .or_else(|| ends.get(&e.key).copied())
                .or(following)
                .unwrap_or(e.first + 1);
            let kind = match e.state {
                State::Present => Kind::Archived,
                State::Deleted => Kind::Deleted,
                State::Pending => Kind::Pending,
                State::Pruned => Kind::Pruned,
            };
            out.push(Span::new(e.first, to, kind));
        }
        for g in &self.gaps {
            out.push(Span::new(g.from, g.to, Kind::Retention));
        }
        if let Some(m) = &self.pruned {
            out.push(Span::new(m.from, m.to, Kind::Pruned));
        }
        out
    }
}

/// A state snapshot, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SnapshotRef {
    pub task: String,
    pub captured_at: DateTime<Utc>,
    pub key: String,
}

/// Everything one listing of an archive says.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    /// `s3://bucket/prefix/dir` or `file:///root/dir`, for messages.
    pub location: String,
    pub partitions: BTreeMap<(String, i32), Partition>,
    /// Oldest first.
    pub snapshots: Vec<SnapshotRef>,
    /// Seals of uploads that never made their object visible (a crash, a lost race): dump
    /// removes them in time; they describe nothing.
    pub litter_seals: u64,
    /// Those seals: partition, the offset after their range, and key (what prune removes
    /// with the objects).
    pub litter: Vec<Litter>,
    /// Seals that are not readable as seals (their objects count as unsealed).
    pub unreadable_seals: Vec<String>,
    /// Objects under the directory that are not archive objects (foreign files).
    pub foreign: u64,
    /// Archive names with an extension no format reads.
    pub unknown_format: Vec<String>,
}

impl Catalog {
    pub fn entries(&self) -> impl Iterator<Item = (&Partition, &Entry)> {
        self.partitions
            .values()
            .flat_map(|p| p.entries.iter().map(move |e| (p, e)))
    }
}

/// A seal that describes no stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Litter {
    pub topic: String,
    pub partition: i32,
    /// The offset after the range it names (its first offset when unreadable).
    pub next: i64,
    pub key: String,
}

/// What [`assemble`] is given: the listing's parts, already read.
#[derive(Debug, Default)]
pub struct Parts {
    pub objects: Vec<PlannedObject>,
    pub seals: Vec<FoundSeal>,
    /// The tag of files whose object several seals claim (from the store).
    pub tags: HashMap<String, String>,
    pub gaps: Vec<(String, GapRecord)>,
    pub marks: Vec<PruneMark>,
}

/// The seals that claim each stored object (pure): object index to seal indexes. Seals that
/// claim no stored object come back apart.
fn claims(
    objects: &[PlannedObject],
    seals: &[FoundSeal],
) -> (BTreeMap<usize, Vec<usize>>, Vec<usize>) {
    let mut by_file: HashMap<&str, usize> = HashMap::new();
    for (i, o) in objects.iter().enumerate() {
        by_file.insert(o.key.as_str(), i);
        for b in &o.bundle {
            by_file.insert(b.as_str(), i);
        }
    }
    let mut claimed: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut absent = Vec::new();
    for (si, s) in seals.iter().enumerate() {
        if s.seal.is_none() {
            continue;
        }
        match s.files().iter().find_map(|(f, _)| by_file.get(f.as_str())) {
            Some(oi) => claimed.entry(*oi).or_default().push(si),
            None => absent.push(si),
        }
    }
    (claimed, absent)
}

/// Files whose tag decides between several seals claiming one object (what [`scan`] asks the
/// store about before [`assemble`]).
pub fn ambiguous_files(objects: &[PlannedObject], seals: &[FoundSeal]) -> Vec<String> {
    let (claimed, _) = claims(objects, seals);
    claimed
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|(oi, _)| objects[*oi].key.clone())
        .collect()
}

/// The archive's partitions from what its listing holds (pure). Of several seals claiming one
/// object, the one of the upload that stored it (by tag) is its seal; the others are litter.
/// A seal whose object is gone is litter when stored objects hold its offsets (a retried
/// upload); below a prune mark it is a prune's leftover; at the partition's head and younger
/// than `pending_age` an upload in progress; otherwise its object was deleted.
pub fn assemble(
    parts: Parts,
    now: DateTime<Utc>,
    pending_age: Duration,
) -> (BTreeMap<(String, i32), Partition>, Vec<Litter>) {
    let Parts {
        objects,
        seals,
        tags,
        gaps,
        marks,
    } = parts;
    let (claimed, absent) = claims(&objects, &seals);
    let mut litter: Vec<Litter> = Vec::new();
    let as_litter = |s: &FoundSeal| Litter {
        topic: s.topic.clone(),
        partition: s.partition,
        next: s.seal.as_ref().map_or(s.first, |x| x.next_offset),
        key: s.key.clone(),
    };
    let mut out: BTreeMap<(String, i32), Partition> = BTreeMap::new();
    let slot = |out: &mut BTreeMap<(String, i32), Partition>, topic: &str, partition: i32| {
        out.entry((topic.to_string(), partition))
            .or_insert_with(|| Partition {
                topic: topic.to_string(),
                partition,
                ..Partition::default()
            })
            .entries
            .len()
    };
    for (oi, o) in objects.iter().enumerate() {
        let candidates = claimed.get(&oi).map(Vec::as_slice).unwrap_or_default();
        let chosen = match candidates {
            [] => None,
            [one] => Some(*one),
            many => {
                let tag = tags.get(&o.key);
                let found = many.iter().copied().find(|si| {
                    seals[*si]
                        .files()
                        .iter()
                        .any(|(f, t)| *f == o.key && Some(t) == tag)
                });
                litter.extend(
                    many.iter()
                        .filter(|si| Some(**si) != found)
                        .map(|si| as_litter(&seals[*si])),
                );
                found
            }
        };
        let files: Vec<String> = std::iter::once(o.key.clone())
            .chain(o.bundle.iter().cloned())
            .collect();
        let seal = chosen.map(|si| seals[si].clone());
        let missing_files = seal
            .as_ref()
            .map(|s| {
                s.files()
                    .into_iter()
                    .map(|(f, _)| f)
                    .filter(|f| !files.contains(f))
                    .collect()
            })
            .unwrap_or_default();
        slot(&mut out, &o.name.topic, o.name.partition);
        if let Some(p) = out.get_mut(&(o.name.topic.clone(), o.name.partition)) {
            p.entries.push(Entry {
                first: o.name.first_offset,
                key: o.key.clone(),
                files,
                extension: o.name.extension.clone(),
                size: o.size,
                seal,
                state: State::Present,
                missing_files,
            });
        }
    }
    for m in marks {
        slot(&mut out, &m.topic, m.partition);
        if let Some(p) = out.get_mut(&(m.topic.clone(), m.partition)) {
            p.pruned = Some(m);
        }
    }
    for (key, g) in gaps {
        slot(&mut out, &g.topic, g.partition);
        if let Some(p) = out.get_mut(&(g.topic.clone(), g.partition)) {
            p.gaps.push(g);
            p.gap_keys.push(key);
        }
    }
    for p in out.values_mut() {
        p.entries
            .sort_by(|a, b| (a.first, &a.key).cmp(&(b.first, &b.key)));
    }
    // Seals whose object is gone, oldest first within a partition.
    let mut absent: Vec<&FoundSeal> = absent.iter().map(|si| &seals[*si]).collect();
    absent.sort_by(|a, b| (&a.topic, a.partition, a.first).cmp(&(&b.topic, b.partition, b.first)));
    let mut gone: Vec<(String, i32, Entry)> = Vec::new();
    for s in absent {
        let Some(seal) = &s.seal else { continue };
        let key = (s.topic.clone(), s.partition);
        let present: Vec<(i64, i64)> = out
            .get(&key)
            .map(|p| {
                p.entries
                    .iter()
                    .filter_map(|e| e.next().map(|n| (e.first, n)))
                    .collect()
            })
            .unwrap_or_default();
        let same_start = present.iter().any(|(f, _)| *f == s.first);
        let dup = gone
            .iter()
            .any(|(t, p, e)| (t, *p) == (&s.topic, s.partition) && e.first == s.first);
        if same_start || dup || covered(&present, s.first, seal.next_offset) {
            litter.push(as_litter(s));
            continue;
        }
        let head = present.iter().map(|(_, n)| *n).max().unwrap_or(i64::MIN);
        let young = s.modified.is_none_or(|m| {
            now - m < chrono::Duration::from_std(pending_age).unwrap_or(chrono::Duration::MAX)
        });
        let pruned_to = out.get(&key).and_then(|p| p.pruned.as_ref()).map(|m| m.to);
        let state = if pruned_to.is_some_and(|to| seal.next_offset <= to) {
            State::Pruned
        } else if s.first >= head && young {
            State::Pending
        } else {
            State::Deleted
        };
        gone.push((
            s.topic.clone(),
            s.partition,
            Entry {
                first: s.first,
                key: seal.key.clone(),
                files: s.files().into_iter().map(|(f, _)| f).collect(),
                extension: String::new(),
                size: 0,
                seal: Some(s.clone()),
                state,
                missing_files: Vec::new(),
            },
        ));
    }
    for (topic, partition, e) in gone {
        slot(&mut out, &topic, partition);
        if let Some(p) = out.get_mut(&(topic, partition)) {
            let at = p
                .entries
                .partition_point(|x| (x.first, &x.key) < (e.first, &e.key));
            p.entries.insert(at, e);
        }
    }
    (out, litter)
}

/// Whether `[from, to)` lies inside the union of `spans` (sorted or not).
fn covered(spans: &[(i64, i64)], from: i64, to: i64) -> bool {
    let mut sorted: Vec<(i64, i64)> = spans.to_vec();
    sorted.sort_unstable();
    let mut at = from;
    for (f, t) in sorted {
        if f > at {
            break;
        }
        at = at.max(t);
        if at >= to {
            return true;
        }
    }
    at >= to
}

/// The topic, partition, first offset and upload tag a key under the directory's index names.
pub fn parse_index_key(dir: &DumpDir, key: &str) -> Option<(String, i32, i64, String)> {
    let base = format!("{}.strata/index/", dir.prefix());
    let rest = key.strip_prefix(&base)?;
    let mut parts = rest.splitn(3, '/');
    let topic = parts.next()?;
    let partition: i32 = parts.next()?.parse().ok()?;
    let prefix = index::partition_prefix(dir, &Tp::new(topic, partition));
    let (first, tag) = index::parse_seal_key(&prefix, key)?;
    Some((topic.to_string(), partition, first, tag))
}

/// How the catalog is asked for.
#[derive(Debug, Clone)]
pub struct ScanOptions<'a> {
    pub directory: &'a DumpDir,
    pub topics: Option<&'a TopicSelector>,
    /// A seal younger than this whose object is missing is an upload in progress.
    pub pending_age: Duration,
}

/// Lists the archive once and reads its seals, gap records and prune marks.
pub async fn scan(store: &dyn ObjectStore, opts: &ScanOptions<'_>) -> Result<Catalog, StoreError> {
    let dir = opts.directory;
    let listing = store.list(&dir.prefix()).await?;
    let own = format!("{}.strata/", dir.prefix());
    let wanted = |topic: &str| opts.topics.is_none_or(|t| t.matches(topic));
    let (mut seal_keys, mut gap_keys, mut mark_keys, mut snapshots) =
        (vec![], vec![], vec![], vec![]);
    let mut archive: Vec<ObjectMeta> = Vec::with_capacity(listing.len());
    for meta in listing {
        let Some(rest) = meta.key.strip_prefix(&own) else {
            archive.push(meta);
            continue;
        };
        if rest.starts_with("index/") {
            if let Some(parsed) = parse_index_key(dir, &meta.key).filter(|p| wanted(&p.0)) {
                seal_keys.push((parsed, meta));
            }
        } else if let Some(g) = rest.strip_prefix("gaps/") {
            if g.split('/').next().is_some_and(wanted) && g.ends_with(".json") {
                gap_keys.push(meta.key);
            }
        } else if let Some(m) = rest.strip_prefix("pruned/") {
            if m.split('/').next().is_some_and(wanted) && m.ends_with(".json") {
                mark_keys.push(meta.key);
            }
        } else if let Some((task, at)) = crate::state::parse_key(dir, &meta.key) {
            snapshots.push(SnapshotRef {
                task,
                captured_at: at,
                key: meta.key,
            });
        }
    }
    snapshots.sort_by(|a, b| (a.captured_at, &a.task).cmp(&(b.captured_at, &b.task)));
    let sel = Selection {
        directory: dir,
        time_directory: None,
        time_zone: chrono_tz::Tz::UTC,
        topics: opts.topics,
        from: None,
        to: None,
    };
    let planned = plan::plan(&archive, &sel, |_| false);
    let objects: Vec<PlannedObject> = planned
        .partitions
        .into_iter()
        .flat_map(|p| p.objects)
        .collect();

    let mut unreadable = Vec::new();
    let seals: Vec<FoundSeal> = futures::stream::iter(seal_keys.into_iter().map(
        |((topic, partition, first, tag), meta)| async move {
            let seal = match store.get(&meta.key).await {
                Ok(raw) => serde_json::from_slice::<Seal>(&raw).ok(),
                // Removed since the listing (a dump cleaning up litter).
                Err(e) if e.kind == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
            Ok(Some(FoundSeal {
                topic,
                partition,
                first,
                tag,
                key: meta.key,
                modified: meta.last_modified,
                seal,
            }))
        },
    ))
    .buffer_unordered(CONCURRENCY)
    .collect::<Vec<Result<Option<FoundSeal>, StoreError>>>()
    .await
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?
    .into_iter()
    .flatten()
    .inspect(|s| {
        if s.seal.is_none() {
            unreadable.push(store.location(&s.key));
        }
    })
    .collect();

    let mut tags = HashMap::new();
    for file in ambiguous_files(&objects, &seals) {
        match store.tag_of(&file).await {
            Ok(Some(t)) => {
                tags.insert(file, t);
            }
            Ok(None) => {}
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let gaps = read_json::<GapRecord>(store, gap_keys).await?;
    let marks = read_json::<PruneMark>(store, mark_keys)
        .await?
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let parts = Parts {
        objects,
        seals,
        tags,
        gaps,
        marks,
    };
    let (partitions, litter) = assemble(parts, Utc::now(), opts.pending_age);
    Ok(Catalog {
        location: location(store, dir),
        partitions,
        snapshots,
        litter_seals: litter.len() as u64,
        litter,
        unreadable_seals: unreadable,
        foreign: planned.skips.not_archive,
        unknown_format: planned.skips.unknown_format,
    })
}

/// `s3://bucket/prefix/dir` or `file:///root/dir`.
pub fn location(store: &dyn ObjectStore, dir: &DumpDir) -> String {
    let root = store.location("");
    let root = root.trim_end_matches('/');
    match dir.as_str() {
        "" => root.to_string(),
        d => format!("{root}/{d}"),
    }
}

/// Reads small JSON records; ones that are gone or do not parse are passed over.
async fn read_json<T: serde::de::DeserializeOwned>(
    store: &dyn ObjectStore,
    keys: Vec<String>,
) -> Result<Vec<(String, T)>, StoreError> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        match store.get(&key).await {
            Ok(raw) => {
                if let Ok(v) = serde_json::from_slice::<T>(&raw) {
                    out.push((key, v));
                } else {
                    tracing::warn!(record = %store.location(&key), "not readable; passed over");
                }
            }
            Err(e) if e.kind == ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::ObjectName;

    fn obj(topic: &str, p: i32, first: i64, bundle: &[&str]) -> PlannedObject {
        PlannedObject {
            key: format!("d/x/{topic}+{p}+{first:020}.jsonl"),
            name: ObjectName {
                topic: topic.into(),
                partition: p,
                first_offset: first,
                extension: "jsonl".into(),
            },
            size: 10,
            bundle: bundle.iter().map(|b| b.to_string()).collect(),
            span: None,
        }
    }

    fn seal_of(o: &PlannedObject, next: i64, tag: &str, age_s: i64) -> FoundSeal {
        FoundSeal {
            topic: o.name.topic.clone(),
            partition: o.name.partition,
            first: o.name.first_offset,
            tag: tag.into(),
            key: format!("seal-{}-{tag}", o.name.first_offset),
            modified: Some(now() - chrono::Duration::seconds(age_s)),
            seal: Some(Seal {
                key: o.key.clone(),
                last_offset: next - 1,
                next_offset: next,
                records: (next - o.name.first_offset) as u64,
                bytes: 10,
                files: Vec::new(),
                crc32c: vec![1],
                times: Some((1, 2)),
            }),
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    const HOUR: Duration = Duration::from_secs(3600);

    fn states(p: &Partition) -> Vec<(i64, State, bool)> {
        p.entries
            .iter()
            .map(|e| (e.first, e.state, e.seal.is_some()))
            .collect()
    }

    #[test]
    fn objects_get_their_seals_and_gone_objects_are_named() {
        let (a, b, c, d) = (
            obj("t", 0, 0, &[]),
            obj("t", 0, 100, &[]),
            obj("t", 0, 200, &[]),
            obj("t", 0, 300, &[]),
        );
        let parts = Parts {
            // b was deleted (its seal stays), d is an old object with no seal.
            objects: vec![a.clone(), c.clone(), d.clone()],
            seals: vec![
                seal_of(&a, 100, "ta", 7200),
                seal_of(&b, 200, "tb", 7200),
                seal_of(&c, 300, "tc", 7200),
            ],
            ..Parts::default()
        };
        let (parts, litter) = assemble(parts, now(), HOUR);
        assert!(litter.is_empty());
        let p = &parts[&("t".to_string(), 0)];
        assert_eq!(
            states(p),
            vec![
                (0, State::Present, true),
                (100, State::Deleted, true),
                (200, State::Present, true),
                (300, State::Present, false)
            ]
        );
        let spans = p.spans(&HashMap::new());
        assert_eq!(spans[1], Span::new(100, 200, Kind::Deleted));
        // The unsealed last object's end is unknown: one offset stands for it.
        assert_eq!(spans[3], Span::new(300, 301, Kind::Archived));
        let ends = HashMap::from([(d.key.clone(), 350)]);
        assert_eq!(p.spans(&ends)[3], Span::new(300, 350, Kind::Archived));
    }

    #[test]
    fn a_retried_upload_leaves_litter_not_a_deleted_object() {
        let a = obj("t", 0, 0, &[]);
        let b = obj("t", 0, 100, &[]);
        // A crashed attempt at 0..150 (its object never stored), the retry cut at 100.
        let mut crashed = seal_of(&a, 150, "old", 7200);
        crashed.key = "seal-0-old".into();
        crashed.seal.as_mut().unwrap().key = "d/y/t+0+00000000000000000000.jsonl".into();
        let parts = Parts {
            objects: vec![a.clone(), b.clone()],
            seals: vec![
                crashed,
                seal_of(&a, 100, "ta", 7200),
                seal_of(&b, 200, "tb", 7200),
            ],
            ..Parts::default()
        };
        let (parts, litter) = assemble(parts, now(), HOUR);
        assert_eq!(litter.len(), 1);
        assert_eq!(
            (litter[0].key.as_str(), litter[0].next),
            ("seal-0-old", 150)
        );
        assert_eq!(parts[&("t".to_string(), 0)].entries.len(), 2);
    }

    #[test]
    fn of_several_seals_the_stored_uploads_is_the_objects() {
        let a = obj("t", 0, 0, &[]);
        let mut other = seal_of(&a, 90, "loser", 7200);
        other.key = "seal-0-loser".into();
        let parts = Parts {
            objects: vec![a.clone()],
            seals: vec![other, seal_of(&a, 100, "winner", 7200)],
            tags: HashMap::from([(a.key.clone(), "winner".to_string())]),
            ..Parts::default()
        };
        assert_eq!(
            ambiguous_files(&parts.objects, &parts.seals),
            vec![a.key.clone()]
        );
        let (parts, litter) = assemble(parts, now(), HOUR);
        assert_eq!(litter.len(), 1);
        assert_eq!(litter[0].key, "seal-0-loser");
        let e = &parts[&("t".to_string(), 0)].entries[0];
        assert_eq!(e.seal.as_ref().unwrap().tag, "winner");
        assert_eq!(e.next(), Some(100));
    }

    #[test]
    fn a_young_seal_at_the_head_is_pending_and_below_a_prune_mark_pruned() {
        let (a, b, c) = (
            obj("t", 0, 0, &[]),
            obj("t", 0, 100, &[]),
            obj("t", 0, 200, &[]),
        );
        let parts = Parts {
            objects: vec![b.clone()],
            seals: vec![
                seal_of(&a, 100, "ta", 7200),
                seal_of(&b, 200, "tb", 7200),
                seal_of(&c, 300, "tc", 5),
            ],
            marks: vec![PruneMark {
                topic: "t".into(),
                partition: 0,
                from: 0,
                to: 100,
                before: "x".into(),
                pruned_at: "y".into(),
            }],
            ..Parts::default()
        };
        let (parts, _) = assemble(parts, now(), HOUR);
        let p = &parts[&("t".to_string(), 0)];
        assert_eq!(
            states(p),
            vec![
                (0, State::Pruned, true),
                (100, State::Present, true),
                (200, State::Pending, true)
            ]
        );
        // The same seal an hour later: the upload never finished, or the object was deleted.
        let parts = Parts {
            objects: vec![b.clone()],
            seals: vec![seal_of(&b, 200, "tb", 7200), seal_of(&c, 300, "tc", 7200)],
            ..Parts::default()
        };
        let (parts, _) = assemble(parts, now(), HOUR);
        assert_eq!(
            parts[&("t".to_string(), 0)].entries[1].state,
            State::Deleted
        );
    }

    #[test]
    fn a_bundle_is_one_entry_and_its_missing_files_are_named() {
        let files = ["d/shop.users/t+0+00000000000000000000.parquet"];
        let mut a = obj("t", 0, 0, &files);
        a.key = "d/_repeats/t+0+00000000000000000000.parquet".into();
        let mut s = seal_of(&a, 100, "t1", 7200);
        s.seal.as_mut().unwrap().files = vec![
            (a.key.clone(), "t1".into()),
            (files[0].into(), "t2".into()),
            (
                "d/shop.orders/t+0+00000000000000000000.parquet".into(),
                "t3".into(),
            ),
        ];
        let parts = Parts {
            objects: vec![a],
            seals: vec![s],
            ..Parts::default()
        };
        let (parts, _) = assemble(parts, now(), HOUR);
        let e = &parts[&("t".to_string(), 0)].entries[0];
        assert_eq!(e.files.len(), 2);
        assert_eq!(
            e.missing_files,
            vec!["d/shop.orders/t+0+00000000000000000000.parquet".to_string()]
        );
    }

    #[test]
    fn index_keys_parse_back() {
        let dir = DumpDir::parse("backups").unwrap();
        let k = index::seal_key(&dir, &Tp::new("orders.v1", 3), 42, "ino-1");
        assert_eq!(
            parse_index_key(&dir, &k),
            Some(("orders.v1".into(), 3, 42, "ino-1".into()))
        );
        assert_eq!(parse_index_key(&dir, "backups/.strata/index/t/x/1/2"), None);
        assert_eq!(parse_index_key(&dir, "other/.strata/index/t/0/1/2"), None);
        assert!(covered(&[(0, 10), (10, 20)], 5, 20));
        assert!(!covered(&[(0, 10), (11, 20)], 5, 20));
        assert!(!covered(&[], 5, 6));
    }
}
