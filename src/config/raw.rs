//! The TOML file as written, before validation. Every table is one struct declared with
//! [`raw_table!`]: its fields are its keys (the one place a key is declared), the keys it does
//! not know land in `unknown`, so validation reports all of them at once with a "did you mean".

use crate::size::RawSize;
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

pub type Unknown = BTreeMap<String, toml::Value>;

/// Declares a raw table: the struct, with `unknown` for the keys it does not know, and `KEYS`,
/// the keys it knows (its field names), for unknown-key errors and their "did you mean".
/// A field's name is its key: never rename one with `#[serde(rename)]`.
macro_rules! raw_table {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $( $(#[$fattr:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$attr])*
        #[derive(Debug, Default, Deserialize)]
        pub struct $name {
            $( $(#[$fattr])* pub $field: $ty, )*
            /// Keys this table does not know.
            #[serde(flatten)]
            pub unknown: Unknown,
        }

        impl $name {
            /// The keys of this table, as the file writes them.
            pub const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];
        }
    };
}

raw_table! {
    pub struct RawConfig {
        pub kafka: Option<RawKafka>,
        pub store: Option<RawStore>,
        pub limits: Option<RawLimits>,
        pub telemetry: Option<RawTelemetry>,
        /// Read by [`tasks`], each entry by its `type`, after the rest of the file.
        #[serde(skip)]
        pub tasks: Vec<RawTask>,
        pub restore: Option<RawRestore>,
        pub tier: Option<RawTier>,
    }
}

/// A list written as a TOML array or as one comma-separated string.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum StringList {
    One(String),
    Many(Vec<String>),
}

impl StringList {
    pub fn items(&self) -> Vec<String> {
        match self {
            StringList::One(s) => s
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect(),
            StringList::Many(v) => v.clone(),
        }
    }
}

raw_table! {
    /// `[kafka]`, `[restore.kafka]` and (beside `alias`) `[tasks.peer]`.
    #[derive(Clone)]
    pub struct RawKafka {
        pub bootstrap_servers: Option<StringList>,
        pub security_protocol: Option<String>,
        pub sasl_mechanism: Option<String>,
        pub username: Option<String>,
        pub password: Option<String>,
        pub ssl_ca_location: Option<String>,
        pub ssl_certificate_location: Option<String>,
        pub ssl_key_location: Option<String>,
        pub ssl_key_password: Option<String>,
        pub oauth_token_endpoint: Option<String>,
        pub oauth_client_id: Option<String>,
        pub oauth_client_secret: Option<String>,
        pub oauth_scope: Option<String>,
        /// `oauth_extensions = { logicalCluster = "lkc-1" }` or `[kafka.oauth_extensions]`.
        pub oauth_extensions: Option<BTreeMap<String, String>>,
        pub aws_region: Option<String>,
        pub aws_role_arn: Option<String>,
        pub client_id: Option<String>,
        #[serde(default)]
        pub properties: BTreeMap<String, toml::Value>,
    }
}

raw_table! {
    pub struct RawStore {
        pub url: Option<String>,
        pub region: Option<String>,
        pub endpoint: Option<String>,
        pub path_style: Option<bool>,
        pub access_key: Option<String>,
        pub secret_key: Option<String>,
        pub create_bucket: Option<bool>,
        pub part_size: Option<RawSize>,
        pub max_attempts: Option<u32>,
        pub session_token: Option<String>,
        pub role_arn: Option<String>,
        pub external_id: Option<String>,
        pub role_session_name: Option<String>,
        pub sts_endpoint: Option<String>,
        pub sse: Option<String>,
        pub sse_kms_key_id: Option<String>,
        pub storage_class: Option<String>,
        /// `tags = { team = "data" }` or `[store.tags]`.
        pub tags: Option<BTreeMap<String, String>>,
        pub acl: Option<String>,
    }
}

raw_table! {
    pub struct RawLimits {
        pub max_tasks: Option<u32>,
        pub buffer_memory: Option<RawSize>,
        pub leftover_age_secs: Option<u64>,
    }
}

raw_table! {
    pub struct RawTelemetry {
        pub log_format: Option<String>,
        pub log_level: Option<String>,
        pub metrics_listen: Option<String>,
    }
}

/// A `[[tasks]]` entry, by its `type` (absent: dump). Each type's struct holds all of its keys;
/// `type` itself is read first and is in none of them.
// Read once per file: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum RawTask {
    Dump(RawDumpTask),
    Replicate(RawReplicateTask),
    /// A `type` strata does not know; the entry's other keys are not looked at.
    Other(String),
}

