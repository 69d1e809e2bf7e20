//! Dump mode: every task of the file reads its topics and writes time-partitioned archive
//! objects, exactly once (an offset is committed only after its object is stored).
//!
//! A task is a pipeline whose data flows one way, each stage in its own file: `poll` (reads
//! and routes records, owns the consumer and its commits) → `writer` (encodes each partition's
//! open object, cuts it into parts) → `upload` (streams parts to the store; per partition,
//! makes objects visible in order and has their offsets committed). `once` decides when a
//! `--once` run covered every partition. The buffer budget is shared out between tasks, and
//! within a task between the stages.

mod budget;
pub(crate) mod index;
mod once;
pub mod params;
mod progress;
mod requests;
pub mod roll;
mod sequencer;
mod sink;
#[cfg(feature = "iceberg")]
pub(crate) use sink::consumer_error;
pub mod snapshot;
pub(crate) mod start;
pub(crate) mod task;
mod upload;
mod writer;

pub use once::{Coverage, PartitionReport};

use crate::config::Config;
use crate::kafka::KafkaError;
use crate::store::{ObjectStore, StoreError};
use crate::telemetry::readiness::Part;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a finished task did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub task: String,
    pub objects: u64,
    pub records: u64,
    pub bytes: u64,
    /// CDC tasks: messages, changes, repeats, malformed and verbatim messages stored.
    pub cdc: crate::cdc::Counts,
    /// `--once`: every partition of the task's topics, from where to where, and who covered it.
    pub partitions: Vec<PartitionReport>,
    /// Offsets retention deleted before they were archived, found by this run.
    pub gaps: Vec<GapReport>,
}

impl Summary {
    /// The run in one line: what a scheduled job's log shows.
    pub fn line(&self) -> String {
        let count = |c: Coverage| self.partitions.iter().filter(|p| p.coverage == c).count();
        format!(
            "task {}: {} records, {} objects, {:.1} MiB; partitions: {} this run, {} another member, {} nothing new, {} not covered{}",
            self.task,
            self.records,
            self.objects,
            self.bytes as f64 / (1 << 20) as f64,
            count(Coverage::ThisRun),
            count(Coverage::OtherMember),
            count(Coverage::NothingNew),
            count(Coverage::NotCovered),
            if self.gaps.is_empty() {
                String::new()
            } else {
                format!("; {} retention gaps", self.gaps.len())
            }
        )
    }
}

/// Sets each task's [`crate::telemetry::LAST_SUCCESS`] gauge to now: the run archived what it
/// was asked to.
pub fn mark_success(cfg: &Config) {
    let now = chrono::Utc::now().timestamp_millis() as f64 / 1000.0;
    for t in &cfg.tasks {
        metrics::gauge!(crate::telemetry::LAST_SUCCESS, "task" => t.name.to_string()).set(now);
    }
}

/// Offsets `from..to` (end exclusive) of a partition that retention deleted before they were
/// archived (recorded under `<directory>/.strata/gaps/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapReport {
    pub topic: String,
    pub partition: i32,
    pub from: i64,
    pub to: i64,
}

