//! A dump task as validated: which topics go into which archive objects, in which format (the
//! CDC options live with the CDC tables, `crate::cdc`).

use super::{ByteSize, CdcOptions, Secret, StartOffset, StoreConfig, TaskName, TaskTopics};
use crate::format::FormatSpec;
use crate::layout::{DumpDir, TimeDirFormat};
use chrono_tz::Tz;
use std::time::Duration;

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

/// Whether a task's cluster state snapshots matter to the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateMode {
    /// Taken; what cannot be read is named in a warning (the default).
    BestEffort,
    /// Taken; a snapshot that cannot be taken whole fails the task.
    Required,
    /// Not taken.
    Off,
}

impl StateMode {
    pub fn as_str(self) -> &'static str {
        match self {
            StateMode::BestEffort => "best_effort",
            StateMode::Required => "required",
            StateMode::Off => "off",
        }
    }
}

/// A dump task's cluster state snapshots (`crate::state`).
#[derive(Debug, Clone)]
pub struct StateSettings {
    pub mode: StateMode,
    /// Between snapshots of a continuous dump.
    pub interval: Duration,
    /// The groups whose committed offsets are recorded (`None`: every group but strata's own).
    pub groups: Option<regex::Regex>,
}

/// One dump task: topics into time-partitioned archive objects.
#[derive(Debug, Clone)]
pub struct DumpTask {
    pub name: TaskName,
    pub topics: TaskTopics,
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
    /// The cluster state snapshots the task stores beside its archive.
    pub state: StateSettings,
    /// `[tasks.cdc]`: values are change-data-capture messages, archived as one table per
    /// source table.
    pub cdc: Option<CdcOptions>,
    /// `format = "iceberg"` (`[tasks.iceberg]`): the data files (Parquet, `format`'s codec) are
    /// committed to one Iceberg table per topic, together with the offsets they cover.
    pub iceberg: Option<IcebergOptions>,
}

/// Where an Iceberg task's tables live and which catalog commits them (docs/iceberg.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcebergOptions {
    pub catalog: IcebergCatalog,
    /// The catalog's name. The SQL catalog stores it in every row: readers of the same SQLite
    /// file must use the same name to see the tables.
    pub catalog_name: String,
    /// Where new tables go (`file:///...` or `s3://bucket/...`), inside the task's store;
    /// `None`: the task's store and directory.
    pub warehouse: Option<String>,
    /// The namespace (database) of the task's tables.
    pub namespace: String,
}

/// The catalog an Iceberg task commits through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IcebergCatalog {
    /// Embedded: the SQL catalog on a local SQLite file; no server. A commit is a
    /// compare-and-swap of the table's metadata location in that file.
    Sql { file: std::path::PathBuf },
    /// An Iceberg REST catalog (Polaris, Nessie, Lakekeeper, Unity, ...).
    Rest {
        uri: String,
        /// A bearer token sent with every request.
        token: Option<Secret>,
        /// OAuth2 client credentials (`client_id:client_secret`) exchanged for a token.
        credential: Option<Secret>,
    },
    /// AWS Glue (cargo feature `iceberg-glue`; not tested by strata's suite).
    Glue,
}

impl IcebergCatalog {
    pub fn as_str(&self) -> &'static str {
        match self {
            IcebergCatalog::Sql { .. } => "sql",
            IcebergCatalog::Rest { .. } => "rest",
            IcebergCatalog::Glue => "glue",
        }
    }
}
