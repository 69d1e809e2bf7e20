//! One TOML file configures every mode. It is parsed once into typed, validated values; every
//! mistake is reported with the key it concerns and the fix, all at once. Secrets may come from
//! `${ENV}` variables and never leave [`Secret`] except into a client library.

mod overrides;
mod raw;
mod report;
mod s3_options;
mod secret;
mod validate;

pub use crate::cdc::{CdcOptions, OnMalformed};
pub use crate::size::ByteSize;
pub use overrides::RestoreOverrides;
pub use report::render_report;
pub use s3_options::{AssumeRole, CannedAcl, ObjectOptions, Sse, StorageClass};
pub use secret::{expand, ExpandError, Secret};

/// Topics that are never replicated: Kafka's and tools' internal topics (`__consumer_offsets`,
/// `__transaction_state`), MirrorMaker 2's and strata's bookkeeping (`*.internal`).
pub fn never_replicated(topic: &str) -> bool {
    topic.starts_with("__") || topic.ends_with("internal")
}

use crate::format::{FormatSpec, TextOptions};
use crate::layout::{DumpDir, TimeDirFormat};
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use std::collections::BTreeMap;
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
    pub const MAX_FILE_SIZE: ByteSize = ByteSize::mib(64);
    pub const TOPIC_REFRESH_SECS: u64 = 30;
    pub const TIME_DIRECTORY: &str = "yyyy/MM/dd";
    pub const KEY_SEPARATOR: &str = ":";
    pub const STORE_URL: &str = "file://./strata-archive";
    pub const BOOTSTRAP: &str = "127.0.0.1:9092";
    /// S3's smallest part: an open object holds up to a part in memory, and a task with many
    /// partitions open keeps one object open for each (4 GiB over 32 partitions to S3 peaked
    /// 50-60 MiB lower than with 8 MiB parts, bench/README.md).
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

/// How strata talks to Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sasl {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: Secret,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tls {
    pub ca_location: Option<PathBuf>,
    pub certificate_location: Option<PathBuf>,
    pub key_location: Option<PathBuf>,
    pub key_password: Option<Secret>,
}

/// A Kafka cluster and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    pub bootstrap_servers: Vec<String>,
    pub security_protocol: SecurityProtocol,
    pub sasl: Option<Sasl>,
    pub tls: Tls,
    pub client_id: String,
    /// Extra librdkafka properties; values are treated as secret in reports.
    pub properties: BTreeMap<String, String>,
}

/// Where archives go: an S3 bucket (with a key prefix) or a local directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    S3 { bucket: String, prefix: String },
    File { root: PathBuf },
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            StoreUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            StoreUrl::File { root } => write!(f, "file://{}", root.display()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    Static {
        access_key: Secret,
        secret_key: Secret,
        /// `store.session_token`: the keys are temporary ones (`ASIA...`).
        session_token: Option<Secret>,
    },
    /// Environment, profile, web identity, instance metadata: the AWS default chain.
    DefaultChain,
}

/// S3 connection settings, shared by every bucket strata touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    /// `store.region`; `None`: from the AWS environment (see [`S3Region`]).
    pub region: Option<String>,
    pub endpoint: Option<String>,
    pub path_style: bool,
    pub credentials: Credentials,
    /// Assumed through STS with `credentials`.
    pub role: Option<AssumeRole>,
    /// What every object written carries.
    pub objects: ObjectOptions,
    pub create_bucket: bool,
    pub part_size: ByteSize,
    pub max_attempts: u32,
}

/// The region S3 requests are signed for, and where it came from. The store finds it (it
/// reads the environment, the AWS config files and the instance metadata service) when
/// `store.region` is not set; `strata validate` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Region {
    pub name: String,
    pub source: RegionSource,
}

/// Where an [`S3Region`] came from, in the order they are looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionSource {
    /// `store.region`.
    Config,
    /// `AWS_REGION` or `AWS_DEFAULT_REGION`.
    Env(&'static str),
    /// A profile of the AWS config files (`AWS_PROFILE`, else `default`).
    Profile(String),
    /// The EC2 instance metadata service (not asked with a custom `store.endpoint`).
    InstanceMetadata,
    /// Nothing named one and `store.endpoint` is set: `us-east-1`, which S3-compatible stores
    /// take whatever their own region.
    EndpointDefault,
}

impl fmt::Display for S3Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (", self.name)?;
        match &self.source {
            RegionSource::Config => f.write_str("store.region"),
            RegionSource::Env(var) => write!(f, "from {var}"),
            RegionSource::Profile(p) => write!(f, "from profile {p:?} of the AWS config files"),
            RegionSource::InstanceMetadata => f.write_str("from the EC2 instance metadata"),
            RegionSource::EndpointDefault => {
                f.write_str("default for a custom endpoint: none set anywhere")
            }
        }?;
        f.write_str(")")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    pub url: StoreUrl,
    pub s3: S3Settings,
}