/// A `--once` run that found retention gaps in a task that does not allow them fails with exit
/// code 4 (after archiving everything there was).
pub fn check_gaps(cfg: &Config, opts: DumpOptions, summaries: &[Summary]) -> Result<(), DumpError> {
    if !opts.once {
        return Ok(());
    }
    for s in summaries.iter().filter(|s| !s.gaps.is_empty()) {
        let Some(task) = cfg.tasks.iter().find(|t| t.name.as_str() == s.task) else {
            continue;
        };
        if task.allow_retention_gaps {
            continue;
        }
        let gaps: Vec<String> = s
            .gaps
            .iter()
            .map(|g| {
                format!(
                    "{}-{} offsets {}..{}",
                    g.topic,
                    g.partition,
                    g.from,
                    g.to - 1
                )
            })
            .collect();
        return Err(DumpError::RetentionGaps {
            task: s.task.clone(),
            gaps: gaps.join(", "),
            records: format!("{}.strata/gaps/", task.directory.prefix()),
        });
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("the config has no [[tasks]]; add a dump task (see config/example.toml)")]
    NoTasks,
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error("task {task}: {source}")]
    Store { task: String, source: StoreError },
    #[error("task {task}: encoding failed: {detail}")]
    Encode { task: String, detail: String },
    #[error("task {task}: no topic to read: {topics} matched nothing in the cluster; check the topic names or topic_regex")]
    NoTopics { task: String, topics: String },
    #[error("task {task}: records of {partitions} partition(s) could not be stored before the stop (see the log for why); their offsets were not committed, so the next run reads them again")]
    Unflushed { task: String, partitions: u64 },
    #[error("task {task}: --once did not cover every partition within {deadline_secs} s: {partitions}; their records up to the high watermarks noted at start are not all archived (another member of group \"{task}\" may still hold them, or the store or Kafka failed: see the log); run again, or raise --once-deadline")]
    OnceIncomplete {
        task: String,
        deadline_secs: u64,
        partitions: String,
    },
    #[error("task {task}: partition {topic}-{partition} ends at offset {high}, but its archive already holds offsets up to {end}: the topic was deleted and created again (its offsets start over), its log was truncated, or the directory holds another cluster's archive. Records archived now would take the names of archived ones: give the task a new directory, or move the partition's objects and its index ({index}) away")]
    ArchiveAhead {
        task: String,
        topic: String,
        partition: i32,
        end: i64,
        high: i64,
        index: String,
    },
    #[error("task {task}: the group's committed offset {committed} of partition {topic}-{partition} is past the partition's end ({high}): the topic was deleted and created again, or its log was truncated (an unclean leader election). Check the topic; to archive what it holds now, reset the group (kafka-consumer-groups.sh --group {task} --topic {topic}:{partition} --reset-offsets --to-earliest --execute) and, for a topic created again, give the task a new directory")]
    CommittedAhead {
        task: String,
        topic: String,
        partition: i32,
        committed: i64,
        high: i64,
    },
    #[error("task {task}: {object} already exists and nothing says where it ends (no seal under the directory's .strata/index/: an older strata or another program wrote it), while the group's committed offset of {topic}-{partition} ({committed}) does not go past its first offset {first}: the group's offsets went back (reset, deleted or expired). Move the group past the object (kafka-consumer-groups.sh --group {task} --topic {topic}:{partition} --reset-offsets --to-offset <the offset after its last record> --execute), or move the object out of the directory to archive its records again")]
    Unexplained {
        task: String,
        object: String,
        topic: String,
        partition: i32,
        first: i64,
        committed: String,
    },
    #[error("task {task}: archived every partition, but retention deleted records before they were archived: {gaps}; each gap is recorded under {records}. Set allow_retention_gaps = true on the task to let such runs exit 0")]
    RetentionGaps {
        task: String,
        gaps: String,
        records: String,
    },
    #[error("task {task}: the cluster state snapshot is required (state = \"required\") and failed: {detail}; grant the rights it names, or set state = \"best_effort\"")]
    State { task: String, detail: String },
    #[error("task {task}: worker stopped unexpectedly: {detail}")]
    Worker { task: String, detail: String },
    #[error(transparent)]
    Params(#[from] params::ParamsError),
    #[error("task {task}: {source}")]
    Iceberg {
        task: String,
        source: crate::iceberg::IcebergError,
    },
    #[error("task {task}: topic {topic}: {source}")]
    Malformed {
        task: String,
        topic: String,
        source: crate::cdc::MalformedAt,
    },
}

impl DumpError {
    /// Exit code for the CLI: 3 when `--once` ran out of time with partitions not covered, so a
    /// scheduler can tell "incomplete, run again" from a failure; 4 when it archived everything
    /// there was but retention had deleted records first.
    pub fn exit_code(&self) -> u8 {
        match self {
            DumpError::OnceIncomplete { .. } => 3,
            DumpError::RetentionGaps { .. } => 4,
            _ => 1,
        }
    }
}

