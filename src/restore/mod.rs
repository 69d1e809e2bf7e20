//! Restore mode: replays dump archives back into Kafka.
//!
//! Contract: records of a source partition are produced in their original offset order with
//! their key, value, headers and timestamp; an archive object is checkpointed only after Kafka
//! acknowledged all its records, together with where each landed (the exact offset map), so a
//! resumed restore re-sends at most the one object per source partition that was in flight
//! (none with `exactly_once`, which uses transactions).
//!
//! Flow: listing → [`plan`] (pure) → decode (`format`) → [`produce`] → [`checkpoint`].

pub mod checkpoint;
mod dry_run;
pub mod eos;
pub mod offset_map;
pub mod plan;
pub mod produce;
pub mod progress;
pub mod rate;
mod replay;

pub use dry_run::ListedObject;
pub use replay::record_bytes;

use crate::config::{Partitioning, RestoreConfig};
use crate::kafka::{Admin, KafkaError};
use crate::store::{ErrorKind, StoreError};
use checkpoint::{Checkpoint, CheckpointError, Settings};
use plan::{Plan, PlanSkips, Selection, TimeFilter};
use produce::RestoreProducer;
use replay::{Counts, Engine, Producers, Target};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Worker threads, each replaying one source partition at a time. Fixed, so the transactional
/// ids of an exactly-once restore are the same when it is resumed.
pub const WORKERS: usize = 4;

/// An archive object that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptObject {
    /// `s3://bucket/key` or `file:///path`.
    pub location: String,
    /// Byte offset of the problem (decompressed stream for text/jsonl, file for parquet).
    pub at: Option<u64>,
    pub detail: String,
}

impl fmt::Display for CorruptObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.at {
            Some(at) => write!(f, "{} at byte {at}: {}", self.location, self.detail),
            None => write!(f, "{}: {}", self.location, self.detail),
        }
    }
}

/// Everything that stops a restore, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("cannot list the archive: {0}")]
    List(#[source] StoreError),
    #[error("cannot read archive object {source}")]
    Read {
        #[source]
        source: StoreError,
    },
    #[error("no archive under {location}: no objects named <topic>+<partition>+<offset>.<ext> at any depth{hint}; check --source and --directory (restore.directory), or name the dump task with --task")]
    NoArchive { location: String, hint: String },
    #[error("nothing to restore under {location}: {reason}")]
    NothingSelected { location: String, reason: String },
    #[error("archive object {0} is corrupt; fix or remove it, or pass --skip-corrupt (restore.skip_corrupt = true) to skip it and count it in the summary")]
    Corrupt(CorruptObject),
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error("target topic {topic:?} does not exist on {servers} and restore.create_topics = false; create it (the archive has {partitions} partition(s)) or set create_topics = true")]
    TopicMissing {
        topic: String,
        servers: String,
        partitions: i32,
    },
    #[error("target topic {topic:?} was created but did not appear in the metadata of {servers} within {secs}s")]
    TopicNotReady {
        topic: String,
        servers: String,
        secs: u64,
    },
    #[error("Kafka at {servers} refused records of {object} for topic {topic:?}: {detail} ({failed} of {sent} record(s) failed); the object was not checkpointed and is sent again by the next run")]
    Produce {
        object: String,
        topic: String,
        servers: String,
        failed: u64,
        sent: u64,
        detail: String,
    },
    #[error("exactly-once restore on {servers}: {detail}")]
    Transaction { servers: String, detail: String },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("interrupted: {done} of {total} object(s) restored and checkpointed in {checkpoint}; run the same command again to resume (objects in flight are sent again)")]
    Interrupted {
        done: u64,
        total: u64,
        checkpoint: String,
    },
    #[error("restore failed internally: {0}")]
    Internal(String),
}

/// Options that are not configuration: what this run does.
#[derive(Debug, Clone, Default)]
pub struct RestoreOptions {
    /// List what would be read, with record counts and time spans; write nothing.
    pub dry_run: bool,
    /// Set (by a signal handler) to stop after the records in flight are acknowledged.
    pub stop: Arc<AtomicBool>,
    /// Draw a progress bar (stderr is a terminal) instead of logging progress lines.
    pub progress_bar: bool,
}

