//! One TOML file configures every mode. It is parsed once into typed, validated values; every
//! mistake is reported with the key it concerns and the fix, all at once. Secrets may come from
//! `${ENV}` variables and never leave [`Secret`] except into a client library.
//!
//! `raw` is the file as written (one struct per table, each task type its own); `validate/`
//! turns it into the typed values, which live in one file per section or mode (`kafka`,
//! `store`, `task` for what task types share, `dump`, `replicate`, `restore`, `tier`).

mod dump;
mod kafka;
mod overrides;
mod raw;
mod replicate;
mod report;
mod restore;
mod s3_options;
mod secret;
mod store;
mod task;
mod tier;
mod validate;

pub use crate::cdc::{CdcOptions, OnMalformed};
pub use crate::size::ByteSize;
pub use dump::{DumpTask, IcebergCatalog, IcebergOptions, StateMode, StateSettings, TimeSource};
pub use kafka::{
    ClientKind, KafkaConfig, MskIam, OAuthClient, Sasl, SaslMechanism, SecurityProtocol, Tls,
};
pub use overrides::RestoreOverrides;
pub use replicate::{
    never_replicated, Alias, Direction, GroupSync, ProduceCompression, ReplicateTask, TargetNaming,
};
pub use report::render_report;
pub use restore::{Partitioning, RestoreConfig, TopicNaming, BROKER_DEFAULT_REPLICATION};
pub use s3_options::{AssumeRole, CannedAcl, ObjectOptions, Sse, StorageClass};
pub use secret::{expand, ExpandError, Secret};
pub use store::{Credentials, RegionSource, S3Region, S3Settings, StoreConfig, StoreUrl};
pub use task::{StartOffset, TaskName, TaskTopics, TopicSelector};
pub use tier::{TierConfig, TierTls};

use crate::layout::DumpDir;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Defaults users can see in the docs and in `strata validate`.
pub mod defaults {
    use super::ByteSize;
    pub const MAX_TASKS: u32 = 18;
    pub const MAX_TOPICS: usize = 20;
    pub const BUFFER_MEMORY: ByteSize = ByteSize::mib(256);
    pub const LEFTOVER_AGE_SECS: u64 = 3600;
    pub const DUMP_INTERVAL_SECS: u64 = 300;
    /// Between two cluster state snapshots of a continuous dump.
    pub const STATE_INTERVAL_SECS: u64 = 300;
    pub const MAX_FILE_SIZE: ByteSize = ByteSize::mib(64);
    pub const TOPIC_REFRESH_SECS: u64 = 30;
    pub const TIME_DIRECTORY: &str = "yyyy/MM/dd";
    pub const KEY_SEPARATOR: &str = ":";
    pub const STORE_URL: &str = "file://./strata-archive";
    pub const BOOTSTRAP: &str = "127.0.0.1:9092";
    /// S3's smallest part: an open object holds up to a part in memory, and a task with many
    /// partitions open keeps one object open for each (8 MiB parts peaked higher for the same
    /// CPU: bench/README.md, "Memory with every default").
    pub const PART_SIZE: ByteSize = ByteSize::mib(5);
    pub const MAX_ATTEMPTS: u32 = 5;
    pub const TIER_LISTEN: &str = "127.0.0.1:9190";
    pub const TIER_PREFIX: &str = "tiered";
    pub const CHUNK_SIZE: ByteSize = ByteSize::mib(4);
    pub const CACHE_SIZE: ByteSize = ByteSize::mib(512);
    pub const PREFETCH_CHUNKS: u32 = 2;
    pub const UPLOAD_CONCURRENCY: u32 = 4;
    pub const MAX_REQUESTS: u32 = 64;
}

/// A whole validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub store: StoreConfig,
    pub limits: Limits,
    pub telemetry: TelemetryConfig,
    pub tasks: Vec<DumpTask>,
    pub replicate: Vec<ReplicateTask>,
    pub restore: Option<RestoreConfig>,
    pub tier: TierConfig,
}

/// Everything that can go wrong loading a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}; check the path given to --config")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Syntax { path: String, message: String },
    #[error("{path} has {} problem{}:\n{}", issues.len(), if issues.len() == 1 { "" } else { "s" }, render_issues(issues))]
    Invalid { path: String, issues: Vec<Issue> },
}

/// One problem with one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub key: String,
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

fn render_issues(issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("  - {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}

impl Config {
    /// Reads and validates a file; `${VAR}` come from the process environment.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml(&text, &path.display().to_string(), |k| {
            std::env::var(k).ok()
        })
    }

    /// Validates TOML text; `origin` names it in errors, `env` resolves `${VAR}`.
    pub fn from_toml(
        text: &str,
        origin: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let raw = validate::parse(text, origin)?;
        validate::validate(raw, &env).map_err(|issues| ConfigError::Invalid {
            path: origin.to_string(),
            issues,
        })
    }

    /// Whether any store of this file is S3 (`[store]`, a task's, the restore's): they share
    /// `[store]`'s S3 settings, region included.
    pub fn uses_s3(&self) -> bool {
        let s3 = |s: &StoreConfig| matches!(s.url, StoreUrl::S3 { .. });
        s3(&self.store)
            || self.tasks.iter().any(|t| s3(&t.store))
            || self.restore.as_ref().is_some_and(|r| s3(&r.store))
    }

    /// The configuration used when no file is given: local Kafka, `file://` archive.
    pub fn embedded_default() -> Self {
        match Self::from_toml("", "<embedded default>", |_| None) {
            Ok(c) => c,
            Err(e) => unreachable!("the empty config is valid: {e}"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub max_tasks: u32,
    pub buffer_memory: ByteSize,
    /// Incomplete uploads (and `file://` temp files) older than a task's dump interval plus
    /// this are a crash's leftovers: removed when the task starts.
    pub leftover_age: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    pub log_format: LogFormat,
    pub log_level: String,
    pub metrics_listen: Option<SocketAddr>,
}

#[cfg(test)]
mod tests;