/// Options of one `strata dump` run.
#[derive(Debug, Clone, Copy)]
pub struct DumpOptions {
    /// Read up to the high watermarks noted at start, store, commit and return.
    pub once: bool,
    /// `--once`: how long to wait for every partition to be covered (by this process or other
    /// members of the group) before giving up with [`DumpError::OnceIncomplete`].
    pub once_deadline: std::time::Duration,
}

impl Default for DumpOptions {
    fn default() -> Self {
        Self {
            once: false,
            once_deadline: std::time::Duration::from_secs(600),
        }
    }
}

pub(crate) type Fatal = crate::fatal::Fatal<DumpError>;
pub(crate) use crate::kafka::Tp;

/// A task's metrics.
pub(crate) struct Metrics {
    pub consumed_records: metrics::Counter,
    pub consumed_bytes: metrics::Counter,
    pub written_records: metrics::Counter,
    pub written_bytes: metrics::Counter,
    pub objects: metrics::Counter,
    pub adopted: metrics::Counter,
    pub upload_seconds: metrics::Histogram,
    pub store_errors: metrics::Counter,
    pub store_fatal: metrics::Counter,
    pub commit_errors: metrics::Counter,
    pub buffered: metrics::Gauge,
    pub cdc_changes: metrics::Counter,
    pub cdc_repeats: metrics::Counter,
    pub cdc_malformed: metrics::Counter,
    pub cdc_verbatim: metrics::Counter,
}

impl Metrics {
    fn new(task: &str) -> Self {
        let t = task.to_string();
        Self {
            consumed_records: metrics::counter!("strata_dump_records_consumed_total", "task" => t.clone()),
            consumed_bytes: metrics::counter!("strata_dump_bytes_consumed_total", "task" => t.clone()),
            written_records: metrics::counter!("strata_dump_records_written_total", "task" => t.clone()),
            written_bytes: metrics::counter!("strata_dump_bytes_written_total", "task" => t.clone()),
            objects: metrics::counter!("strata_dump_objects_written_total", "task" => t.clone()),
            adopted: metrics::counter!("strata_dump_objects_adopted_total", "task" => t.clone()),
            upload_seconds: metrics::histogram!("strata_dump_upload_seconds", "task" => t.clone()),
            store_errors: metrics::counter!("strata_dump_errors_total", "task" => t.clone(), "kind" => "store"),
            store_fatal: metrics::counter!("strata_dump_errors_total", "task" => t.clone(), "kind" => "store_fatal"),
            commit_errors: metrics::counter!("strata_dump_errors_total", "task" => t.clone(), "kind" => "commit"),
            buffered: metrics::gauge!("strata_dump_buffered_bytes", "task" => t.clone()),
            cdc_changes: metrics::counter!("strata_dump_cdc_changes_total", "task" => t.clone(), "kind" => "table"),
            cdc_repeats: metrics::counter!("strata_dump_cdc_changes_total", "task" => t.clone(), "kind" => "repeat"),
            cdc_malformed: metrics::counter!("strata_dump_cdc_messages_total", "task" => t.clone(), "kind" => "malformed"),
            cdc_verbatim: metrics::counter!("strata_dump_cdc_messages_total", "task" => t, "kind" => "verbatim"),
        }
    }
}