/// What a restore did (or, with `dry_run`, would do).
#[derive(Debug, Clone, Default)]
pub struct RestoreSummary {
    pub dry_run: bool,
    /// Objects restored (dry run: objects that would be read).
    pub objects: u64,
    /// Records produced (dry run: records that would be produced).
    pub records: u64,
    /// Bytes of keys, values and headers produced.
    pub bytes: u64,
    pub duration: Duration,
    /// Records read but left out because their timestamp is outside `[from, to)`.
    pub records_out_of_range: u64,
    /// Records left out because an earlier object already carried their offset
    /// (overlapping objects, e.g. from an at-least-once dump).
    pub records_duplicate: u64,
    /// Objects left out by the plan, by reason.
    pub skipped_objects: PlanSkips,
    /// Objects skipped with `skip_corrupt`.
    pub corrupt: Vec<CorruptObject>,
    /// Text objects among those read: values (and keys) only.
    pub text_objects: u64,
    /// Source topic -> target topic.
    pub targets: BTreeMap<String, String>,
    pub checkpoint: Option<PathBuf>,
    /// Dry run: the objects, in replay order.
    pub listing: Vec<ListedObject>,
}

impl RestoreSummary {
    /// A dry run found objects the real run would stop at.
    pub fn would_fail(&self, skip_corrupt: bool) -> bool {
        self.dry_run && !skip_corrupt && !self.corrupt.is_empty()
    }
}

/// "3 outside the time range, 1 corrupt", or "none".
fn reasons(counts: &[(u64, &str)]) -> String {
    let parts: Vec<String> = counts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, why)| format!("{n} {why}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / 1048576.0
}

impl fmt::Display for RestoreSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.dry_run {
            dry_run::render(f, self)?;
        } else {
            let secs = self.duration.as_secs_f64();
            writeln!(
                f,
                "restored {} object(s), {} record(s), {:.2} MiB in {:.2}s ({:.2} MiB/s)",
                self.objects,
                self.records,
                mib(self.bytes),
                secs,
                if secs > 0.0 {
                    mib(self.bytes) / secs
                } else {
                    0.0
                }
            )?;
        }
        for (src, dst) in &self.targets {
            writeln!(f, "  {src} -> {dst}")?;
        }
        let s = &self.skipped_objects;
        let records = reasons(&[
            (self.records_out_of_range, "outside the time range"),
            (
                self.records_duplicate,
                "already sent (offsets repeated by overlapping objects)",
            ),
        ]);
        writeln!(f, "skipped records: {records}")?;
        let objects = reasons(&[
            (s.finished, "already restored (checkpoint)"),
            (s.before_range, "before the time range"),
            (s.after_range, "after the time range"),
            (s.other_topics, "of other topics"),
            (self.corrupt.len() as u64, "corrupt"),
            (s.unknown_format.len() as u64, "with unknown extensions"),
            (s.not_archive, "foreign (not archive names)"),
        ]);
        writeln!(f, "skipped objects: {objects}")?;
        for c in &self.corrupt {
            writeln!(f, "  corrupt: {c}")?;
        }
        if self.text_objects > 0 {
            writeln!(f, "note: {} text object(s): only values (and keys when stored) were restored; partitions come from object names; no headers or timestamps", self.text_objects)?;
        }
        if let Some(cp) = &self.checkpoint {
            writeln!(f, "checkpoint: {}", cp.display())?;
        }
        Ok(())
    }
}

