//! `strata archive verify`: reads every archive object (or a deterministic sample) end to end,
//! checks its size and CRC-32C against its seal and that every record decodes (objects without
//! a seal: decode only), and checks the archive's coverage against the state snapshots. Writes
//! nothing. Objects are read concurrently, bounded by count and by `limits.buffer_memory`.

use super::catalog::{Catalog, Entry, Partition, State};
use super::ranges::{self, Place};
use super::{human, offsets, Archive, ArchiveError};
use crate::dump::index::Seal;
use crate::format::{FormatKind, FormatSpec, TextOptions};
use crate::state::Snapshot;
use crate::store::{ErrorKind, ObjectStore};
use bytes::Bytes;
use futures::StreamExt;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How verify runs.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// Read only this share of the objects (0-100), chosen by key: the same objects every
    /// time. `None`: every object.
    pub sample_percent: Option<f64>,
    /// Check coverage against every snapshot, not only each task's newest.
    pub all_snapshots: bool,
    /// Objects read at once.
    pub concurrency: usize,
    /// Draw a progress bar on stderr (a terminal); otherwise one summary line at the end.
    pub progress_bar: bool,
}

impl Default for VerifyOptions {
    fn default() -> Self {
        Self {
            sample_percent: None,
            all_snapshots: false,
            concurrency: 8,
            progress_bar: false,
        }
    }
}

/// What is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// A seal remains, its object (or a file of its bundle) is gone.
    Deleted,
    /// Shorter than its seal says.
    Truncated,
    /// Bytes that differ from the ones stored (checksum, size or records).
    Damaged,
    /// Does not decode, although its bytes are the stored ones (or it has no seal to say).
    Undecodable,
    /// The store would not give the object.
    Unreadable,
    /// Offsets the cluster had (a state snapshot says) that the archive lacks.
    Missing,
}

impl ProblemKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Deleted => "deleted",
            Self::Truncated => "truncated",
            Self::Damaged => "damaged",
            Self::Undecodable => "undecodable",
            Self::Unreadable => "unreadable",
            Self::Missing => "missing",
        }
    }
}

/// One problem, named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub kind: ProblemKind,
    pub topic: String,
    pub partition: i32,
    /// The object's location, when one object is concerned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// Offsets concerned (end exclusive), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<i64>,
    pub detail: String,
}

/// Something worth knowing that is not a problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Note {
    pub topic: String,
    pub partition: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<i64>,
    pub detail: String,
}

/// `strata archive verify`'s answer.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyReport {
    pub location: String,
    /// Objects (or bundles) read.
    pub objects: u64,
    /// Of those, checked against their seal's checksum.
    pub checksummed: u64,
    /// Of those, only decoded: no seal, or a seal without a checksum.
    pub decode_only: Vec<String>,
    /// Objects left out by `--sample`.
    pub not_sampled: u64,
    pub bytes: u64,
    pub records: u64,
    pub seconds: f64,
    /// Archive bytes read per second.
    pub bytes_per_second: f64,
    /// The snapshots coverage was checked against (keys).
    pub snapshots: Vec<String>,
    pub problems: Vec<Problem>,
    pub notes: Vec<Note>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Whether `key` is in a `percent` sample (pure, the same answer every run).
pub(crate) fn sampled(key: &str, percent: Option<f64>) -> bool {
    match percent {
        None => true,
        Some(p) => (crc32c::crc32c(key.as_bytes()) % 10_000) < (p * 100.0).round() as u32,
    }
}

/// What reading one object found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Checked {
    bytes: u64,
    records: u64,
    /// Against a checksum (else decode only).
    checksummed: bool,
    /// The offset after the highest record offset decoded (records without offsets: after the
    /// first offset plus their count).
    end: Option<i64>,
    problem: Option<(ProblemKind, String)>,
}