impl StoreConfig {
    /// The same store with another bucket (a task's `bucket` override).
    pub fn with_bucket(&self, bucket: &str) -> Self {
        let mut c = self.clone();
        if let StoreUrl::S3 { prefix, .. } = &self.url {
            c.url = StoreUrl::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.clone(),
            };
        }
        c
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

/// A task name: 4-64 ASCII letters, digits, `-` or `_`. It also names the consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskName(String);

impl TaskName {
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok_len = (4..=64).contains(&s.len());
        let ok_chars = s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if ok_len && ok_chars {
            Ok(Self(s.to_string()))
        } else {
            Err(format!(
                "{s:?} must be 4-64 characters of letters, digits, '-' or '_'"
            ))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
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

/// Which topics a task reads.
#[derive(Debug, Clone)]
pub enum TopicSelector {
    List(Vec<String>),
    /// Matched against whole topic names; internal topics (`__...`) never match.
    Regex(regex::Regex),
}

impl TopicSelector {
    pub fn matches(&self, topic: &str) -> bool {
        match self {
            TopicSelector::List(l) => l.iter().any(|t| t == topic),
            TopicSelector::Regex(r) => !topic.starts_with("__") && r.is_match(topic),
        }
    }
}

impl PartialEq for TopicSelector {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::List(a), Self::List(b)) => a == b,
            (Self::Regex(a), Self::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl fmt::Display for TopicSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicSelector::List(l) => write!(f, "[{}]", l.join(", ")),
            // Shown as the user wrote it, without the anchors validation added.
            TopicSelector::Regex(r) => {
                let p = r.as_str();
                let inner = p
                    .strip_prefix("^(?:")
                    .and_then(|x| x.strip_suffix(")$"))
                    .unwrap_or(p);
                write!(f, "/{inner}/")
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOffset {
    Earliest,
    Latest,
}

impl StartOffset {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Earliest => "earliest",
            Self::Latest => "latest",
        }
    }
}

/// Which clock places a record in a time directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSource {
    /// The record's Kafka timestamp: a replay lands in the same directory (exactly once).
    Record,
    /// The wall clock when the record is dumped: a replay may land elsewhere (at least once).
    Dump,
}

impl TimeSource {
    /// The config value (`time_source = "record"`).
    pub fn as_str(self) -> &'static str {
        match self {
            TimeSource::Record => "record",
            TimeSource::Dump => "dump",
        }
    }
}

/// One dump task: topics into time-partitioned archive objects.
#[derive(Debug, Clone)]
pub struct DumpTask {
    pub name: TaskName,
    pub topics: TopicSelector,
    pub start_offset: StartOffset,
    pub interval: Duration,
    pub store: StoreConfig,
    pub directory: DumpDir,
    pub time_directory: TimeDirFormat,
    pub time_zone: Tz,
    pub time_source: TimeSource,
    pub format: FormatSpec,
    pub max_file_size: ByteSize,
    pub topic_refresh: Duration,
    /// `--once` exits 0 even when retention deleted records before they were archived (the
    /// gaps are still recorded and logged); otherwise such a run exits 4.
    pub allow_retention_gaps: bool,
    /// `[tasks.cdc]`: values are change-data-capture messages, archived as one table per
    /// source table.
    pub cdc: Option<CdcOptions>,
}

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

/// The tier service: the broker bridge's storage backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierConfig {
    pub listen: SocketAddr,
    pub prefix: DumpDir,
    pub chunk_size: ByteSize,
    pub compress_chunks: bool,
    /// `None`: chunks are cached in memory.
    pub cache_dir: Option<PathBuf>,
    pub cache_size: ByteSize,
    pub prefetch_chunks: u32,
    pub upload_concurrency: u32,
    /// The secret shared with the bridge; required to serve (checked when `strata tier` starts).
    pub secret_file: Option<PathBuf>,
    /// The broker's log dirs: copies by path read only inside them. Empty: copies by path are
    /// refused (the bridge uploads the bytes instead).
    pub log_dirs: Vec<PathBuf>,
    /// Private directory of the Unix socket (`tier.sock`); `None`: TCP only.
    pub socket_dir: Option<PathBuf>,
    /// `tier.handoff`: warm fetches over the Unix socket answered with cache files for the
    /// bridge to read (see `docs/tier.md`); off, every byte crosses the socket.
    pub handoff: bool,
    /// TLS on the TCP listener (required for a non-loopback `listen`).
    pub tls: Option<TierTls>,
    /// Fetch, fetch-index, delete and health requests served at once; more get 503.
    pub max_requests: u32,
}

/// PEM files of the tier listener's certificate chain and private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierTls {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
}

#[cfg(test)]
mod tests;
