//! Dump tasks with `format = "iceberg"`: each topic becomes an Apache Iceberg table whose
//! snapshots carry the Kafka offsets they cover; a commit lands only where the table's offsets
//! are this writer's (so a zombie's fails), and a task resumes at the table's offsets. The
//! crate `iceberg` does metadata, manifests and catalogs; strata writes the data files.
//! docs/iceberg.md is the manual.

pub mod offsets;

#[cfg(feature = "iceberg")]
mod catalog;
#[cfg(feature = "iceberg")]
mod fence;
#[cfg(feature = "iceberg")]
mod pipeline;
#[cfg(feature = "iceberg")]
mod schema;
#[cfg(feature = "iceberg")]
mod sink;
#[cfg(feature = "iceberg")]
mod storage;

#[cfg(feature = "iceberg")]
pub use catalog::record_schema;
#[cfg(feature = "iceberg")]
pub(crate) use sink::run_task;

/// Why an Iceberg task stopped.
#[derive(Debug, Clone, thiserror::Error)]
pub enum IcebergError {
    #[error("the {catalog} catalog: {detail}; check [tasks.iceberg] (docs/iceberg.md)")]
    Catalog {
        catalog: &'static str,
        detail: String,
    },
    #[error("table {table}: {detail}")]
    Table { table: String, detail: String },
    #[error("table {table}: a commit was refused: {conflict}. Another member of the task's consumer group wrote the partition since this one took it (this member lost it without noticing: its data files were removed, nothing was committed), or another program changed the table's offsets. Restart the task: it resumes at the table's offsets")]
    Zombie {
        table: String,
        conflict: offsets::Conflict,
    },
    #[error("table {table} holds partition {partition} up to offset {at}, but the partition ends at {high}: the topic was deleted and created again, or its log was truncated. Check the topic; to archive what it holds now, give the task another namespace")]
    TableAhead {
        table: String,
        partition: i32,
        at: i64,
        high: i64,
    },
    #[error("topic {topic}: {at}")]
    Malformed {
        topic: String,
        at: crate::cdc::MalformedAt,
    },
    #[error("topic {topic}: encoding a data file failed: {detail}")]
    Encode { topic: String, detail: String },
    #[error("storing a data file: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("{path} is outside the task's store ({root}): strata writes Iceberg tables through the task's store only; set [tasks.iceberg] warehouse inside it, or let the catalog place tables there")]
    Outside { path: String, root: String },
    #[error("topics {0:?} and {1:?} would share the table {2}; dump them with separate tasks (another namespace)")]
    Clash(String, String, String),
}