/// Compares an object's bytes with its seal (pure): size first (shorter: truncated; longer:
/// damaged), then each file's CRC-32C. `None`: the bytes are the stored ones.
fn check_bytes(seal: &Seal, key: &str, files: &[(String, Bytes)]) -> Option<(ProblemKind, String)> {
    let size: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
    if seal.bytes > 0 && size < seal.bytes {
        return Some((
            ProblemKind::Truncated,
            format!("{size} bytes, its seal says {}", seal.bytes),
        ));
    }
    if seal.bytes > 0 && size > seal.bytes {
        return Some((
            ProblemKind::Damaged,
            format!("{size} bytes, its seal says {}", seal.bytes),
        ));
    }
    let order: Vec<&str> = if seal.files.is_empty() {
        vec![key]
    } else {
        seal.files.iter().map(|(f, _)| f.as_str()).collect()
    };
    for (file, data) in files {
        let Some(i) = order.iter().position(|f| f == file) else {
            continue;
        };
        let Some(want) = seal.crc32c.get(i) else {
            continue;
        };
        let got = crc32c::crc32c(data);
        if got != *want {
            let which = if files.len() > 1 {
                format!("{file}: ")
            } else {
                String::new()
            };
            return Some((
                ProblemKind::Damaged,
                format!(
                    "{which}CRC-32C {got:#010x} of its bytes differs from its seal's {want:#010x}"
                ),
            ));
        }
    }
    None
}

/// Reads and checks one object (I/O around [`check_bytes`] and the decoder).
async fn check_object(
    store: Arc<dyn ObjectStore>,
    e: Entry,
    topic: String,
    text: TextOptions,
    limit: u64,
) -> Result<Checked, (ProblemKind, String)> {
    let mut files = Vec::with_capacity(e.files.len());
    for f in &e.files {
        match store.get(f).await {
            Ok(b) => files.push((f.clone(), b)),
            Err(err) if err.kind == ErrorKind::NotFound => {
                return Err((
                    ProblemKind::Deleted,
                    "gone (deleted since it was listed)".into(),
                ))
            }
            Err(err) => return Err((ProblemKind::Unreadable, err.to_string())),
        }
    }
    let seal = e.sealed().cloned();
    tokio::task::spawn_blocking(move || {
        decode_and_check(&e, seal.as_ref(), &topic, &text, files, limit)
    })
    .await
    .map_err(|err| (ProblemKind::Unreadable, format!("decoder: {err}")))
}

/// Checks the bytes against the seal and decodes every record (pure but for CPU).
fn decode_and_check(
    e: &Entry,
    seal: Option<&Seal>,
    topic: &str,
    text: &TextOptions,
    files: Vec<(String, Bytes)>,
    limit: u64,
) -> Checked {
    let bytes: u64 = files.iter().map(|(_, b)| b.len() as u64).sum();
    let checksummed = seal.is_some_and(|s| !s.crc32c.is_empty());
    let mut problem = seal.and_then(|s| check_bytes(s, &e.key, &files));
    let Some(spec) = FormatSpec::from_extension(&e.extension, text.clone()) else {
        return Checked {
            bytes,
            records: 0,
            checksummed,
            end: None,
            problem: Some((
                ProblemKind::Undecodable,
                "no format reads its extension".into(),
            )),
        };
    };
    let bundle = files.len() > 1;
    let decoded = crate::cdc::decode_files(&spec, topic, files, limit);
    let records = match decoded {
        Ok(r) => r,
        Err((file, err)) => {
            let at = err.at.map_or(String::new(), |a| format!(" at byte {a}"));
            let why = format!("does not decode{at}: {}", err.message);
            let why = if bundle { format!("{file} {why}") } else { why };
            problem = Some(match problem {
                Some((kind, detail)) => (kind, format!("{detail}, and it {why}")),
                None => (ProblemKind::Undecodable, why),
            });
            return Checked {
                bytes,
                records: 0,
                checksummed,
                end: None,
                problem,
            };
        }
    };
    let n = records.len() as u64;
    // Records without offsets (text) are taken to follow each other from the first offset.
    let end = records
        .iter()
        .filter_map(|r| r.offset)
        .max()
        .map(|o| o + 1)
        .or_else(|| (n > 0).then(|| e.first + n as i64));
    if problem.is_none() {
        if let Some(s) = seal {
            let lossless = matches!(spec.kind, FormatKind::Jsonl | FormatKind::Parquet);
            let outside = records
                .iter()
                .filter_map(|r| r.offset)
                .find(|o| *o < e.first || *o >= s.next_offset);
            if let Some(o) = outside {
                problem = Some((
                    ProblemKind::Damaged,
                    format!(
                        "holds offset {o}, outside the offsets {} its seal names",
                        offsets(e.first, s.next_offset)
                    ),
                ));
            } else if lossless && !bundle && n != s.records {
                problem = Some((
                    ProblemKind::Damaged,
                    format!("decodes to {n} record(s), its seal says {}", s.records),
                ));
            }
        }
    } else if let Some((kind, detail)) = problem.take() {
        problem = Some((kind, format!("{detail} (its {n} record(s) still decode)")));
    }
    Checked {
        bytes,
        records: n,
        checksummed,
        end,
        problem,
    }
}

