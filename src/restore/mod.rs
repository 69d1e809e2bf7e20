//! Restore mode: replays dump archives back into Kafka.
//!
//! Contract: records of a source partition are produced in their original offset order with
//! their key, value, headers and timestamp; an archive object is checkpointed only after Kafka
//! acknowledged all its records, together with where each landed (the exact offset map), so a
//! resumed restore re-sends at most the one object per source partition that was in flight
//! (none with `exactly_once`, which uses transactions). Consumer groups resume at the first
//! restored record at or after their recorded position.
//!
//! Flow: listing → [`plan`] (pure) → [`topics`] (from the [`snapshots`]) → decode (`format`) →
//! [`produce`] → [`checkpoint`] with the [`offset_map`] → [`groups`].

pub mod checkpoint;
mod dry_run;
pub mod eos;
pub mod groups;
pub mod offset_map;
pub mod plan;
pub mod produce;
pub mod progress;
pub mod rate;
mod replay;
pub mod snapshots;
pub mod topics;

pub use dry_run::ListedObject;
pub use replay::record_bytes;

use crate::config::{Partitioning, RestoreConfig};
use crate::kafka::{Admin, KafkaError};
use crate::store::{ErrorKind, ObjectMeta, ObjectStore, StoreError};
use checkpoint::{Checkpoint, CheckpointError, Settings};
use futures::{StreamExt as _, TryStreamExt as _};
use groups::{GroupRow, Position, TargetOffset};
use plan::{Plan, PlanSkips, Selection, TimeFilter};
use produce::RestoreProducer;
use replay::{Counts, Engine, Producers, Target};
use snapshots::Recorded;
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
    #[error("target topic {topic:?} on {servers} has {partitions} partition(s) but the archive of {sources} has {needed}; with partitioning = \"original\" every archived partition is restored into its own: add partitions (kafka-topics.sh --alter --topic {topic} --partitions {needed}), restore into another topic (--target-prefix, --topic-map) or place records by key (--partitioning key-hash); nothing was written")]
    TooFewPartitions {
        topic: String,
        servers: String,
        partitions: i32,
        sources: String,
        needed: i32,
    },
    #[error("restore.partitions = {partitions} is fewer than the {needed} partition(s) the archive of {sources} has (target topic {topic:?}); with partitioning = \"original\" every archived partition is restored into its own: raise or remove restore.partitions, or place records by key (--partitioning key-hash); nothing was written")]
    PartitionsSetTooLow {
        topic: String,
        partitions: i32,
        sources: String,
        needed: i32,
    },
    #[error("cannot create target topic {topic:?} with the configs the archived topic had ({configs}): {detail}; pass --no-topic-configs to create it with the target's defaults")]
    TopicConfigs {
        topic: String,
        configs: String,
        detail: String,
    },
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error("--groups needs partitioning = \"original\" (restore.partitioning is key-hash): a group's position is per archived partition, and only original partitioning keeps each archived partition in one target partition")]
    GroupsNeedOriginal,
    #[error("--groups: no cluster state snapshot{task} taken at or before {to} under {location}/.strata/state/; strata dump --once records the groups' positions there at the start and end of every run (pass --to later than a run, or --task with a task that stored snapshots)")]
    NoSnapshot {
        location: String,
        task: String,
        to: String,
    },
    #[error("--groups {regex:?} matches none of the consumer groups the state snapshots ({snapshots}) recorded: {recorded}; the regular expression must match a whole group name")]
    NoGroups {
        regex: String,
        snapshots: String,
        recorded: String,
    },
    #[error("--groups: consumer group {group:?} has positions on {sources}, which all restore into topic {target:?}; give each its own target topic (--topic-map) or leave the group out of --groups")]
    GroupTargetsClash {
        group: String,
        target: String,
        sources: String,
    },
    #[error("--groups: cannot place consumer group {group:?} on partition {partition} of {topic:?}: archive object {object} was restored without recording where its records landed (text archives carry no offsets; checkpoints of an older strata have no offset map); restore into new topics with a new --checkpoint to restore the group")]
    GroupUnmapped {
        group: String,
        topic: String,
        partition: i32,
        object: String,
    },
    #[error("--groups: consumer group {group:?} has {members} active member(s) on {servers}; restore commits positions only to groups nobody consumes with: stop its consumers, or leave it out of --groups, and run again (nothing was committed to any group)")]
    GroupActive {
        group: String,
        servers: String,
        members: usize,
    },
    #[error("--groups: committing the positions of consumer group {group:?} on {servers} failed: {detail}; run the same command again (the restore is checkpointed; the groups are committed again)")]
    GroupCommit {
        group: String,
        servers: String,
        detail: String,
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
    /// `--groups`: restore the positions of the recorded consumer groups this matches (see
    /// [`group_regex`]) onto the restored topics.
    pub groups: Option<regex::Regex>,
    /// `--no-topic-configs`: create missing target topics without the archived topic's configs.
    pub no_topic_configs: bool,
    /// `--task NAME`: read only this dump task's state snapshots (else every task's of the
    /// directory).
    pub state_task: Option<String>,
}

