//! Exactly-once restores: each object is one Kafka transaction that also writes a marker
//! record ("object X of restore F is done") to a small compacted progress topic on the target
//! cluster. Marker and records become visible together or not at all, so on resume the
//! markers (read with `read_committed`) say exactly which objects are in the target; the local
//! checkpoint file is only a cache of them.
//!
//! Transactional ids are `strata-restore-<fingerprint>-<worker>`: a restarted restore fences
//! the producers of a killed one and aborts their open transactions before reading markers.

use super::offset_map::Ranges;
use super::RestoreError;
use crate::config::{ClientKind, KafkaConfig};
use crate::format::Record;
use crate::kafka::{client_config, servers, Admin};
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// The progress topic on the target cluster (one partition, compacted).
pub const PROGRESS_TOPIC: &str = "strata-restore-progress";

/// How long reading the markers back may take.
const READ_TIMEOUT: Duration = Duration::from_secs(120);

pub fn transactional_id(fingerprint: &str, worker: usize) -> String {
    format!("strata-restore-{fingerprint}-{worker}")
}

/// What a marker says about a finished object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub topic: String,
    pub partition: i32,
    pub records: u64,
    pub last_offset: Option<i64>,
    /// Where its records landed (target partition, offset ranges), so that a resumed restore
    /// whose checkpoint file missed the object still has the whole offset map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<(i32, Ranges)>,
}

fn marker_key(fingerprint: &str, object: &str) -> String {
    format!("{fingerprint}/{object}")
}

/// The marker record of a finished object.
pub fn marker(fingerprint: &str, object: &str, m: &Marker) -> Record {
    Record {
        topic: PROGRESS_TOPIC.to_string(),
        key: Some(marker_key(fingerprint, object).into_bytes()),
        value: Some(serde_json::to_vec(m).unwrap_or_default()),
        ..Record::default()
    }
}

/// Parses a marker of this restore (`None` for other restores' markers or foreign records).
pub fn parse_marker(fingerprint: &str, key: &[u8], value: &[u8]) -> Option<(String, Marker)> {
    let key = std::str::from_utf8(key).ok()?;
    let object = key.strip_prefix(fingerprint)?.strip_prefix('/')?;
    let m: Marker = serde_json::from_slice(value).ok()?;
    Some((object.to_string(), m))
}

/// Creates the progress topic when missing, with `replication` replicas (-1: the broker's
/// default, as for the restored topics).
pub async fn ensure_progress_topic(admin: &Admin, replication: i32) -> Result<(), RestoreError> {
    admin
        .create_topic(
            PROGRESS_TOPIC,
            1,
            replication,
            &[("cleanup.policy", "compact")],
        )
        .await?;
    Ok(())
}

/// Reads every committed marker of this restore (blocking; run it off the async runtime).
pub fn read_markers(
    k: &KafkaConfig,
    fingerprint: &str,
) -> Result<Vec<(String, Marker)>, RestoreError> {
    let fail = |detail: String| RestoreError::Transaction {
        servers: servers(k),
        detail: format!("reading {PROGRESS_TOPIC}: {detail}"),
    };
    let mut c = client_config(k, ClientKind::Consumer);
    c.set(
        "group.id",
        format!("strata-restore-reader-{}", uuid::Uuid::new_v4()),
    )
    .set("enable.auto.commit", "false")
    .set("isolation.level", "read_committed")
    .set("enable.partition.eof", "true")
    .set("auto.offset.reset", "earliest");
    let consumer = crate::kafka::reader(&c).map_err(|e| fail(e.to_string()))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(PROGRESS_TOPIC, 0, Offset::Beginning)
        .map_err(|e| fail(e.to_string()))?;
    consumer.assign(&tpl).map_err(|e| fail(e.to_string()))?;
    let deadline = Instant::now() + READ_TIMEOUT;
    let mut out = Vec::new();
    loop {
        if Instant::now() > deadline {
            return Err(fail(format!(
                "did not reach the end within {}s; an open transaction may block it (it is aborted after transaction.timeout.ms)",
                READ_TIMEOUT.as_secs()
            )));
        }
        match consumer.poll(Duration::from_millis(500)) {
            None => {}
            Some(Ok(m)) => {
                if let (Some(key), Some(value)) = (m.key(), m.payload()) {
                    if let Some(found) = parse_marker(fingerprint, key, value) {
                        out.push(found);
                    }
                }
            }
            Some(Err(RdError::PartitionEOF(_))) => return Ok(out),
            Some(Err(e))
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::UnknownTopicOrPartition) =>
            {
                tracing::debug!("progress topic not visible yet; retrying");
            }
            Some(Err(e)) => tracing::warn!(error = %e, "reading restore markers; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip_and_other_restores_are_ignored() {
        let mut ranges = Ranges::new();
        ranges.push(35, 0).unwrap();
        ranges.push(41, 1).unwrap();
        let want = Marker {
            topic: "t".into(),
            partition: 0,
            records: 7,
            last_offset: Some(41),
            map: Some((0, ranges)),
        };
        let r = marker("abc", "dir/t+0+1.jsonl", &want);
        let (key, value) = (r.key.unwrap(), r.value.unwrap());
        let (obj, m) = parse_marker("abc", &key, &value).unwrap();
        assert_eq!(obj, "dir/t+0+1.jsonl");
        assert_eq!(m, want);
        // A marker of a strata without offset maps still reads, without a map.
        let old = br#"{"topic":"t","partition":0,"records":7,"last_offset":41}"#;
        let (_, m) = parse_marker("abc", &key, old).unwrap();
        assert_eq!((m.records, m.map), (7, None));
        assert_eq!(parse_marker("abd", &key, &value), None);
        assert_eq!(parse_marker("ab", &key, &value), None);
        assert_eq!(parse_marker("abc", &key, b"junk"), None);
        assert_eq!(transactional_id("abc", 2), "strata-restore-abc-2");
    }
}