/// Verifies the archive.
pub async fn verify(a: &Archive, opts: VerifyOptions) -> Result<VerifyReport, ArchiveError> {
    let started = Instant::now();
    let c = a.catalog().await?;
    if c.partitions.is_empty() && c.snapshots.is_empty() {
        return Err(ArchiveError::NoArchive {
            location: c.location,
        });
    }
    let loc = |k: &str| a.store.location(k);
    let mut report = VerifyReport {
        location: c.location.clone(),
        ..VerifyReport::default()
    };
    structural(&c, &loc, &mut report);

    // Every stored object of the sample, read concurrently.
    let jobs: Vec<(String, i32, Entry)> = c
        .entries()
        .filter(|(_, e)| e.state == State::Present)
        .filter_map(|(p, e)| {
            let keep = sampled(&e.key, opts.sample_percent);
            report.not_sampled += u64::from(!keep);
            keep.then(|| (p.topic.clone(), p.partition, e.clone()))
        })
        .collect();
    let total_bytes: u64 = jobs.iter().map(|(_, _, e)| e.size).sum();
    let progress = Progress::new(jobs.len() as u64, total_bytes, opts.progress_bar);
    // Memory: an object's bytes and its decoded records, about three times its size, in KiB.
    let budget_kib = (a.settings.memory_budget / 1024).clamp(1024, u32::MAX as u64) as u32;
    let memory = Arc::new(Semaphore::new(budget_kib as usize));
    let limit = a.settings.memory_budget.max(1);
    let text = a.settings.text.clone();
    let store = a.store.clone();
    let mut results = futures::stream::iter(jobs.into_iter().map(|(topic, partition, e)| {
        let (store, memory, text, progress) = (
            store.clone(),
            memory.clone(),
            text.clone(),
            progress.clone(),
        );
        async move {
            let want = (e.size.saturating_mul(3) / 1024).clamp(1, budget_kib as u64) as u32;
            let _held = memory.acquire_many(want).await;
            let key = e.key.clone();
            let size = e.size;
            let limit = limit.max(e.size.saturating_mul(16));
            let r = check_object(store, e, topic.clone(), text, limit).await;
            progress.add(size);
            (topic, partition, key, r)
        }
    }))
    .buffer_unordered(opts.concurrency.max(1));
    let mut ends: HashMap<String, i64> = HashMap::new();
    while let Some((topic, partition, key, r)) = results.next().await {
        let (kind, detail) = match r {
            Ok(checked) => {
                report.objects += 1;
                report.bytes += checked.bytes;
                report.records += checked.records;
                if checked.checksummed {
                    report.checksummed += 1;
                } else {
                    report.decode_only.push(loc(&key));
                }
                if let Some(end) = checked.end {
                    ends.insert(key.clone(), end);
                }
                match checked.problem {
                    Some(p) => p,
                    None => continue,
                }
            }
            Err(p) => p,
        };
        report.problems.push(Problem {
            kind,
            topic,
            partition,
            object: Some(loc(&key)),
            from: None,
            to: None,
            detail,
        });
    }
    progress.finish();
    coverage(a, &c, &ends, opts.all_snapshots, &mut report).await?;
    report.problems.sort_by(|x, y| {
        (&x.topic, x.partition, x.from, &x.object, x.kind).cmp(&(
            &y.topic,
            y.partition,
            y.from,
            &y.object,
            y.kind,
        ))
    });
    report.decode_only.sort();
    report.seconds = started.elapsed().as_secs_f64();
    report.bytes_per_second = if report.seconds > 0.0 {
        report.bytes as f64 / report.seconds
    } else {
        0.0
    };
    if !opts.progress_bar {
        eprintln!("{}", report.summary_line());
    }
    Ok(report)
}

