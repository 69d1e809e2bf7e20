//! The positions topic of a flow, on its target cluster: for every source partition, the next
//! source offset to replicate, written in the same transaction as the records it follows (so a
//! read_committed reader of the target sees records and position together or not at all), and
//! the task's parameters, written once at its first start. A position also notes how far the
//! target partition reached, so a start can tell a recreated target (see `bookkeeping`).

use crate::config::KafkaConfig;
use crate::kafka::Reader;
use crate::kafka::{client_config, servers, KafkaError};
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The key of the task parameters' record.
pub const PARAMS_KEY: &str = "params";

/// The key of a source partition's position (topic names cannot contain `:`).
pub fn position_key(topic: &str, partition: i32) -> String {
    format!("{topic}:{partition}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    /// The next source offset to replicate.
    pub next: i64,
    /// The target partition's end offset was at least this when the position was written. An
    /// end offset never goes down while the topic lives, so a target ending below it was
    /// recreated (or lost records). Absent in positions of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_end: Option<i64>,
}

impl Position {
    pub fn to_json(self) -> Vec<u8> {
        serde_json::to_vec(&self).unwrap_or_default()
    }
}

/// What the positions topic holds, as read up to its end.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Positions {
    pub by_partition: BTreeMap<(String, i32), i64>,
    /// [`Position::target_end`] of the partitions whose position has one.
    pub target_ends: BTreeMap<(String, i32), i64>,
    pub params: Option<String>,
}

impl Positions {
    /// Applies one record of the topic (the last one per key wins).
    pub fn apply(&mut self, key: &[u8], value: Option<&[u8]>) {
        let Ok(key) = std::str::from_utf8(key) else {
            return;
        };
        if key == PARAMS_KEY {
            self.params = value.and_then(|v| String::from_utf8(v.to_vec()).ok());
            return;
        }
        let Some((topic, partition)) = key.rsplit_once(':') else {
            return;
        };
        let Ok(partition) = partition.parse::<i32>() else {
            return;
        };
        let pos = value.and_then(|v| serde_json::from_slice::<Position>(v).ok());
        let tp = (topic.to_string(), partition);
        match pos {
            Some(p) => {
                match p.target_end {
                    Some(e) => self.target_ends.insert(tp.clone(), e),
                    None => self.target_ends.remove(&tp),
                };
                self.by_partition.insert(tp, p.next);
            }
            None => {
                self.by_partition.remove(&tp);
                self.target_ends.remove(&tp);
            }
        }
    }

    pub fn next(&self, topic: &str, partition: i32) -> Option<i64> {
        self.by_partition
            .get(&(topic.to_string(), partition))
            .copied()
    }

    /// The stored position of a partition, with the target end it noted.
    pub fn get(&self, topic: &str, partition: i32) -> Option<Position> {
        let tp = (topic.to_string(), partition);
        self.by_partition.get(&tp).map(|&next| Position {
            next,
            target_end: self.target_ends.get(&tp).copied(),
        })
    }
}

/// Writes records to the positions topic outside any transaction (the task's parameters at its
/// first start, positions a `--reset` records before any worker runs) and waits until the
/// target has them all.
pub fn store(
    k: &KafkaConfig,
    topic: &str,
    records: &[(String, Vec<u8>)],
) -> Result<(), KafkaError> {
    let unreachable = |detail: String| KafkaError::Unreachable {
        servers: servers(k),
        detail,
    };
    let p: ThreadedProducer<crate::kafka::Watch> = client_config(k)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create_with_context(crate::kafka::Watch::default())
        .map_err(|source| KafkaError::Client {
            servers: servers(k),
            source,
        })?;
    for (key, value) in records {
        let r = BaseRecord::<str, [u8]>::to(topic)
            .partition(0)
            .key(key.as_str())
            .payload(&value[..]);
        p.send(r).map_err(|(e, _)| unreachable(e.to_string()))?;
    }
    p.flush(Duration::from_secs(30))
        .map_err(|e| unreachable(format!("writing to {topic}: {e}")))
}