/// The `--groups` expression, matching whole group names.
pub fn group_regex(re: &str) -> Result<regex::Regex, regex::Error> {
    regex::Regex::new(&format!("^(?:{re})$"))
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
    /// The state snapshots used ("task T at TIME, ..."), when any.
    pub snapshots: Option<String>,
    /// Target topics created: name, partitions, configs given.
    pub created: Vec<(String, i32, usize)>,
    /// `--groups`: each group's position per partition and its target offset.
    pub groups: Vec<GroupRow>,
    /// Whether `groups` were committed (not in a dry run).
    pub groups_committed: bool,
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
        for (topic, partitions, configs) in &self.created {
            writeln!(
                f,
                "created topic {topic} ({partitions} partition(s), {configs} config(s) of the archived topic)"
            )?;
        }
        if !self.groups.is_empty() {
            let groups: std::collections::BTreeSet<&str> = self
                .groups
                .iter()
                .map(|r| r.position.group.as_str())
                .collect();
            writeln!(
                f,
                "consumer groups ({} of the state snapshots {}): {}",
                groups.len(),
                self.snapshots.as_deref().unwrap_or("-"),
                if self.groups_committed {
                    "positions committed"
                } else {
                    "dry run, nothing committed (end: the target partition's end after the restore; end+N: N records past it)"
                }
            )?;
            groups::render(f, &self.groups)?;
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
    // The state snapshots: definitions of the topics to create, the groups' positions.
    let recorded = load_recorded(cfg, &opts, store.as_ref(), &listing, &location).await?;
    summary.snapshots = recorded.as_ref().map(Recorded::describe);
    // Every selected archived topic (the checkpoint's finished ones too) and its target.
    let restored_topics: BTreeMap<String, String> = plan
        .max_partition
        .keys()
        .map(|t| (t.clone(), cfg.naming.target(t)))
        .collect();
    let positions = match &opts.groups {
        Some(re) => Some(select_groups(
            cfg,
            &plan,
            recorded.as_ref(),
            re,
            &restored_topics,
        )?),
        None => None,
    };
    if opts.dry_run {
        let pending = dry_run::run(cfg, store, &plan, &mut summary, positions.is_some()).await?;
        if let Some(positions) = &positions {
            summary.groups = group_rows(positions, &checkpoint, &pending)?;
        }
        summary.checkpoint = cp_path.exists().then_some(cp_path);
        summary.duration = started.elapsed();
        return Ok(summary);
    }
    if plan.partitions.is_empty() && positions.is_none() {
        tracing::info!(checkpoint = %cp_path.display(), objects = plan.skips.finished, "every selected object was restored already; delete the checkpoint to restore again");
        summary.duration = started.elapsed();
        return Ok(summary);
    }

    let kafka = cfg.kafka.clone();
    let admin = Arc::new(
        tokio::task::spawn_blocking(move || Admin::connect(&kafka))
            .await
            .map_err(|e| RestoreError::Internal(e.to_string()))??,
    );
    // Everything that refuses the restore, before anything is written.
    let decisions = decide_targets(cfg, &plan, recorded.as_ref(), &opts, &admin).await?;
    if let Some(positions) = &positions {
        ensure_idle(cfg, &admin, positions).await?;
    }
    let (targets, created) = create_targets(cfg, decisions, &admin).await?;
    summary.created = created;

    let mut checkpoint = Some(checkpoint);
    let mut engine = None;
    if plan.partitions.is_empty() {
        tracing::info!(checkpoint = %cp_path.display(), objects = plan.skips.finished, "every selected object was restored already; committing the groups' positions");
    } else {
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
        let e = Arc::new(Engine {
            cfg: cfg.clone(),
            store,
            rt: tokio::runtime::Handle::current(),
            targets,
            producers,
            checkpoint: Mutex::new(
                checkpoint
                    .take()
                    .ok_or_else(|| RestoreError::Internal("checkpoint taken twice".into()))?,
            ),
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
        let runner = e.clone();
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
        let counts = e.counts.lock().map(|c| c.clone()).unwrap_or_default();
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
        engine = Some(e);
    }

    if let Some(positions) = &positions {
        let rows = {
            let guard = match &engine {
                Some(e) => Some(
                    e.checkpoint
                        .lock()
                        .map_err(|_| RestoreError::Internal("checkpoint lock poisoned".into()))?,
                ),
                None => None,
            };
            let cp = match (&guard, &checkpoint) {
                (Some(g), _) => &**g,
                (None, Some(c)) => c,
                (None, None) => return Err(RestoreError::Internal("no checkpoint".into())),
            };
            group_rows(positions, cp, &dry_run::Pending::new())?
        };
        summary.groups = commit_groups(cfg, &admin, rows).await?;
        summary.groups_committed = true;
    }
    summary.duration = started.elapsed();
    Ok(summary)
}

/// Reads the state snapshots when this run needs them: always for a restore (definitions of
/// the topics it creates; without them, the archive alone), and for `--groups` (then missing
/// or unreadable snapshots are an error).
async fn load_recorded(
    cfg: &RestoreConfig,
    opts: &RestoreOptions,
    store: &dyn ObjectStore,
    listing: &[ObjectMeta],
    location: &str,
) -> Result<Option<Recorded>, RestoreError> {
    let required = opts.groups.is_some();
    if opts.dry_run && !required {
        return Ok(None);
    }
    let task = opts.state_task.as_deref();
    match snapshots::load(store, listing, &cfg.directory, task, cfg.to).await {
        Ok(r) if r.used.is_empty() && required => Err(RestoreError::NoSnapshot {
            location: location.to_string(),
            task: task.map_or(String::new(), |t| format!(" of task {t}")),
            to: cfg
                .to
                .map_or("now".into(), |t| format!("--to {}", t.to_rfc3339())),
        }),
        Ok(r) if r.used.is_empty() => Ok(None),
        Ok(r) => {
            tracing::info!(snapshots = %r.describe(), topics = r.topics.len(), groups = r.groups.len(), "cluster state snapshots");
            Ok(Some(r))
        }
        Err(e) if required => Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the cluster state snapshots; missing topics are created from the archive alone (partition count, no configs)");
            Ok(None)
        }
    }
}

/// The recorded positions `--groups` restores, refusing what cannot be restored exactly.
fn select_groups(
    cfg: &RestoreConfig,
    plan: &Plan,
    recorded: Option<&Recorded>,
    re: &regex::Regex,
    restored_topics: &BTreeMap<String, String>,
) -> Result<Vec<Position>, RestoreError> {
    if cfg.partitioning != Partitioning::Original {
        return Err(RestoreError::GroupsNeedOriginal);
    }
    let Some(recorded) = recorded else {
        return Err(RestoreError::Internal(
            "no state snapshot for --groups".into(),
        ));
    };
    let positions = groups::select(&recorded.groups, |g| re.is_match(g), restored_topics).map_err(
        |e| match e {
            groups::SelectError::NoMatch { recorded: names } => RestoreError::NoGroups {
                regex: re
                    .as_str()
                    .trim_start_matches("^(?:")
                    .trim_end_matches(")$")
                    .to_string(),
                snapshots: recorded.describe(),
                recorded: if names.is_empty() {
                    "none".into()
                } else {
                    names.join(", ")
                },
            },
            groups::SelectError::Clash {
                group,
                target,
                sources,
            } => RestoreError::GroupTargetsClash {
                group,
                target,
                sources: sources.join(", "),
            },
        },
    )?;
    // Text archives carry no offsets: their groups cannot be placed (say so before writing).
    for p in &positions {
        if let Some(o) = plan.objects().find(|o| {
            o.name.topic == p.topic
                && o.name.partition == p.partition
                && o.name.extension.starts_with("txt")
        }) {
            return Err(RestoreError::GroupUnmapped {
                group: p.group.clone(),
                topic: p.topic.clone(),
                partition: p.partition,
                object: o.key.clone(),
            });
        }
    }
    Ok(positions)
}

/// Each position's target offset from the checkpoint's offset map (and, in a dry run, the
/// records still to restore).
fn group_rows(
    positions: &[Position],
    cp: &Checkpoint,
    pending: &dry_run::Pending,
) -> Result<Vec<GroupRow>, RestoreError> {
    positions
        .iter()
        .map(|p| {
            let map =
                cp.offset_map(&p.topic, p.partition)
                    .map_err(|u| RestoreError::GroupUnmapped {
                        group: p.group.clone(),
                        topic: p.topic.clone(),
                        partition: p.partition,
                        object: u.object,
                    })?;
            // What overlapping objects repeat is not sent again.
            let sent_up_to = cp.last_offset(&p.topic, p.partition);
            let still: Vec<i64> = pending
                .get(&(p.topic.clone(), p.partition))
                .map(|v| {
                    v.iter()
                        .copied()
                        .filter(|o| sent_up_to.is_none_or(|l| *o > l))
                        .collect()
                })
                .unwrap_or_default();
            Ok(GroupRow {
                position: p.clone(),
                target: groups::translate(p.committed, map.map(|m| &m.ranges), &still),
            })
        })
        .collect()
}

/// Refuses (naming it) the first group of `positions` with an active member on the target.
async fn ensure_idle(
    cfg: &RestoreConfig,
    admin: &Arc<Admin>,
    positions: &[Position],
) -> Result<(), RestoreError> {
    let mut names: Vec<String> = positions.iter().map(|p| p.group.clone()).collect();
    names.dedup();
    let a = admin.clone();
    let active = tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        groups::first_active(&a, &refs)
    })
    .await
    .map_err(|e| RestoreError::Internal(e.to_string()))??;
    match active {
        Some((group, members)) => Err(RestoreError::GroupActive {
            group,
            servers: crate::kafka::servers(&cfg.kafka),
            members,
        }),
        None => Ok(()),
    }
}