/// Problems and notes the listing alone shows: deleted objects and bundle files, uploads in
/// progress, unreadable seals.
fn structural(c: &Catalog, loc: &impl Fn(&str) -> String, report: &mut VerifyReport) {
    for (p, e) in c.entries() {
        let range = e.next().map(|n| (e.first, n));
        match e.state {
            State::Deleted => report.problems.push(Problem {
                kind: ProblemKind::Deleted,
                topic: p.topic.clone(),
                partition: p.partition,
                object: Some(loc(&e.key)),
                from: range.map(|r| r.0),
                to: range.map(|r| r.1),
                detail: format!(
                    "gone; its seal says it held offsets {} ({} record(s))",
                    range.map_or("?".into(), |(f, t)| offsets(f, t)),
                    e.records().unwrap_or(0)
                ),
            }),
            State::Pending => report.notes.push(Note {
                topic: p.topic.clone(),
                partition: p.partition,
                from: range.map(|r| r.0),
                to: range.map(|r| r.1),
                detail: format!(
                    "{}: an upload in progress (its seal is younger than limits.leftover_age_secs); not checked",
                    loc(&e.key)
                ),
            }),
            State::Present | State::Pruned => {}
        }
        for f in &e.missing_files {
            report.problems.push(Problem {
                kind: ProblemKind::Deleted,
                topic: p.topic.clone(),
                partition: p.partition,
                object: Some(loc(f)),
                from: range.map(|r| r.0),
                to: range.map(|r| r.1),
                detail: format!(
                    "gone; a file of the bundle {} (its seal names it)",
                    loc(&e.key)
                ),
            });
        }
    }
    for u in &c.unreadable_seals {
        report.notes.push(Note {
            topic: String::new(),
            partition: -1,
            from: None,
            to: None,
            detail: format!("{u} is not a readable seal; its object is only decoded"),
        });
    }
}