/// Runs a restore (or a dry run) to the end.
pub async fn run(
    cfg: &RestoreConfig,
    opts: RestoreOptions,
) -> Result<RestoreSummary, RestoreError> {
    let started = Instant::now();
    let settings = Settings::of(cfg);
    let fingerprint = settings.fingerprint();
    let cp_path = cfg
        .checkpoint
        .clone()
        .unwrap_or_else(|| Checkpoint::default_path(&settings));
    let mut checkpoint = Checkpoint::open(&cp_path, &settings)?;

    let store = crate::store::open(&cfg.store)
        .await
        .map_err(RestoreError::List)?;
    let root = store.location("");
    let location = format!("{}{}", root.trim_end_matches('/'), {
        let d = cfg.directory.as_str();
        if d.is_empty() {
            String::new()
        } else {
            format!("/{d}")
        }
    });
    let listing = store
        .list(&cfg.directory.prefix())
        .await
        .map_err(|e| match e.kind {
            ErrorKind::NotFound | ErrorKind::NoSuchBucket => RestoreError::NoArchive {
                location: location.clone(),
                hint: format!(" ({})", e.message),
            },
            _ => RestoreError::List(e),
        })?;

    // Exactly once: the target's committed markers are the truth about finished objects.
    let mut eos_producers = None;
    if cfg.exactly_once && !opts.dry_run {
        let largest = listing.iter().map(|o| o.size).max().unwrap_or(0);
        let timeout = produce::transaction_timeout(largest, cfg.rate_limit_bytes_per_sec);
        let (producers, markers) = eos_setup(cfg, &fingerprint, timeout).await?;
        for (object, m) in markers {
            let map = m
                .map
                .map(|(partition, ranges)| (cfg.naming.target(&m.topic), partition, ranges));
            checkpoint.mark(
                &object,
                checkpoint::Done {
                    topic: m.topic,
                    partition: m.partition,
                    records: m.records,
                    last_offset: m.last_offset,
                    map,
                },
            );
        }
        eos_producers = Some(producers);
    }

    let selection = Selection {
        directory: &cfg.directory,
        time_directory: cfg.time_directory.as_ref(),
        time_zone: cfg.time_zone,
        topics: cfg.topics.as_ref(),
        from: cfg.from,
        to: cfg.to,
    };
    let plan = plan::plan(&listing, &selection, |k| checkpoint.is_finished(k));
    check_plan(cfg, &plan, &location)?;
    let text_objects = plan
        .objects()
        .filter(|o| o.name.extension.starts_with("txt"))
        .count() as u64;
    if text_objects > 0 {
        tracing::warn!(
            objects = text_objects,
            "text archives hold values (and keys when dump stored them) only: restored records get no headers and new timestamps, partitions come from object names; restore.record_delimiter/store_key/key_separator must match the dump task"
        );
        if TimeFilter::new(cfg.from, cfg.to).is_set() {
            tracing::warn!("text records have no timestamps: the time range selects text objects by their time directory only");
        }
    }
    for u in &plan.skips.unknown_format {
        tracing::warn!(object = %u, "archive name with an unknown extension; not read");
    }
    if let (true, Some(layout)) = (plan.unplaced > 0, &cfg.time_directory) {
        tracing::info!(objects = plan.unplaced, time_directory = %layout, "archive objects outside time directories of this layout are read whole (their time span is unknown)");
    }
    let mut summary = RestoreSummary {
        dry_run: opts.dry_run,
        skipped_objects: plan.skips.clone(),
        text_objects,
        targets: plan
            .partitions
            .iter()
            .map(|p| (p.topic.clone(), cfg.naming.target(&p.topic)))
            .collect(),
        checkpoint: Some(cp_path.clone()),
        ..RestoreSummary::default()
    };
    if opts.dry_run {
        dry_run::run(cfg, store, &plan, &mut summary).await?;
        summary.checkpoint = cp_path.exists().then_some(cp_path);
        summary.duration = started.elapsed();
        return Ok(summary);
    }
    if plan.partitions.is_empty() {
        tracing::info!(checkpoint = %cp_path.display(), objects = plan.skips.finished, "every selected object was restored already; delete the checkpoint to restore again");
        summary.duration = started.elapsed();
        return Ok(summary);
    }

    let targets = prepare_targets(cfg, &plan).await?;
    let producers = match eos_producers {
        Some(p) => Producers::PerWorker(p),
        None => Producers::Shared(RestoreProducer::new(&cfg.kafka, WORKERS, None)?),
    };
    let total_objects = plan.object_count();
    let progress = progress::Progress::new(total_objects, plan.bytes(), opts.progress_bar);
    let reporter = progress.spawn_reporter().ok();
    tracing::info!(
        objects = total_objects,
        bytes = plan.bytes(),
        partitions = plan.partitions.len(),
        checkpoint = %cp_path.display(),
        "restoring"
    );
    let engine = Arc::new(Engine {
        cfg: cfg.clone(),
        store,
        rt: tokio::runtime::Handle::current(),
        targets,
        producers,
        checkpoint: Mutex::new(checkpoint),
        progress: progress.clone(),
        rate: cfg.rate_limit_bytes_per_sec.map(rate::RateLimiter::new),
        filter: TimeFilter::new(cfg.from, cfg.to),
        stop: opts.stop.clone(),
        fingerprint,
        abort: AtomicBool::new(false),
        first_error: Mutex::new(None),
        counts: Mutex::new(Counts::default()),
        queue: Mutex::new(plan.partitions.iter().cloned().collect::<VecDeque<_>>()),
        budget: replay::Budget::new(cfg.memory_budget.0),
    });
    let workers = WORKERS.min(plan.partitions.len()).max(1);
    let runner = engine.clone();
    let result = tokio::task::spawn_blocking(move || {
        let r = runner.run(workers);
        if let Producers::Shared(p) = &runner.producers {
            p.flush(Duration::from_secs(30));
        }
        r
    })
    .await
    .unwrap_or_else(|e| Err(RestoreError::Internal(format!("restore workers: {e}"))));
    progress.finish();
    if let Some(h) = reporter {
        let _ = h.join();
    }
    result?;
    let counts = engine.counts.lock().map(|c| c.clone()).unwrap_or_default();
    if opts.stop.load(std::sync::atomic::Ordering::Relaxed)
        && counts.objects + (counts.corrupt.len() as u64) < total_objects
    {
        return Err(RestoreError::Interrupted {
            done: counts.objects,
            total: total_objects,
            checkpoint: cp_path.display().to_string(),
        });
    }
    summary.objects = counts.objects;
    summary.records = counts.records;
    summary.bytes = counts.bytes;
    summary.records_out_of_range = counts.out_of_range;
    summary.records_duplicate = counts.duplicates;
    summary.corrupt = counts.corrupt;
    summary.duration = started.elapsed();
    Ok(summary)
}