/// Places `End` positions at the target partitions' ends, checks again that no group has an
/// active member, and commits every group's positions. Returns the rows as committed.
async fn commit_groups(
    cfg: &RestoreConfig,
    admin: &Arc<Admin>,
    mut rows: Vec<GroupRow>,
) -> Result<Vec<GroupRow>, RestoreError> {
    let a = admin.clone();
    rows = tokio::task::spawn_blocking(move || {
        for r in rows.iter_mut() {
            if r.target == TargetOffset::End {
                let (_, high) = a.watermarks(&r.position.target_topic, r.position.partition)?;
                r.target = TargetOffset::At(high);
            }
        }
        Ok::<_, KafkaError>(rows)
    })
    .await
    .map_err(|e| RestoreError::Internal(e.to_string()))??;
    let positions: Vec<Position> = rows.iter().map(|r| r.position.clone()).collect();
    ensure_idle(cfg, admin, &positions).await?;
    let mut per_group: BTreeMap<String, Vec<(String, i32, i64)>> = BTreeMap::new();
    for r in &rows {
        let TargetOffset::At(offset) = r.target else {
            return Err(RestoreError::Internal(format!(
                "group {} has no target offset on {} partition {}",
                r.position.group, r.position.target_topic, r.position.partition
            )));
        };
        per_group
            .entry(r.position.group.clone())
            .or_default()
            .push((
                r.position.target_topic.clone(),
                r.position.partition,
                offset,
            ));
    }
    // Each group is committed by a client of its own (a coordinator lookup and a commit): a
    // few at once, so a recovery of many groups does not wait for them one after another.
    let servers = crate::kafka::servers(&cfg.kafka);
    let commits = per_group.into_iter().map(|(group, offsets)| {
        let (k, servers) = (cfg.kafka.clone(), servers.clone());
        async move {
            let g = group.clone();
            tokio::task::spawn_blocking(move || groups::commit(&k, &g, &offsets))
                .await
                .map_err(|e| RestoreError::Internal(e.to_string()))?
                .map_err(|detail| RestoreError::GroupCommit {
                    group: group.clone(),
                    servers,
                    detail,
                })?;
            tracing::info!(group = %group, "consumer group positions committed");
            Ok::<_, RestoreError>(())
        }
    });
    futures::stream::iter(commits)
        .buffer_unordered(GROUP_COMMITS_AT_ONCE)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(rows)
}

