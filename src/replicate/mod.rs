//! Replicate mode: Kafka to Kafka, pull, push or both ways, exactly once for read_committed
//! readers, with MirrorMaker 2's offset syncs and checkpoints.
//!
//! A task has one flow per direction (`pipeline`: members of the flow's source group over the
//! shared Kafka source; `worker`: a transactional worker per source partition), a controller per flow (`control`: topics, parameters, `--once` coverage,
//! lag), and optionally a checkpointer (`checkpoint`: consumer group offsets translated to the
//! target). Positions live in the target (`positions`), written with the records they follow;
//! `bookkeeping` refuses a start they no longer describe.

mod bookkeeping;
mod check;
mod checkpoint;
mod control;
mod landed;
pub mod mm2;
mod naming;
mod pipeline;
mod positions;
mod setup;
mod topics;
mod unacked;
mod worker;

pub use bookkeeping::Reset;
pub use check::{check, CheckReport};
pub use naming::{is_cycle, never_replicated, target_topic, FlowNames, SOURCE_HEADER};

use crate::config::{Config, Direction, SaslMechanism};
use crate::kafka::KafkaError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ReplicateError {
    #[error("the config has no replicate task; add a [[tasks]] with type = \"replicate\" (see config/example.toml)")]
    NoTasks,
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error("task {task}: cluster {alias:?} ({servers}) refused {who}: {detail}; {}", SaslMechanism::fix_of(*.mechanism))]
    Authentication {
        task: String,
        alias: String,
        servers: String,
        /// Who logged in (`user "alice"`, `OAuth client "id"`), never a secret.
        who: String,
        mechanism: Option<SaslMechanism>,
        detail: String,
    },
    #[error("task {task}: cluster {alias:?} ({servers}) is not reachable: {detail}; check bootstrap_servers, security_protocol and that the brokers are up")]
    Unreachable {
        task: String,
        alias: String,
        servers: String,
        detail: String,
    },
    #[error("topic {topic:?} would need {replicas} replicas, but its cluster has {brokers} broker(s); lower replication_factor to at most {brokers}")]
    Replicas {
        topic: String,
        replicas: i32,
        brokers: usize,
    },
    #[error("task {task} ({flow}): its parameters cannot change after creation, and these differ from what the task stored at its first start: {fields}; create a new task (a new name) instead")]
    ParamsChanged {
        task: String,
        flow: String,
        fields: String,
    },
    #[error("task {task} ({flow}): {detail}")]
    Bookkeeping {
        task: String,
        flow: String,
        detail: String,
    },
    #[error("task {task}: --once did not cover every partition within {deadline_secs} s: {partitions}; run again, or raise --once-deadline")]
    OnceIncomplete {
        task: String,
        deadline_secs: u64,
        partitions: String,
    },
    #[error("task {task}: no topic to replicate: {topics} matched nothing on the source cluster {alias:?}; check the topic names or topic_regex")]
    NoTopics {
        task: String,
        alias: String,
        topics: String,
    },
    #[error("{0}")]
    Setup(String),
}

impl ReplicateError {
    /// Exit code for the CLI: 3 when `--once` ran out of time, as for dump.
    pub fn exit_code(&self) -> u8 {
        match self {
            ReplicateError::OnceIncomplete { .. } => 3,
            _ => 1,
        }
    }
}

/// Options of one `strata replicate` run.
#[derive(Debug, Clone, Copy)]
pub struct ReplicateOptions {
    /// Copy up to the source high watermarks noted at start, then return.
    pub once: bool,
    /// `--once`: how long to wait for every partition to be covered.
    pub once_deadline: Duration,
    /// `--reset`: go on past the refusals of lost bookkeeping, this way (this start only).
    pub reset: Option<Reset>,
}

impl Default for ReplicateOptions {
    fn default() -> Self {
        Self {
            once: false,
            once_deadline: Duration::from_secs(600),
            reset: None,
        }
    }
}

/// What one flow of a task did in this run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub task: String,
    /// `<source alias>-><target alias>`.
    pub flow: String,
    pub records: u64,
    pub bytes: u64,
    pub transactions: u64,
}

/// Runs every replicate task of the file until `stop` (or, with `once`, until each flow copied
/// up to the watermarks noted at its start).
pub async fn run(
    cfg: &Config,
    opts: ReplicateOptions,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Summary>, ReplicateError> {
    if cfg.replicate.is_empty() {
        return Err(ReplicateError::NoTasks);
    }
    let mut flows = Vec::new();
    for task in &cfg.replicate {
        let task = Arc::new(task.clone());
        let directions: &[bool] = match task.direction {
            Direction::Pull => &[false],
            Direction::Push => &[true],
            Direction::Both => &[false, true],
        };
        for &push in directions {
            let setup = setup::FlowSetup::prepare(
                task.clone(),
                &cfg.kafka,
                push,
                task.direction == Direction::Both,
                opts,
            )
            .await?;
            flows.push(Arc::new(setup));
        }
    }
    let mut handles = Vec::new();
    for setup in &flows {
        handles.push(tokio::spawn(control::run(
            setup.clone(),
            opts,
            stop.clone(),
        )));
    }
    let mut first_error = None;
    for h in handles {
        let r = match h.await {
            Ok(r) => r,
            Err(e) => Err(ReplicateError::Setup(format!(
                "a replication flow stopped unexpectedly: {e}"
            ))),
        };
        if let Err(e) = r {
            // One failing flow stops the others: a half-running task hides the failure.
            stop.store(true, Ordering::Relaxed);
            first_error.get_or_insert(e);
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    Ok(flows.iter().map(|s| s.summary()).collect())
}

/// Runs a call that waits on a cluster (metadata, a topic read) on a blocking thread: the
/// async threads carry other tasks' I/O meanwhile.
pub(crate) async fn off_thread<T, E>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, ReplicateError>
where
    T: Send + 'static,
    E: Into<ReplicateError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ReplicateError::Setup(format!("a call to a cluster failed to finish: {e}")))?
        .map_err(Into::into)
}
