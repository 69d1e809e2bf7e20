//! The TOML file as written, before validation. Every table keeps the keys it does not know in
//! `unknown`, so validation can report all of them at once (with a "did you mean").

use crate::size::RawSize;
use serde::Deserialize;
use std::collections::BTreeMap;

pub type Unknown = BTreeMap<String, toml::Value>;

#[derive(Debug, Default, Deserialize)]
pub struct RawConfig {
    pub kafka: Option<RawKafka>,
    pub store: Option<RawStore>,
    pub limits: Option<RawLimits>,
    pub telemetry: Option<RawTelemetry>,
    #[serde(default)]
    pub tasks: Vec<RawTask>,
    pub restore: Option<RawRestore>,
    pub tier: Option<RawTier>,
    #[serde(flatten)]
    pub unknown: Unknown,
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

#[derive(Debug, Default, Clone, Deserialize)]
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
    pub client_id: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, toml::Value>,
    #[serde(flatten)]
    pub unknown: Unknown,
}

#[derive(Debug, Default, Deserialize)]
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
    #[serde(flatten)]
    pub unknown: Unknown,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawLimits {
    pub max_tasks: Option<u32>,
    pub buffer_memory: Option<RawSize>,
    pub leftover_age_secs: Option<u64>,
    #[serde(flatten)]
    pub unknown: Unknown,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawTelemetry {
    pub log_format: Option<String>,
    pub log_level: Option<String>,
    pub metrics_listen: Option<String>,
    #[serde(flatten)]
    pub unknown: Unknown,
}

#[derive(Debug, Default, Deserialize)]
pub struct RawTask {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub name: Option<String>,
    pub topics: Option<Vec<String>>,
    pub topic_regex: Option<String>,
    pub start_offset: Option<String>,
    pub dump_interval_secs: Option<u64>,
    pub bucket: Option<String>,
    pub directory: Option<String>,
    pub time_directory: Option<String>,
    pub time_zone: Option<String>,
    pub time_source: Option<String>,
    pub record_delimiter: Option<String>,
    pub store_key: Option<bool>,
    pub key_separator: Option<String>,
    pub format: Option<String>,
    pub compression: Option<String>,
    pub max_file_size: Option<RawSize>,
    pub topic_refresh_secs: Option<u64>,
    pub allow_retention_gaps: Option<bool>,
    pub cdc: Option<RawCdc>,
    // Replicate tasks.
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
    #[serde(flatten)]
    pub unknown: Unknown,
}

/// `[tasks.cdc]`: a dump task's values are change-data-capture messages, archived as tables.
#[derive(Debug, Default, Deserialize)]
pub struct RawCdc {
    pub time_zone: Option<String>,
    pub repeat_window: Option<u64>,
    pub on_malformed: Option<String>,
    /// `[tasks.cdc.types."db.schema.table"]`: column name to type.
    pub types: Option<BTreeMap<String, BTreeMap<String, String>>>,
    #[serde(flatten)]
    pub unknown: Unknown,
}

/// `[tasks.peer]`: the other cluster of a replicate task.
#[derive(Debug, Default, Deserialize)]
pub struct RawPeer {
    pub alias: Option<String>,
    #[serde(flatten)]
    pub kafka: RawKafka,
}

#[derive(Debug, Default, Deserialize)]
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
    #[serde(flatten)]
    pub unknown: Unknown,
}

#[derive(Debug, Default, Deserialize)]
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
    #[serde(flatten)]
    pub unknown: Unknown,
}
