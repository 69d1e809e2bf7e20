//! A `type = "replicate"` task as validated: which topics go between which clusters, how.

use super::{KafkaConfig, StartOffset, TaskName, TopicSelector};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Topics that are never replicated: Kafka's and tools' internal topics (`__consumer_offsets`,
/// `__transaction_state`), MirrorMaker 2's and strata's bookkeeping (`*.internal`).
pub fn never_replicated(topic: &str) -> bool {
    topic.starts_with("__") || topic.ends_with("internal")
}

/// A cluster's name in a replication task: 1-20 of letters, digits, `-`, `_`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Alias(String);

impl Alias {
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok = (1..=20).contains(&s.len())
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if ok {
            Ok(Self(s.to_string()))
        } else {
            Err(format!(
                "{s:?} must be 1-20 characters of letters, digits, '-' or '_'"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Alias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which way a replication task copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Peer to local.
    Pull,
    /// Local to peer.
    Push,
    Both,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Pull => "pull",
            Direction::Push => "push",
            Direction::Both => "both",
        }
    }
}

/// What a replicated topic is called on the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetNaming {
    /// The same name.
    Identity,
    /// `<source alias>.<topic>` (MirrorMaker 2's DefaultReplicationPolicy).
    Rename,
    /// Explicit names; topics not in the map keep theirs.
    Map(BTreeMap<String, String>),
}

/// The codec of the batches a replication task produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProduceCompression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl ProduceCompression {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Snappy => "snappy",
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }
}

/// Consumer group offset sync of a replication task.
#[derive(Debug, Clone)]
pub struct GroupSync {
    pub interval: Duration,
    /// Source groups whose offsets are translated (strata's own never are).
    pub groups: regex::Regex,
}

/// A Kafka-to-Kafka replication task (MirrorMaker 2's model).
#[derive(Debug, Clone)]
pub struct ReplicateTask {
    pub name: TaskName,
    pub direction: Direction,
    pub local_alias: Alias,
    pub peer_alias: Alias,
    pub peer: KafkaConfig,
    pub topics: TopicSelector,
    /// Consumer/producer pipelines per direction in this process.
    pub pipelines: u32,
    pub naming: TargetNaming,
    pub source_header: bool,
    /// Replicas of created target topics; `None`: the target broker's default.
    pub replication_factor: Option<i32>,
    pub start_offset: StartOffset,
    pub compression: ProduceCompression,
    pub exactly_once: bool,
    pub group_sync: Option<GroupSync>,
    pub topic_refresh: Duration,
}