/// Groups committed at once by `--groups`.
const GROUP_COMMITS_AT_ONCE: usize = 8;

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

/// What to do with each target topic (and the archived topics restored into it), decided from
/// the cluster's metadata before anything is written: the first refusal is the error.
async fn decide_targets(
    cfg: &RestoreConfig,
    plan: &Plan,
    recorded: Option<&Recorded>,
    opts: &RestoreOptions,
    admin: &Arc<Admin>,
) -> Result<Vec<(String, Vec<String>, topics::Decision)>, RestoreError> {
    // Sources per target (several archived topics may be mapped onto one).
    let mut wanted: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &plan.partitions {
        let sources = wanted.entry(cfg.naming.target(&p.topic)).or_default();
        if !sources.contains(&p.topic) {
            sources.push(p.topic.clone());
        }
    }
    let rules = topics::Rules {
        partitioning: cfg.partitioning,
        create_topics: cfg.create_topics,
        partitions: cfg.partitions,
        with_configs: !opts.no_topic_configs,
    };
    let servers = crate::kafka::servers(&cfg.kafka);
    let mut out = Vec::new();
    for (target, sources) in wanted {
        if sources.len() > 1 {
            tracing::warn!(target = %target, sources = ?sources, "several archived topics restore into one topic; order is kept per source partition only");
        }
        let w = topics::Wanted {
            target: target.clone(),
            archived_partitions: sources
                .iter()
                .filter_map(|s| plan.max_partition.get(s).copied())
                .max()
                .unwrap_or(0)
                + 1,
            recorded: sources
                .iter()
                .filter_map(|s| recorded.and_then(|r| r.topics.get(s)))
                .collect(),
            sources: sources.clone(),
        };
        let existing = partition_count(admin, &target).await?;
        let decision = topics::decide(&w, existing, rules).map_err(|r| match r {
            topics::Refusal::Missing { needed } => RestoreError::TopicMissing {
                topic: target.clone(),
                servers: servers.clone(),
                partitions: needed,
            },
            topics::Refusal::TooFewPartitions {
                partitions,
                needed,
                configured: false,
            } => RestoreError::TooFewPartitions {
                topic: target.clone(),
                servers: servers.clone(),
                partitions,
                sources: sources.join(", "),
                needed,
            },
            topics::Refusal::TooFewPartitions {
                partitions,
                needed,
                configured: true,
            } => RestoreError::PartitionsSetTooLow {
                topic: target.clone(),
                partitions,
                sources: sources.join(", "),
                needed,
            },
        })?;
        out.push((target, sources, decision));
    }
    Ok(out)
}

