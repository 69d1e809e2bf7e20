//! Every metric strata registers, with its kind and HELP text, in one table: `/metrics` and a
//! metrics file describe each one, and a test fails when code uses a `strata_` name the table
//! lacks.

use crate::tier::stats as tier;

/// How a metric is registered (the Prometheus TYPE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric: name, kind, unit when it has one, and the HELP text.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<metrics::Unit>,
    pub help: &'static str,
}

const fn m(name: &'static str, kind: Kind, help: &'static str) -> Metric {
    Metric {
        name,
        kind,
        unit: None,
        help,
    }
}

const fn seconds(name: &'static str, kind: Kind, help: &'static str) -> Metric {
    Metric {
        name,
        kind,
        unit: Some(metrics::Unit::Seconds),
        help,
    }
}

const fn bytes(name: &'static str, kind: Kind, help: &'static str) -> Metric {
    Metric {
        name,
        kind,
        unit: Some(metrics::Unit::Bytes),
        help,
    }
}

use Kind::{Counter, Gauge, Histogram};

pub const METRICS: &[Metric] = &[
    m(super::BUILD_INFO, Gauge, "Always 1; label version: the strata release running"),
    // dump
    m("strata_dump_records_consumed_total", Counter, "Records read from Kafka, including records read again after a rebalance, by task"),
    bytes("strata_dump_bytes_consumed_total", Counter, "Key and value bytes read from Kafka, by task"),
    m("strata_dump_records_written_total", Counter, "Records in stored objects, by task"),
    bytes("strata_dump_bytes_written_total", Counter, "Bytes of stored objects (after compression), by task"),
    m("strata_dump_objects_written_total", Counter, "Objects stored, by task"),
    m("strata_dump_objects_adopted_total", Counter, "Objects found already stored under their key (after a crash, or by another member) and adopted, by task"),
    seconds("strata_dump_upload_seconds", Histogram, "Time to store one object, by task"),
    m("strata_dump_errors_total", Counter, "Dump failures by task and kind: store (upload failed, the partition is read again), store_fatal (the task stopped), commit (offset commit failed, retried)"),
    bytes("strata_dump_buffered_bytes", Gauge, "Memory held by the task's open objects and parts in flight"),
    m("strata_dump_cdc_changes_total", Counter, "CDC tasks: changes written to tables (kind table) and left out as repeats (kind repeat)"),
    m("strata_dump_cdc_messages_total", Counter, "CDC tasks: messages kept whole, not CDC (kind malformed) or not rebuildable from rows (kind verbatim)"),
    m("strata_dump_retention_gap_records_total", Counter, "Records deleted by retention before they were archived, by task and topic"),
    seconds(super::LAST_SUCCESS, Gauge, "Unix time of the task's last successful dump --once run"),
    // dump to Iceberg tables
    m("strata_iceberg_commits_total", Counter, "Catalog commits of Iceberg tables (data files with their Kafka offsets), by task"),
    seconds("strata_iceberg_commit_seconds", Histogram, "Time of one Iceberg catalog commit, by task"),
    m("strata_consumer_lag", Gauge, "Records not yet archived (partition end minus committed offset), by task, topic and partition"),
    m("strata_memory_releases_total", Counter, "Times the process passed its memory budget and the allocator handed free pages back"),
    m("strata_http_rejected_total", Counter, "Connections a listener refused or closed, by listener and reason"),
    // replicate
    m("strata_replicate_records_total", Counter, "Records copied to the target, by task, flow and topic"),
    bytes("strata_replicate_bytes_total", Counter, "Key and value bytes copied to the target, by task, flow and topic"),
    seconds("strata_replicate_lag_seconds", Gauge, "Age of the last copied record, by task, flow, topic and partition"),
    m("strata_replicate_lag_records", Gauge, "Records of the source partition not yet copied, by task, flow, topic and partition"),
    seconds("strata_replicate_checkpoint_age_seconds", Gauge, "Time since the flow's last group offset checkpoint, by task and flow"),
    m("strata_replicate_errors_total", Counter, "Replicate failures by task, flow and kind (consume, start, transaction, offset_sync, ...)"),
    // tier
    bytes(tier::BYTES_COPIED, Counter, "Segment bytes (log and indexes) read from the broker's files and stored"),
    bytes(tier::BYTES_FETCHED, Counter, "Segment bytes served to the broker"),
    bytes(tier::BYTES_HANDED_OFF, Counter, "Of the bytes served, those the bridge read from cache files named in a handoff answer"),
    m(tier::CACHE_HITS, Counter, "Chunk reads answered by the chunk cache or by a load already running"),
    m(tier::CACHE_MISSES, Counter, "Chunk reads that had to fetch the chunk from the object store"),
    m(tier::PREFETCHES, Counter, "Chunk fetches started ahead of a sequential reader"),
    seconds(tier::STORE_SECONDS, Histogram, "Object store request latency by operation"),
    m(tier::ERRORS, Counter, "Failed bridge requests by operation"),
    m(tier::REJECTED, Counter, "Requests refused before any work, by op and reason: auth, content_type, too_large, slow_body, bad_request, busy"),
    m(tier::CLEANED, Counter, "Incomplete uploads (and staging files) a crash left behind, removed at start"),
];

/// Registers every HELP text with the installed recorder.
pub fn describe() {
    for d in METRICS {
        match (d.kind, d.unit) {
            (Kind::Counter, Some(u)) => metrics::describe_counter!(d.name, u, d.help),
            (Kind::Counter, None) => metrics::describe_counter!(d.name, d.help),
            (Kind::Gauge, Some(u)) => metrics::describe_gauge!(d.name, u, d.help),
            (Kind::Gauge, None) => metrics::describe_gauge!(d.name, d.help),
            (Kind::Histogram, Some(u)) => metrics::describe_histogram!(d.name, u, d.help),
            (Kind::Histogram, None) => metrics::describe_histogram!(d.name, d.help),
        }
    }
}

/// The `"strata_..."` string literals of a Rust source text: the metric names it uses.
#[cfg(test)]
fn names_in(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("\"strata_") {
        let tail = &rest[at + 1..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        if tail[end..].starts_with('"') {
            out.push(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn sources(dir: &std::path::Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path.display().to_string(), text));
            }
        }
    }

    #[test]
    fn names_are_found_in_source_text() {
        let text =
            r#"metrics::counter!("strata_a_total", "task" => t); let x = "strata_b"; "strata.not""#;
        assert_eq!(names_in(text), ["strata_a_total", "strata_b"]);
    }

    /// A metric used anywhere in src/ without a HELP text here fails this test.
    #[test]
    fn every_metric_in_the_code_has_help() {
        let mut files = Vec::new();
        sources(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut files,
        );
        let described: BTreeSet<&str> = METRICS.iter().map(|d| d.name).collect();
        let mut used = BTreeSet::new();
        for (path, text) in &files {
            if path.ends_with("catalog.rs") {
                continue;
            }
            for name in names_in(text) {
                assert!(
                    described.contains(name.as_str()),
                    "{path} uses metric {name}, which has no HELP text in telemetry/catalog.rs"
                );
                used.insert(name);
            }
        }
        assert!(used.len() > 20, "the scan found the metrics: {used:?}");
        for d in METRICS {
            assert!(!d.help.is_empty() && d.name.starts_with("strata_"));
            assert!(
                used.contains(d.name),
                "{} is described but no source names it",
                d.name
            );
        }
        assert_eq!(described.len(), METRICS.len(), "a name is listed twice");
    }
}
