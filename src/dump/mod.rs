//! Dump mode: every task of the file reads its topics and writes time-partitioned archive
//! objects, exactly once (an offset is committed only after its object is stored).
//!
//! Each task runs on its own thread with its own consumer group; the buffer budget is shared
//! out evenly between tasks. Several processes with the same file share the partitions.

mod consumer;
pub mod roll;
mod staging;
mod worker;

use crate::config::Config;
use crate::kafka::KafkaError;
use crate::store::StoreError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What a finished task did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    pub task: String,
    pub objects: u64,
    pub records: u64,
    pub bytes: u64,
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
    #[error("task {task}: no partition of {topics} was assigned within a minute; check that the topics exist and that no other member of consumer group \"{task}\" holds them")]
    NoAssignment { task: String, topics: String },
    #[error("task {task}: no topic to read: {topics} matched nothing in the cluster; check the topic names or topic_regex")]
    NoTopics { task: String, topics: String },
    #[error("task {task}: {records} records could not be stored before shutdown; their offsets were not committed, so the next run reads them again")]
    Unflushed { task: String, records: u64 },
    #[error("task {task}: worker stopped unexpectedly: {detail}")]
    Worker { task: String, detail: String },
}

/// Options of one `strata dump` run.
#[derive(Debug, Clone, Copy, Default)]
pub struct DumpOptions {
    /// Read up to the high watermarks noted at start, store, commit and return.
    pub once: bool,
}

/// Runs every task until `stop` is set (or, with `once`, until each reached its end).
pub async fn run(
    cfg: &Config,
    opts: DumpOptions,
    stop: Arc<AtomicBool>,
) -> Result<Vec<Summary>, DumpError> {
    if cfg.tasks.is_empty() {
        return Err(DumpError::NoTasks);
    }
    // Fail fast, before consuming anything, on what an operator must fix.
    let mut stores = Vec::new();
    for task in &cfg.tasks {
        let err = |source| DumpError::Store {
            task: task.name.to_string(),
            source,
        };
        let store = crate::store::open(&task.store).await.map_err(err)?;
        store.check().await.map_err(err)?;
        stores.push(store);
    }
    let kafka = cfg.kafka.clone();
    tokio::task::spawn_blocking(move || crate::kafka::Admin::new(&kafka)?.list_topics())
        .await
        .map_err(|e| DumpError::Worker {
            task: "startup".into(),
            detail: e.to_string(),
        })??;

    let memory = (cfg.limits.buffer_memory.bytes() as usize) / cfg.tasks.len();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let rt = tokio::runtime::Handle::current();
    for (task, store) in cfg.tasks.iter().cloned().zip(stores) {
        let (tx, rt, task_stop, kafka) = (tx.clone(), rt.clone(), stop.clone(), cfg.kafka.clone());
        let name = task.name.to_string();
        let spawned = std::thread::Builder::new()
            .name(format!("dump-{name}"))
            .spawn(move || {
                let result =
                    worker::Worker::new(&kafka, task, store, rt, memory, opts.once, task_stop)
                        .and_then(worker::Worker::run);
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
    while let Some((task, result)) = rx.recv().await {
        match result {
            Ok(s) => summaries.push(s),
            Err(e) => {
                tracing::error!(%task, error = %e, "task failed; stopping the other tasks");
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