/// Reads the positions topic (partition 0) from its start to the end it has now (everything
/// committed before the call is included), as a read_committed consumer sees it: only what
/// committed transactions wrote.
pub fn read(consumer: &Reader, topic: &str) -> Result<Positions, KafkaError> {
    let unreachable = |e: rdkafka::error::KafkaError| KafkaError::Topic {
        topic: topic.to_string(),
        detail: format!("cannot read it: {e}"),
    };
    let (low, high) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(30))
        .map_err(unreachable)?;
    let mut out = Positions::default();
    if high <= low {
        return Ok(out);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(unreachable)?;
    consumer.assign(&tpl).map_err(unreachable)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if Instant::now() > deadline {
            let _ = consumer.unassign();
            return Err(KafkaError::Topic {
                topic: topic.to_string(),
                detail: "could not be read to its end within 60 s".into(),
            });
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                out.apply(m.key().unwrap_or_default(), m.payload());
                if m.offset() + 1 >= high {
                    break;
                }
            }
            // The end of what is readable now is not the end: a read_committed consumer stops
            // at the first open transaction (another partition's worker), and what committed
            // after it (perhaps this partition's last position) is still to come. Only the
            // position tells, as transaction markers at the end are never delivered.
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) | None => {
                let pos = consumer.position().ok().and_then(|p| {
                    match p.find_partition(topic, 0).map(|e| e.offset()) {
                        Some(Offset::Offset(o)) => Some(o),
                        _ => None,
                    }
                });
                if pos.is_some_and(|p| p >= high) {
                    break;
                }
            }
            Some(Err(e)) => {
                let _ = consumer.unassign();
                return Err(unreachable(e));
            }
        }
    }
    let _ = consumer.unassign();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_record_per_key_wins() {
        let mut p = Positions::default();
        p.apply(
            b"orders:3",
            Some(
                &Position {
                    next: 10,
                    target_end: Some(40),
                }
                .to_json(),
            ),
        );
        p.apply(
            b"orders:3",
            Some(
                &Position {
                    next: 25,
                    target_end: None,
                }
                .to_json(),
            ),
        );
        p.apply(b"a.b-c:0", Some(br#"{"next":7}"#));
        p.apply(PARAMS_KEY.as_bytes(), Some(b"{\"x\":1}"));
        p.apply(b"garbage", Some(b"{}"));
        p.apply(b"t:x", Some(b"{}"));
        assert_eq!(p.next("orders", 3), Some(25));
        // The newest record's target end, none here.
        assert_eq!(p.get("orders", 3).and_then(|p| p.target_end), None);
        assert_eq!(p.next("a.b-c", 0), Some(7));
        assert_eq!(p.next("orders", 4), None);
        assert_eq!(p.params.as_deref(), Some("{\"x\":1}"));
        p.apply(b"orders:3", None);
        assert_eq!(p.next("orders", 3), None);
        assert_eq!(position_key("orders", 3), "orders:3");
    }

    #[test]
    fn positions_note_the_target_end_and_read_those_of_earlier_versions() {
        let with = Position {
            next: 12,
            target_end: Some(30),
        };
        assert_eq!(with.to_json(), br#"{"next":12,"target_end":30}"#);
        let old = Position {
            next: 12,
            target_end: None,
        };
        assert_eq!(old.to_json(), br#"{"next":12}"#);
        let mut p = Positions::default();
        p.apply(b"t:0", Some(&with.to_json()));
        assert_eq!(p.get("t", 0), Some(with));
        p.apply(b"t:0", Some(br#"{"next":13}"#));
        assert_eq!(
            p.get("t", 0),
            Some(Position {
                next: 13,
                target_end: None
            })
        );
        p.apply(b"t:0", None);
        assert_eq!(p.get("t", 0), None);
        assert!(p.target_ends.is_empty());
    }
}