/// Checks every snapshot's `[low, high)` per partition against what the archive holds.
async fn coverage(
    a: &Archive,
    c: &Catalog,
    ends: &HashMap<String, i64>,
    all: bool,
    report: &mut VerifyReport,
) -> Result<(), ArchiveError> {
    let chosen: Vec<&super::catalog::SnapshotRef> = if all {
        c.snapshots.iter().collect()
    } else {
        let mut newest: BTreeMap<&str, &super::catalog::SnapshotRef> = BTreeMap::new();
        for s in &c.snapshots {
            newest.insert(s.task.as_str(), s);
        }
        newest.into_values().collect()
    };
    if chosen.is_empty() {
        report.notes.push(Note {
            topic: String::new(),
            partition: -1,
            from: None,
            to: None,
            detail: "no state snapshots under the directory's .strata/state/: coverage against the cluster's offsets was not checked".into(),
        });
        return Ok(());
    }
    let empty = Partition::default();
    for s in chosen {
        let snap = crate::state::read(a.store.as_ref(), &s.key).await?;
        report.snapshots.push(a.store.location(&s.key));
        for (topic, partition, low, high) in watermarks(&snap) {
            if a.settings
                .topics
                .as_ref()
                .is_some_and(|t| !t.matches(topic))
            {
                continue;
            }
            let p = c
                .partitions
                .get(&(topic.to_string(), partition))
                .unwrap_or(&empty);
            let stretches = ranges::sweep(&p.spans(ends));
            for u in ranges::uncovered(&stretches, low, high) {
                let seen = format!(
                    "the cluster held offsets {} when snapshot {} was taken ({})",
                    offsets(low, high),
                    snap.task,
                    snap.captured_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                );
                let (problem, detail) = match u.place {
                    // Named already, object by object.
                    Place::Deleted => continue,
                    Place::Pending => (false, format!("offsets {} are being uploaded", offsets(u.from, u.to))),
                    Place::Inside => (false, format!("offsets {} between two objects are not archived and nothing recorded why: offsets without records (transaction markers, compaction), or objects removed together with their seals; {seen}", offsets(u.from, u.to))),
                    Place::Head => (true, format!("offsets {} are not archived (before the archive's first object of the partition: a dump that started later, start_offset = \"latest\", or objects removed together with their seals); {seen}", offsets(u.from, u.to))),
                    Place::Tail => (true, format!("offsets {} are not archived (after the archive's last object of the partition: a dump still running or one that failed, or objects removed together with their seals); {seen}", offsets(u.from, u.to))),
                };
                if problem {
                    report.problems.push(Problem {
                        kind: ProblemKind::Missing,
                        topic: topic.to_string(),
                        partition,
                        object: None,
                        from: Some(u.from),
                        to: Some(u.to),
                        detail,
                    });
                } else {
                    report.notes.push(Note {
                        topic: topic.to_string(),
                        partition,
                        from: Some(u.from),
                        to: Some(u.to),
                        detail,
                    });
                }
            }
        }
    }
    // Several snapshots may name the same missing offsets.
    report.problems.dedup();
    report.notes.dedup();
    Ok(())
}

/// Every partition of a snapshot with its watermarks.
fn watermarks(s: &Snapshot) -> impl Iterator<Item = (&str, i32, i64, i64)> {
    s.topics.iter().flat_map(|t| {
        t.watermarks
            .iter()
            .enumerate()
            .map(move |(i, (low, high))| (t.name.as_str(), i as i32, *low, *high))
    })
}

impl VerifyReport {
    /// One line: what was read, how fast, what was found.
    pub fn summary_line(&self) -> String {
        format!(
            "verify {}: {} object(s), {}, {} record(s) in {:.2} s ({}/s); {} problem(s)",
            self.location,
            self.objects,
            human(self.bytes as f64),
            self.records,
            self.seconds,
            human(self.bytes_per_second),
            self.problems.len()
        )
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary_line())?;
        writeln!(
            f,
            "read: {} against their seal's checksum and decoded, {} decoded only (no seal, or a seal without a checksum){}",
            self.checksummed,
            self.decode_only.len(),
            if self.not_sampled > 0 {
                format!("; {} left out by --sample", self.not_sampled)
            } else {
                String::new()
            }
        )?;
        for d in self.decode_only.iter().take(10) {
            writeln!(f, "  decode-only: {d}")?;
        }
        if self.decode_only.len() > 10 {
            writeln!(
                f,
                "  ... {} more decode-only (--json lists every one)",
                self.decode_only.len() - 10
            )?;
        }
        if !self.snapshots.is_empty() {
            writeln!(f, "coverage checked against: {}", self.snapshots.join(", "))?;
        }
        if self.problems.is_empty() {
            writeln!(f, "no problems found")?;
        } else {
            writeln!(f, "problems: {}", self.problems.len())?;
        }
        for p in &self.problems {
            let range = match (p.from, p.to) {
                (Some(a), Some(b)) => format!(" offsets {}", offsets(a, b)),
                _ => String::new(),
            };
            let object = p
                .object
                .as_deref()
                .map_or(String::new(), |o| format!(" {o}:"));
            writeln!(
                f,
                "  {:<11} {}-{}{range}:{object} {}",
                p.kind.as_str(),
                p.topic,
                p.partition,
                p.detail
            )?;
        }
        for n in &self.notes {
            if n.partition < 0 {
                writeln!(f, "note: {}", n.detail)?;
            } else {
                writeln!(f, "note: {}-{}: {}", n.topic, n.partition, n.detail)?;
            }
        }
        Ok(())
    }
}

