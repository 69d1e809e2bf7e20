//! Records on their way from the source to a sink: many records of one partition copied
//! into one buffer (one allocation per batch instead of several per record), read back as
//! the borrowed [`RecordView`]s the encoders take.

use crate::format::{HeaderView, RecordView, TimestampType};
use rdkafka::message::{Headers, Message};
use std::ops::Range;

/// A batch is handed on once it holds this many bytes of keys, values and headers...
pub const BATCH_BYTES: usize = 256 << 10;
/// ... or this many records.
pub const BATCH_RECORDS: usize = 4096;

#[derive(Debug, Clone)]
struct Meta {
    offset: i64,
    timestamp: Option<i64>,
    timestamp_type: TimestampType,
    key: Option<Range<u32>>,
    value: Option<Range<u32>>,
    headers: Range<u32>,
}

#[derive(Debug, Clone)]
struct HeaderMeta {
    key: Range<u32>,
    value: Option<Range<u32>>,
}

/// Records of one topic-partition, in offset order.
#[derive(Debug, Default)]
pub struct Batch {
    /// The partition's epoch when the records were polled: a rewind bumps it, and a writer
    /// drops batches of an older epoch.
    pub epoch: u64,
    data: Vec<u8>,
    records: Vec<Meta>,
    headers: Vec<HeaderMeta>,
}

impl Batch {
    pub fn new(epoch: u64) -> Self {
        Self {
            epoch,
            ..Self::default()
        }
    }

    fn put(&mut self, bytes: &[u8]) -> Range<u32> {
        let start = self.data.len() as u32;
        self.data.extend_from_slice(bytes);
        start..self.data.len() as u32
    }

    /// Copies a polled message in.
    pub fn push<M: Message>(&mut self, m: &M) {
        if self.data.capacity() == 0 {
            // Room for a whole batch at once: no regrowing (and copying) on the hot path.
            self.data.reserve(BATCH_BYTES + (64 << 10));
            self.records.reserve(BATCH_RECORDS.min(1024));
        }
        let (timestamp, timestamp_type) = match m.timestamp() {
            rdkafka::Timestamp::CreateTime(t) => (Some(t), TimestampType::CreateTime),
            rdkafka::Timestamp::LogAppendTime(t) => (Some(t), TimestampType::LogAppendTime),
            rdkafka::Timestamp::NotAvailable => (None, TimestampType::NotAvailable),
        };
        let key = m.key().map(|k| self.put(k));
        let value = m.payload().map(|v| self.put(v));
        let first_header = self.headers.len() as u32;
        if let Some(hs) = m.headers() {
            for h in hs.iter() {
                let key = self.put(h.key.as_bytes());
                let value = h.value.map(|v| self.put(v));
                self.headers.push(HeaderMeta { key, value });
            }
        }
        self.records.push(Meta {
            offset: m.offset(),
            timestamp,
            timestamp_type,
            key,
            value,
            headers: first_header..self.headers.len() as u32,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Bytes of keys, values and headers held.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    pub fn is_full(&self) -> bool {
        self.data.len() >= BATCH_BYTES || self.records.len() >= BATCH_RECORDS
    }

    /// Calls `f` with each record in order; stops at the first error.
    pub fn try_for_each<E>(
        &self,
        partition: i32,
        mut f: impl FnMut(&RecordView<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let slice = |r: &Range<u32>| &self.data[r.start as usize..r.end as usize];
        let mut headers: Vec<HeaderView<'_>> = Vec::new();
        for m in &self.records {
            headers.clear();
            for h in &self.headers[m.headers.start as usize..m.headers.end as usize] {
                headers.push(HeaderView {
                    // Kafka header keys are strings; the bytes came from a `&str`.
                    key: std::str::from_utf8(slice(&h.key)).unwrap_or_default(),
                    value: h.value.as_ref().map(slice),
                });
            }
            let view = RecordView {
                partition,
                offset: m.offset,
                timestamp: m.timestamp,
                timestamp_type: m.timestamp_type,
                key: m.key.as_ref().map(slice),
                value: m.value.as_ref().map(slice),
                headers: &headers,
            };
            f(&view)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::{Header, OwnedHeaders, OwnedMessage};

    fn message(
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> OwnedMessage {
        let mut hs = OwnedHeaders::new();
        for (k, v) in headers {
            hs = hs.insert(Header { key: k, value: *v });
        }
        OwnedMessage::new(
            value.map(<[u8]>::to_vec),
            key.map(<[u8]>::to_vec),
            "t".into(),
            rdkafka::Timestamp::CreateTime(1000 + offset),
            3,
            offset,
            Some(hs),
        )
    }

    #[test]
    fn records_come_back_as_they_went_in() {
        let mut b = Batch::new(7);
        b.push(&message(
            10,
            Some(b"k"),
            Some(b"value"),
            &[("a", Some(b"1")), ("a", None)],
        ));
        b.push(&message(11, None, None, &[]));
        b.push(&message(13, Some(b""), Some(b"x"), &[("", Some(b""))]));
        assert_eq!((b.records.len(), b.epoch), (3, 7));
        let mut seen = Vec::new();
        b.try_for_each::<()>(3, |r| {
            let hs: Vec<(String, Option<Vec<u8>>)> = r
                .headers
                .iter()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect();
            seen.push((
                r.partition,
                r.offset,
                r.timestamp,
                r.key.map(<[u8]>::to_vec),
                r.value.map(<[u8]>::to_vec),
                hs,
            ));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                (
                    3,
                    10,
                    Some(1010),
                    Some(b"k".to_vec()),
                    Some(b"value".to_vec()),
                    vec![("a".into(), Some(b"1".to_vec())), ("a".into(), None)]
                ),
                (3, 11, Some(1011), None, None, vec![]),
                (
                    3,
                    13,
                    Some(1013),
                    Some(vec![]),
                    Some(b"x".to_vec()),
                    vec![("".into(), Some(vec![]))]
                ),
            ]
        );
    }

    #[test]
    fn batches_fill_by_bytes_or_records() {
        let mut b = Batch::new(0);
        let big = vec![1u8; BATCH_BYTES / 2];
        b.push(&message(0, None, Some(&big), &[]));
        assert!(!b.is_full());
        b.push(&message(1, None, Some(&big), &[]));
        assert!(b.is_full());
        let mut b = Batch::new(0);
        for i in 0..BATCH_RECORDS as i64 {
            assert!(!b.is_full());
            b.push(&message(i, None, Some(b"v"), &[]));
        }
        assert!(b.is_full());
    }
}