/// Clear errors for an empty archive or a selection that matches nothing.
fn check_plan(cfg: &RestoreConfig, plan: &Plan, location: &str) -> Result<(), RestoreError> {
    if plan.archive_objects == 0 {
        let hint = if plan.skips.unknown_format.is_empty() {
            String::new()
        } else {
            " (found archive names with unknown extensions only)".to_string()
        };
        return Err(RestoreError::NoArchive {
            location: location.to_string(),
            hint,
        });
    }
    if !plan.partitions.is_empty() || plan.skips.finished > 0 {
        if let Some(crate::config::TopicSelector::List(list)) = &cfg.topics {
            for t in list.iter().filter(|t| !plan.archived_topics.contains(t)) {
                tracing::warn!(topic = %t, "topic not found in the archive");
            }
        }
        return Ok(());
    }
    let topics = cfg
        .topics
        .as_ref()
        .map_or("any topic".to_string(), |t| format!("topics {t}"));
    let reason = if plan.skips.other_topics == plan.archive_objects {
        format!(
            "no archived objects of {topics}; the archive holds {}",
            plan.archived_topics.join(", ")
        )
    } else {
        format!(
            "no archived objects of {topics} fall in the time range [{}, {}); check --from/--to (they are matched against record timestamps, in UTC unless an offset is given)",
            cfg.from.map_or("-".into(), |t| t.to_rfc3339()),
            cfg.to.map_or("-".into(), |t| t.to_rfc3339())
        )
    };
    Err(RestoreError::NothingSelected {
        location: location.to_string(),
        reason,
    })
}

/// Resolves every target topic: its partition count, creating it when missing and allowed.
async fn prepare_targets(
    cfg: &RestoreConfig,
    plan: &Plan,
) -> Result<BTreeMap<String, Target>, RestoreError> {
    // Sources per target (several archived topics may be mapped onto one).
    let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &plan.partitions {
        let sources = wanted.entry(cfg.naming.target(&p.topic)).or_default();
        if !sources.contains(&p.topic) {
            sources.push(p.topic.clone());
        }
    }
    let kafka = cfg.kafka.clone();
    let admin = Arc::new(
        tokio::task::spawn_blocking(move || Admin::connect(&kafka))
            .await
            .map_err(|e| RestoreError::Internal(e.to_string()))??,
    );
    let servers = crate::kafka::servers(&cfg.kafka);
    let mut out = BTreeMap::new();
    for (target, sources) in wanted {
        if sources.len() > 1 {
            tracing::warn!(target = %target, sources = ?sources, "several archived topics restore into one topic; order is kept per source partition only");
        }
        let source_max = sources
            .iter()
            .filter_map(|s| plan.max_partition.get(s).copied())
            .max()
            .unwrap_or(0);
        let count = partition_count(&admin, &target).await?;
        let partitions = match count {
            Some(n) => n,
            None if !cfg.create_topics => {
                return Err(RestoreError::TopicMissing {
                    topic: target,
                    servers,
                    partitions: source_max + 1,
                })
            }
            None => {
                let n = plan::partitions_to_create(cfg.partitions, [source_max]);
                let replication = cfg.topic_replication();
                tracing::info!(topic = %target, partitions = n, replication_factor = replication, "creating target topic (-1: the broker's default)");
                admin.create_topic(&target, n, replication, &[]).await?;
                wait_for_topic(&admin, &target, n, &servers).await?;
                n
            }
        };
        if cfg.partitioning == Partitioning::Original && partitions <= source_max {
            tracing::warn!(topic = %target, target_partitions = partitions, archived_partitions = source_max + 1, "target has fewer partitions than the archive: records of the missing partitions go by key hash");
        }
        for s in sources {
            out.insert(
                s,
                Target {
                    topic: target.clone(),
                    partitions,
                },
            );
        }
    }
    Ok(out)
}