/// Objects and bytes done: a bar on a terminal, nothing otherwise (the summary line says it).
#[derive(Debug, Clone)]
struct Progress {
    bar: Option<ProgressBar>,
    objects: u64,
    done: Arc<AtomicU64>,
}

impl Progress {
    fn new(objects: u64, bytes: u64, bar: bool) -> Self {
        let bar = bar.then(|| {
            let b = ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template(
                    "verify [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {msg} ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b.set_message(format!("0/{objects} objects"));
            b
        });
        Self {
            bar,
            objects,
            done: Arc::new(AtomicU64::new(0)),
        }
    }

    fn add(&self, bytes: u64) {
        let n = self.done.fetch_add(1, Relaxed) + 1;
        if let Some(b) = &self.bar {
            b.inc(bytes);
            b.set_message(format!("{n}/{} objects", self.objects));
        }
    }

    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seal(bytes: u64, crcs: Vec<u32>, files: Vec<(String, String)>) -> Seal {
        Seal {
            key: "k".into(),
            last_offset: 9,
            next_offset: 10,
            records: 10,
            bytes,
            files,
            crc32c: crcs,
            times: None,
        }
    }

    #[test]
    fn bytes_are_checked_for_size_then_checksum() {
        let data = Bytes::from_static(b"hello world");
        let crc = crc32c::crc32c(&data);
        let files = vec![("k".to_string(), data.clone())];
        assert_eq!(check_bytes(&seal(11, vec![crc], vec![]), "k", &files), None);
        let (kind, detail) = check_bytes(&seal(20, vec![crc], vec![]), "k", &files).unwrap();
        assert_eq!(kind, ProblemKind::Truncated);
        assert!(detail.contains("11 bytes, its seal says 20"), "{detail}");
        assert_eq!(
            check_bytes(&seal(5, vec![crc], vec![]), "k", &files)
                .unwrap()
                .0,
            ProblemKind::Damaged
        );
        let mut flipped = data.to_vec();
        flipped[3] ^= 0x20;
        let files = vec![("k".to_string(), Bytes::from(flipped))];
        let (kind, detail) = check_bytes(&seal(11, vec![crc], vec![]), "k", &files).unwrap();
        assert_eq!(kind, ProblemKind::Damaged);
        assert!(detail.contains("CRC-32C"), "{detail}");
        // Seals before sizes and checksums were kept: nothing to compare.
        assert_eq!(check_bytes(&seal(0, vec![], vec![]), "k", &files), None);
    }

    #[test]
    fn a_bundles_files_are_checked_each_against_its_own_checksum() {
        let (a, b) = (Bytes::from_static(b"aaaa"), Bytes::from_static(b"bbbbbb"));
        let s = seal(
            10,
            vec![crc32c::crc32c(&a), crc32c::crc32c(&b)],
            vec![("fa".into(), "t1".into()), ("fb".into(), "t2".into())],
        );
        let files = vec![("fb".to_string(), b.clone()), ("fa".to_string(), a.clone())];
        assert_eq!(check_bytes(&s, "fa", &files), None);
        let files = vec![
            ("fa".to_string(), a),
            ("fb".to_string(), Bytes::from_static(b"bbbbbc")),
        ];
        let (kind, detail) = check_bytes(&s, "fa", &files).unwrap();
        assert_eq!(kind, ProblemKind::Damaged);
        assert!(detail.starts_with("fb: "), "{detail}");
    }

    #[test]
    fn a_sample_is_the_same_every_time_and_about_its_share() {
        let keys: Vec<String> = (0..10_000)
            .map(|i| format!("d/t+0+{i:020}.jsonl"))
            .collect();
        let picked = |p| keys.iter().filter(|k| sampled(k, p)).count();
        assert_eq!(picked(None), 10_000);
        assert_eq!(picked(Some(100.0)), 10_000);
        assert_eq!(picked(Some(0.0)), 0);
        let ten = picked(Some(10.0));
        assert!((800..1200).contains(&ten), "{ten}");
        assert_eq!(ten, picked(Some(10.0)));
        // A larger sample holds the smaller one.
        assert!(keys
            .iter()
            .filter(|k| sampled(k, Some(10.0)))
            .all(|k| sampled(k, Some(20.0))));
    }

    #[test]
    fn records_are_decoded_and_counted_against_the_seal() {
        use crate::format::{Record, TimestampType};
        let rec = |o: i64| Record {
            topic: "t".into(),
            partition: Some(0),
            offset: Some(o),
            timestamp: Some(1),
            timestamp_type: TimestampType::CreateTime,
            key: None,
            value: Some(b"v".to_vec()),
            headers: Vec::new(),
        };
        let spec = FormatSpec::from_extension("jsonl", TextOptions::default()).unwrap();
        let mut enc = crate::format::Encoder::in_memory(&spec, "t").unwrap();
        for r in [rec(0), rec(1), rec(3)] {
            r.with_view(|v| enc.append(v)).unwrap();
        }
        let data = Bytes::from(enc.finish().unwrap().out);
        let e = Entry {
            first: 0,
            key: "k".into(),
            files: vec!["k".into()],
            extension: "jsonl".into(),
            size: data.len() as u64,
            seal: None,
            state: State::Present,
            missing_files: Vec::new(),
        };
        let mut s = seal(data.len() as u64, vec![crc32c::crc32c(&data)], vec![]);
        s.records = 3;
        s.next_offset = 4;
        let run = |s: &Seal, data: Bytes| {
            decode_and_check(
                &e,
                Some(s),
                "t",
                &TextOptions::default(),
                vec![("k".into(), data)],
                u64::MAX,
            )
        };
        let ok = run(&s, data.clone());
        assert_eq!((ok.records, ok.end, ok.problem.clone()), (3, Some(4), None));
        assert!(ok.checksummed);
        // A seal that says otherwise: the object is not the one stored.
        let mut other = s.clone();
        other.records = 4;
        assert_eq!(
            run(&other, data.clone()).problem.unwrap().0,
            ProblemKind::Damaged
        );
        other = s.clone();
        other.next_offset = 3;
        assert!(run(&other, data.clone())
            .problem
            .unwrap()
            .1
            .contains("holds offset 3"));
        // Garbage after a matching size: damaged, and it says whether it still decodes.
        let garbage = Bytes::from(vec![b'{'; data.len()]);
        let (kind, detail) = run(&s, garbage).problem.unwrap();
        assert_eq!(kind, ProblemKind::Damaged);
        assert!(detail.contains("does not decode"), "{detail}");
        // No seal: decode only.
        let plain = decode_and_check(
            &e,
            None,
            "t",
            &TextOptions::default(),
            vec![("k".into(), data)],
            u64::MAX,
        );
        assert!(!plain.checksummed && plain.problem.is_none());
    }
}