/// Runs every task until `stop` is set (or, with `once`, until each covered its partitions).
pub async fn run(
    cfg: &Config,
    opts: DumpOptions,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Summary>, DumpError> {
    run_wrapped(cfg, opts, stop, |s| s).await
}

/// [`run`] with every task's store passed through `wrap` once opened: how tests put a store
/// that loses answers or fails on cue between strata and the real one.
pub async fn run_wrapped(
    cfg: &Config,
    opts: DumpOptions,
    stop: Arc<AtomicBool>,
    wrap: impl Fn(Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore>,
) -> Result<Vec<Summary>, DumpError> {
    if cfg.tasks.is_empty() {
        return Err(DumpError::NoTasks);
    }
    let ready: Vec<_> = cfg
        .tasks
        .iter()
        .map(|t| Part::register(format!("dump task {}", t.name)))
        .collect();
    // Fail fast, before consuming anything, on what an operator must fix.
    let mut stores = Vec::new();
    for task in &cfg.tasks {
        let err = |source| DumpError::Store {
            task: task.name.to_string(),
            source,
        };
        let store = wrap(crate::store::open(&task.store).await.map_err(err)?);
        store.check().await.map_err(err)?;
        params::check_or_record(store.as_ref(), task).await?;
        let probe = format!(
            "{}.strata/probe-{}",
            task.directory.prefix(),
            uuid::Uuid::new_v4().simple()
        );
        if !store.refuses_taken_keys(&probe).await.map_err(err)? {
            tracing::warn!(task = %task.name, store = %store.location(""), "the store ignores conditional writes (If-None-Match): a crash still never loses or duplicates records, but a member that lost its partitions without noticing (a zombie) can replace an object another member stored; see docs/guarantees.md");
        }
        stores.push(store);
    }
    let kafka = cfg.kafka.clone();
    tokio::task::spawn_blocking(move || crate::kafka::Admin::connect(&kafka).map(drop))
        .await
        .map_err(|e| DumpError::Worker {
            task: "startup".into(),
            detail: e.to_string(),
        })??;

    let memory = (cfg.limits.buffer_memory.bytes() as usize) / cfg.tasks.len();
    // What the process holds before any buffer, plus the budget: the resident size to stay in.
    let _governor = crate::memory::resident()
        .and_then(|base| crate::memory::Governor::start(base + cfg.limits.buffer_memory.bytes()));
    let leftover_age = cfg.limits.leftover_age;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let rt = tokio::runtime::Handle::current();
    // Snapshots leave out the groups of this file's dump tasks (strata's own).
    let own: Vec<String> = cfg.tasks.iter().map(|t| t.name.to_string()).collect();
    for ((task, store), ready) in cfg.tasks.iter().cloned().zip(stores).zip(ready) {
        let (tx, rt, task_stop, kafka) = (tx.clone(), rt.clone(), stop.clone(), cfg.kafka.clone());
        let snapshots = snapshot::Policy {
            groups: snapshot::GroupFilter {
                regex: task.state.groups.clone(),
                own: own.clone(),
            },
            mode: task.state.mode,
            interval: task.state.interval,
        };
        let name = task.name.to_string();
        let spawned = std::thread::Builder::new()
            .name(format!("dump-{name}"))
            .spawn(move || {
                let part = ready.clone();
                let result = task::run_task(task::TaskSetup {
                    kafka: &kafka,
                    task,
                    store,
                    rt,
                    memory,
                    leftover_age,
                    opts,
                    stop: task_stop,
                    snapshots,
                    ready,
                });
                part.ended(&result);
                let _ = tx.send((name, result));
            });
        if let Err(e) = spawned {
            stop.store(true, Ordering::Relaxed);
            return Err(DumpError::Worker {
                task: "startup".into(),
                detail: e.to_string(),
            });
        }
    }
    drop(tx);
    let mut summaries = Vec::new();
    let mut first_error = None;
    let mut running = cfg.tasks.len();
    while let Some((task, result)) = rx.recv().await {
        running -= 1;
        match result {
            Ok(s) => summaries.push(s),
            Err(e) => {
                // The first error is the run's, reported once by the caller; a line of its own
                // only says why the tasks still running stop.
                if running > 0 && !stop.load(Ordering::Relaxed) {
                    tracing::error!(%task, error = %e, "task failed; stopping the other tasks");
                } else if first_error.is_some() {
                    tracing::error!(%task, error = %e, "task failed");
                }
                stop.store(true, Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(summaries),
    }
}