/// The task types: their `type` value and keys. Adding a type starts here.
pub const TASK_TYPES: &[(&str, &[&str])] = &[
    ("dump", RawDumpTask::KEYS),
    ("replicate", RawReplicateTask::KEYS),
];

impl RawTask {
    /// The `type` this entry has (or stands for).
    pub fn kind(&self) -> &str {
        match self {
            RawTask::Dump(_) => "dump",
            RawTask::Replicate(_) => "replicate",
            RawTask::Other(kind) => kind,
        }
    }

    pub fn as_dump(&self) -> Option<&RawDumpTask> {
        match self {
            RawTask::Dump(t) => Some(t),
            _ => None,
        }
    }
}

raw_table! {
    /// `[[tasks]]` with no `type` or `type = "dump"`: topics into archive objects.
    pub struct RawDumpTask {
        pub name: Option<String>,
        pub topics: Option<Vec<String>>,
        pub topic_regex: Option<String>,
        pub exclude_topics: Option<Vec<String>>,
        pub start_offset: Option<String>,
        pub topic_refresh_secs: Option<u64>,
        pub dump_interval_secs: Option<u64>,
        pub bucket: Option<String>,
        pub directory: Option<String>,
        pub time_directory: Option<String>,
        pub time_zone: Option<String>,
        pub time_source: Option<String>,
        pub format: Option<String>,
        pub compression: Option<String>,
        pub record_delimiter: Option<String>,
        pub store_key: Option<bool>,
        pub key_separator: Option<String>,
        pub max_file_size: Option<RawSize>,
        pub allow_retention_gaps: Option<bool>,
        pub state: Option<String>,
        pub state_interval_secs: Option<u64>,
        pub groups_regex: Option<String>,
        pub cdc: Option<RawCdc>,
        pub iceberg: Option<RawIceberg>,
    }
}

raw_table! {
    /// `[tasks.iceberg]`: a dump task with `format = "iceberg"` commits to Iceberg tables.
    pub struct RawIceberg {
        pub catalog: Option<String>,
        pub catalog_name: Option<String>,
        pub catalog_file: Option<String>,
        pub uri: Option<String>,
        pub token: Option<String>,
        pub credential: Option<String>,
        pub warehouse: Option<String>,
        pub namespace: Option<String>,
    }
}

raw_table! {
    /// `[tasks.cdc]`: a dump task's values are change-data-capture messages, archived as tables.
    pub struct RawCdc {
        pub time_zone: Option<String>,
        pub repeat_window: Option<u64>,
        pub on_malformed: Option<String>,
        /// `[tasks.cdc.types."db.schema.table"]`: column name to type.
        pub types: Option<BTreeMap<String, BTreeMap<String, String>>>,
    }
}

raw_table! {
    /// `[[tasks]]` with `type = "replicate"`: topics from one Kafka cluster to another.
    pub struct RawReplicateTask {
        pub name: Option<String>,
        pub topics: Option<Vec<String>>,
        pub topic_regex: Option<String>,
        pub exclude_topics: Option<Vec<String>>,
        pub start_offset: Option<String>,
        pub topic_refresh_secs: Option<u64>,
        pub compression: Option<String>,
        pub direction: Option<String>,
        pub local_alias: Option<String>,
        pub tasks: Option<u32>,
        pub rename_topics: Option<bool>,
        pub topic_map: Option<BTreeMap<String, String>>,
        pub source_header: Option<bool>,
        pub replication_factor: Option<i32>,
        pub exactly_once: Option<bool>,
        pub sync_group_offsets: Option<bool>,
        pub sync_group_offsets_interval_secs: Option<u64>,
        pub groups_regex: Option<String>,
        pub peer: Option<RawPeer>,
    }
}