/// Creates the target topics the decisions say to create; returns where each archived topic
/// goes, and the topics created (name, partitions, configs given).
async fn create_targets(
    cfg: &RestoreConfig,
    decisions: Vec<(String, Vec<String>, topics::Decision)>,
    admin: &Arc<Admin>,
) -> Result<(BTreeMap<String, Target>, Vec<(String, i32, usize)>), RestoreError> {
    let servers = crate::kafka::servers(&cfg.kafka);
    let mut out = BTreeMap::new();
    let mut created = Vec::new();
    for (target, sources, decision) in decisions {
        let partitions = match decision {
            topics::Decision::Use { partitions } => partitions,
            topics::Decision::Create {
                partitions,
                configs,
            } => {
                let replication = cfg.topic_replication();
                tracing::info!(topic = %target, partitions, replication_factor = replication, configs = ?configs, "creating target topic (replication -1: the broker's default)");
                let pairs: Vec<(&str, &str)> = configs
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                admin
                    .create_topic(&target, partitions, replication, &pairs)
                    .await
                    .map_err(|e| match e {
                        KafkaError::Topic { detail, .. } if !configs.is_empty() => {
                            RestoreError::TopicConfigs {
                                topic: target.clone(),
                                configs: configs.keys().cloned().collect::<Vec<_>>().join(", "),
                                detail,
                            }
                        }
                        e => e.into(),
                    })?;
                wait_for_topic(admin, &target, partitions, &servers).await?;
                created.push((target.clone(), partitions, configs.len()));
                partitions
            }
        };
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
    Ok((out, created))
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
