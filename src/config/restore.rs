//! `[restore]` as validated (flags applied): what to replay from where, into which cluster.

use super::{ByteSize, KafkaConfig, StoreConfig, TopicSelector};
use crate::format::TextOptions;
use crate::layout::{DumpDir, TimeDirFormat};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where restored records go when no explicit mapping names a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicNaming {
    pub map: BTreeMap<String, String>,
    pub prefix: String,
}

impl TopicNaming {
    pub fn target(&self, source: &str) -> String {
        self.map
            .get(source)
            .cloned()
            .unwrap_or_else(|| format!("{}{source}", self.prefix))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioning {
    /// The record's original partition when the target has it, else by key hash.
    Original,
    /// Always by key hash (murmur2, as Kafka's Java producer does).
    KeyHash,
}

/// The replication factor CreateTopics takes for "the broker's `default.replication.factor`".
pub const BROKER_DEFAULT_REPLICATION: i32 = -1;

/// A restore job: archives back into Kafka.
#[derive(Debug, Clone)]
pub struct RestoreConfig {
    pub store: StoreConfig,
    pub directory: DumpDir,
    /// The dump task's time layout when known (`restore.time_directory` or the task's):
    /// only used to skip directories outside the time range.
    pub time_directory: Option<TimeDirFormat>,
    pub time_zone: Tz,
    /// `None`: every topic found in the archive.
    pub topics: Option<TopicSelector>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
    pub naming: TopicNaming,
    pub partitioning: Partitioning,
    pub create_topics: bool,
    pub partitions: Option<i32>,
    /// Replicas of the topics restore creates (the `--exactly-once` progress topic included);
    /// `None`: the target broker's `default.replication.factor`.
    pub replication_factor: Option<i32>,
    pub rate_limit_bytes_per_sec: Option<f64>,
    pub checkpoint: Option<PathBuf>,
    pub skip_corrupt: bool,
    pub exactly_once: bool,
    pub text: TextOptions,
    pub kafka: KafkaConfig,
    /// `limits.buffer_memory`: archive objects held at once by their decoded size, and the
    /// most one object may decode to.
    pub memory_budget: ByteSize,
}

impl RestoreConfig {
    /// The replication factor to create topics with: the configured one, else the broker's
    /// default (as a production cluster's operator set it), never an unreplicated topic by
    /// accident.
    pub fn topic_replication(&self) -> i32 {
        self.replication_factor
            .unwrap_or(BROKER_DEFAULT_REPLICATION)
    }
}