/// `[tasks.peer]`: the other cluster of a replicate task, `alias` beside the keys of `[kafka]`.
#[derive(Debug, Default, Deserialize)]
pub struct RawPeer {
    pub alias: Option<String>,
    #[serde(flatten)]
    pub kafka: RawKafka,
}

impl RawPeer {
    pub const KEYS: &'static [&'static str] = &["alias"];
}

raw_table! {
    pub struct RawRestore {
        pub bucket: Option<String>,
        pub directory: Option<String>,
        pub time_directory: Option<String>,
        pub time_zone: Option<String>,
        pub topics: Option<Vec<String>>,
        pub topic_regex: Option<String>,
        pub from: Option<String>,
        pub to: Option<String>,
        pub target_prefix: Option<String>,
        #[serde(default)]
        pub topic_map: BTreeMap<String, String>,
        pub partitioning: Option<String>,
        pub create_topics: Option<bool>,
        pub partitions: Option<i32>,
        pub replication_factor: Option<i32>,
        pub rate_limit_mib_per_sec: Option<f64>,
        pub checkpoint: Option<String>,
        pub skip_corrupt: Option<bool>,
        pub exactly_once: Option<bool>,
        pub record_delimiter: Option<String>,
        pub store_key: Option<bool>,
        pub key_separator: Option<String>,
        pub kafka: Option<RawKafka>,
    }
}

raw_table! {
    pub struct RawTier {
        pub listen: Option<String>,
        pub prefix: Option<String>,
        pub chunk_size: Option<RawSize>,
        pub compression: Option<String>,
        pub cache_dir: Option<String>,
        pub cache_size: Option<RawSize>,
        pub prefetch_chunks: Option<u32>,
        pub upload_concurrency: Option<u32>,
        pub secret_file: Option<String>,
        pub log_dirs: Option<StringList>,
        pub socket_dir: Option<String>,
        pub handoff: Option<bool>,
        pub tls_cert_file: Option<String>,
        pub tls_key_file: Option<String>,
        pub max_requests: Option<u32>,
    }
}

/// Parses TOML text into the raw tables. Syntax and type errors keep their place in the text:
/// the tasks are read from the parsed document, each by its `type`, not from a copy.
pub fn parse(text: &str) -> Result<RawConfig, toml::de::Error> {
    let mut doc = DeTable::parse(text)?;
    let tasks = doc.get_mut().remove("tasks");
    let mut raw = RawConfig::deserialize(toml::de::Deserializer::from(doc))?;
    if let Some(list) = tasks {
        raw.tasks = self::tasks(list)?;
    }
    Ok(raw)
}

/// `[[tasks]]`: every entry by its `type`.
fn tasks(list: Spanned<DeValue<'_>>) -> Result<Vec<RawTask>, toml::de::Error> {
    let span = list.span();
    match list.into_inner() {
        DeValue::Array(items) => items.into_iter().map(task).collect(),
        // Not a list of tables: serde says what it is and where.
        other => {
            Vec::<TaskType>::deserialize(ValueDeserializer::from(Spanned::new(span, other)))?;
            Ok(Vec::new())
        }
    }
}

/// Only a task's `type`, read before the rest, which depends on it.
#[derive(Deserialize)]
struct TaskType {
    #[serde(rename = "type")]
    kind: Option<String>,
}

fn task(mut entry: Spanned<DeValue<'_>>) -> Result<RawTask, toml::de::Error> {
    let head = TaskType::deserialize(ValueDeserializer::from(entry.clone()))?;
    if let DeValue::Table(table) = entry.get_mut() {
        table.remove("type");
    }
    let de = ValueDeserializer::from(entry);
    Ok(match head.kind.as_deref() {
        None | Some("dump") => RawTask::Dump(RawDumpTask::deserialize(de)?),
        Some("replicate") => RawTask::Replicate(RawReplicateTask::deserialize(de)?),
        Some(other) => RawTask::Other(other.to_string()),
    })
}
