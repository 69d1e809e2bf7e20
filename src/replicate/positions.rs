//! The positions topic of a flow, on its target cluster: for every source partition, the next
//! source offset to replicate, written in the same transaction as the records it follows (so a
//! read_committed reader of the target sees records and position together or not at all), and
//! the task's parameters, written once at its first start.

use crate::kafka::KafkaError;
use crate::kafka::Reader;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
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
        match pos {
            Some(p) => {
                self.by_partition
                    .insert((topic.to_string(), partition), p.next);
            }
            None => {
                self.by_partition.remove(&(topic.to_string(), partition));
            }
        }
    }

    pub fn next(&self, topic: &str, partition: i32) -> Option<i64> {
        self.by_partition
            .get(&(topic.to_string(), partition))
            .copied()
    }
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
        p.apply(b"orders:3", Some(&Position { next: 10 }.to_json()));
        p.apply(b"orders:3", Some(&Position { next: 25 }.to_json()));
        p.apply(b"a.b-c:0", Some(br#"{"next":7}"#));
        p.apply(PARAMS_KEY.as_bytes(), Some(b"{\"x\":1}"));
        p.apply(b"garbage", Some(b"{}"));
        p.apply(b"t:x", Some(b"{}"));
        assert_eq!(p.next("orders", 3), Some(25));
        assert_eq!(p.next("a.b-c", 0), Some(7));
        assert_eq!(p.next("orders", 4), None);
        assert_eq!(p.params.as_deref(), Some("{\"x\":1}"));
        p.apply(b"orders:3", None);
        assert_eq!(p.next("orders", 3), None);
        assert_eq!(position_key("orders", 3), "orders:3");
    }
}
