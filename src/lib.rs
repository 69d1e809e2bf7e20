//! strata moves Apache Kafka data into object storage and back.
//!
//! Four modes share these rooms: `dump` (topics into time-partitioned archives), `restore`
//! (archives back into topics), `replicate` (topics from one cluster into another) and `tier`
//! (the storage companion of brokers' tiered storage); `iceberg` turns a dump task's output into
//! Apache Iceberg tables. `kafka::source` is the one consumer
//! loop under dump and replicate.

pub mod archive;
pub mod cdc;
pub mod clidoc;
pub mod config;
pub mod dump;
pub mod fatal;
pub mod format;
pub mod iceberg;
pub mod io;
pub mod kafka;
pub mod layout;
pub mod listen;
pub mod memory;
pub mod replicate;
pub mod restore;
pub mod size;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod throttle;
pub mod tier;