async fn partition_count(admin: &Arc<Admin>, topic: &str) -> Result<Option<i32>, RestoreError> {
    let (a, t) = (admin.clone(), topic.to_string());
    Ok(tokio::task::spawn_blocking(move || a.partition_count(&t))
        .await
        .map_err(|e| RestoreError::Internal(e.to_string()))??)
}

async fn wait_for_topic(
    admin: &Arc<Admin>,
    topic: &str,
    partitions: i32,
    servers: &str,
) -> Result<(), RestoreError> {
    const WAIT: Duration = Duration::from_secs(30);
    let deadline = Instant::now() + WAIT;
    loop {
        if partition_count(admin, topic).await? == Some(partitions) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(RestoreError::TopicNotReady {
                topic: topic.to_string(),
                servers: servers.to_string(),
                secs: WAIT.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Exactly once: fences earlier runs' producers, then reads this restore's committed markers.
async fn eos_setup(
    cfg: &RestoreConfig,
    fingerprint: &str,
    txn_timeout: Duration,
) -> Result<(Vec<RestoreProducer>, Vec<(String, eos::Marker)>), RestoreError> {
    let servers = crate::kafka::servers(&cfg.kafka);
    let kafka = cfg.kafka.clone();
    let admin = tokio::task::spawn_blocking(move || Admin::connect(&kafka))
        .await
        .map_err(|e| RestoreError::Internal(e.to_string()))??;
    eos::ensure_progress_topic(&admin, cfg.topic_replication()).await?;
    let (kafka, fp) = (cfg.kafka.clone(), fingerprint.to_string());
    tokio::task::spawn_blocking(move || {
        let mut producers = Vec::with_capacity(WORKERS);
        for w in 0..WORKERS {
            let id = eos::transactional_id(&fp, w);
            let p = RestoreProducer::new(&kafka, 1, Some((&id, txn_timeout)))?;
            p.init_transactions()
                .map_err(|detail| RestoreError::Transaction {
                    servers: servers.clone(),
                    detail: format!("init_transactions: {detail}"),
                })?;
            producers.push(p);
        }
        let markers = eos::read_markers(&kafka, &fp)?;
        Ok((producers, markers))
    })
    .await
    .map_err(|e| RestoreError::Internal(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_error_names_object_offset_and_fix() {
        let e = RestoreError::Corrupt(CorruptObject {
            location: "s3://b/p/2026/t+0+00000000000000000000.jsonl".into(),
            at: Some(1234),
            detail: "invalid jsonl record: EOF".into(),
        });
        let s = e.to_string();
        assert!(
            s.contains("s3://b/p/2026/t+0+00000000000000000000.jsonl at byte 1234"),
            "{s}"
        );
        assert!(s.contains("--skip-corrupt"), "{s}");
    }

    #[test]
    fn summary_mentions_every_skip_reason() {
        let s = RestoreSummary {
            records_out_of_range: 3,
            corrupt: vec![CorruptObject {
                location: "x".into(),
                at: None,
                detail: "bad".into(),
            }],
            ..RestoreSummary::default()
        };
        let text = s.to_string();
        assert!(text.contains("3 outside the time range"), "{text}");
        assert!(text.contains("1 corrupt"), "{text}");
        assert!(text.contains("corrupt: x: bad"), "{text}");
    }
}
