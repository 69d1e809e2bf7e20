//! The restore producer: librdkafka with `enable.idempotence=true`, `acks=all` and the
//! `murmur2_random` partitioner (the Java client's key hash, so keyed records land where a Java
//! producer would put them). Optionally transactional, for exactly-once restores.
//!
//! Deliveries are counted per *slot*: each worker owns one slot and has one object in flight at
//! a time, so it can wait until every record of its object is acknowledged (or failed). A slot
//! also keeps, when asked, the offset Kafka gave each record of the object (by its index), for
//! the restore's offset map.

use crate::config::{ClientKind, KafkaConfig};
use crate::format::Record;
use crate::kafka::{client_config, servers, KafkaError};
use rdkafka::client::ClientContext;
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Settings strata owns for restore; a user's `kafka.properties` cannot change them.
const GUARDED: &[&str] = &[
    "enable.idempotence",
    "acks",
    "request.required.acks",
    "partitioner",
    "transactional.id",
    "max.in.flight.requests.per.connection",
    "max.in.flight",
];

/// How long transactional calls (init, commit, abort) may take.
pub const TXN_TIMEOUT: Duration = Duration::from_secs(120);

/// The transaction timeout of an exactly-once restore: one object is one transaction, so it
/// must cover sending the largest object at the rate limit. Kept as short as that allows: a
/// killed restore's open transaction holds back `read_committed` readers of the target until
/// the broker aborts it (or the restore is resumed, which fences it at once). The broker's
/// `transaction.max.timeout.ms` (15 min by default) is the ceiling.
pub fn transaction_timeout(largest_object: u64, rate_bytes_per_sec: Option<f64>) -> Duration {
    const BASE: f64 = 120.0;
    const MAX: f64 = 900.0;
    let send = rate_bytes_per_sec.map_or(0.0, |r| 2.0 * largest_object as f64 / r);
    Duration::from_secs_f64((BASE + send).min(MAX))
}

/// Slots a producer may have: the delivery opaque carries the slot in its low bits and the
/// record's index within its object above them.
const SLOT_BITS: u32 = 8;
const MAX_SLOTS: usize = 1 << SLOT_BITS;

fn opaque(slot: usize, index: usize) -> usize {
    slot | (index << SLOT_BITS)
}

fn slot_and_index(opaque: usize) -> (usize, usize) {
    (opaque & (MAX_SLOTS - 1), opaque >> SLOT_BITS)
}

#[derive(Default)]
struct Slot {
    acked: AtomicU64,
    failed: AtomicU64,
    /// Records sent for the current object; `u64::MAX` while still sending.
    expected: AtomicU64,
    first_error: Mutex<Option<String>>,
    /// Offsets of the current object's records by index (-1 until delivered); empty when the
    /// object's offsets are not wanted.
    offsets: Mutex<Vec<i64>>,
    lock: Mutex<()>,
    cv: Condvar,
}

/// Counts deliveries per slot and routes librdkafka's logs into tracing.
pub struct RestoreContext {
    slots: Vec<Slot>,
}

impl ClientContext for RestoreContext {
    crate::kafka::msk_iam::oauth_token_hook!();

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, message: &str) {
        use rdkafka::config::RDKafkaLogLevel::*;
        match level {
            Emerg | Alert | Critical | Error => tracing::error!(fac, "librdkafka: {message}"),
            Warning => tracing::warn!(fac, "librdkafka: {message}"),
            Notice | Info => tracing::info!(fac, "librdkafka: {message}"),
            Debug => tracing::debug!(fac, "librdkafka: {message}"),
        }
    }

    fn error(&self, error: RdError, reason: &str) {
        tracing::warn!(error = %error, reason, "kafka producer error; librdkafka retries");
    }
}

impl ProducerContext for RestoreContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        let (slot, index) = slot_and_index(opaque);
        let Some(s) = self.slots.get(slot) else {
            return;
        };
        match result {
            Ok(m) => {
                if let Ok(mut offsets) = s.offsets.lock() {
                    if let Some(o) = offsets.get_mut(index) {
                        *o = m.offset();
                    }
                }
                s.acked.fetch_add(1, SeqCst);
            }
            Err((e, m)) => {
                s.failed.fetch_add(1, SeqCst);
                if let Ok(mut first) = s.first_error.lock() {
                    first.get_or_insert_with(|| format!("partition {}: {e}", m.partition()));
                }
            }
        }
        let done = s.acked.load(SeqCst) + s.failed.load(SeqCst);
        if done >= s.expected.load(SeqCst) {
            let _g = s.lock.lock();
            s.cv.notify_all();
        }
    }
}

/// Records of one object that Kafka did not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryFailure {
    pub failed: u64,
    pub sent: u64,
    pub detail: String,
}

/// A producer shared by the workers (one slot each), or one worker's transactional producer.
pub struct RestoreProducer {
    inner: ThreadedProducer<RestoreContext>,
    servers: String,
}

impl RestoreProducer {
    /// A producer with `slots` delivery counters; `transactional` (id, timeout) makes it
    /// transactional (call [`Self::init_transactions`] before use).
    pub fn new(
        k: &KafkaConfig,
        slots: usize,
        transactional: Option<(&str, Duration)>,
    ) -> Result<Self, KafkaError> {
        let mut c: ClientConfig = client_config(k, ClientKind::Producer);
        c.set("enable.idempotence", "true")
            .set("acks", "all")
            .set("partitioner", "murmur2_random")
            .set("linger.ms", "10")
            .set("batch.size", "1000000")
            .set("queue.buffering.max.kbytes", "65536")
            // Archived records may be as large as the source cluster allowed.
            .set("message.max.bytes", "67108864");
        for (key, value) in k.properties_for(ClientKind::Producer) {
            if GUARDED.contains(&key) {
                tracing::warn!(property = %key, "kafka.properties cannot change this producer setting; restore needs idempotent, acks=all, murmur2 partitioning");
            } else {
                c.set(key, value);
            }
        }
        if let Some((id, timeout)) = transactional {
            c.set("transactional.id", id)
                .set("transaction.timeout.ms", timeout.as_millis().to_string());
        }
        let context = RestoreContext {
            slots: (0..slots.clamp(1, MAX_SLOTS))
                .map(|_| Slot::default())
                .collect(),
        };
        let inner = c
            .create_with_context(context)
            .map_err(|source| KafkaError::Client {
                servers: servers(k),
                source,
            })?;
        Ok(Self {
            inner,
            servers: servers(k),
        })
    }

    fn slot(&self, slot: usize) -> Option<&Slot> {
        self.inner.context().slots.get(slot)
    }

    /// Resets a slot's counters before the first record of an object; `offsets_of` records
    /// keeps the offsets Kafka gives records `0..offsets_of` (see [`Self::take_offsets`]).
    pub fn begin_object(&self, slot: usize, offsets_of: usize) {
        if let Some(s) = self.slot(slot) {
            s.expected.store(u64::MAX, SeqCst);
            s.acked.store(0, SeqCst);
            s.failed.store(0, SeqCst);
            if let Ok(mut e) = s.first_error.lock() {
                *e = None;
            }
            if let Ok(mut o) = s.offsets.lock() {
                o.clear();
                o.resize(offsets_of, -1);
            }
        }
    }

    /// The offsets of the current object's records by index (-1: not delivered); call after
    /// [`Self::wait_object`].
    pub fn take_offsets(&self, slot: usize) -> Vec<i64> {
        self.slot(slot)
            .and_then(|s| s.offsets.lock().ok().map(|mut o| std::mem::take(&mut *o)))
            .unwrap_or_default()
    }

    /// Queues one record, the `index`th of the slot's object; waits while librdkafka's queue
    /// is full. Errors are permanent for this record (too large, unknown topic, fatal producer
    /// state).
    pub fn send(
        &self,
        slot: usize,
        index: usize,
        topic: &str,
        partition: Option<i32>,
        r: &Record,
    ) -> Result<(), String> {
        let mut rec: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(topic, opaque(slot, index));
        // Kafka does not tell "no headers" from an empty list; skip the allocation.
        if !r.headers.is_empty() {
            let mut headers = OwnedHeaders::new_with_capacity(r.headers.len());
            for h in &r.headers {
                headers = headers.insert(Header {
                    key: &h.key,
                    value: h.value.as_deref(),
                });
            }
            rec = rec.headers(headers);
        }
        if let Some(k) = &r.key {
            rec = rec.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            rec = rec.payload(v.as_slice());
        }
        if let Some(p) = partition {
            rec = rec.partition(p);
        }
        if let Some(t) = r.timestamp {
            rec = rec.timestamp(t);
        }
        loop {
            match self.inner.send(rec) {
                Ok(()) => return Ok(()),
                Err((RdError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((e, _)) => return Err(self.explain(&e.to_string())),
            }
        }
    }

    /// Waits until the `sent` records of the slot's object are acknowledged or failed.
    pub fn wait_object(&self, slot: usize, sent: u64) -> Result<(), DeliveryFailure> {
        let Some(s) = self.slot(slot) else {
            return Ok(());
        };
        s.expected.store(sent, SeqCst);
        let mut guard = s.lock.lock().unwrap_or_else(|p| p.into_inner());
        while s.acked.load(SeqCst) + s.failed.load(SeqCst) < sent {
            guard = match s.cv.wait_timeout(guard, Duration::from_millis(100)) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        drop(guard);
        let failed = s.failed.load(SeqCst);
        if failed == 0 {
            return Ok(());
        }
        let first = s
            .first_error
            .lock()
            .ok()
            .and_then(|e| e.clone())
            .unwrap_or_default();
        Err(DeliveryFailure {
            failed,
            sent,
            detail: self.explain(&first),
        })
    }

    /// Adds the producer's fatal error, if any, and a hint for the usual causes.
    fn explain(&self, detail: &str) -> String {
        let mut out = detail.to_string();
        if let Some((code, reason)) = self.inner.client().fatal_error() {
            out.push_str(&format!(" (producer fatal error {code:?}: {reason})"));
        }
        let hint = if out.contains("too large") || out.contains("TooLarge") {
            "; the target's max.message.bytes (or the broker's message.max.bytes) is smaller than an archived record"
        } else if out.contains("Authorization") {
            "; grant this client WRITE (and IDEMPOTENT_WRITE) on the target topic"
        } else if out.contains("InvalidTimestamp") || out.contains("timestamp") {
            "; the target refuses the archived timestamps (message.timestamp.before/after.max.ms)"
        } else if out.contains("timed out") || out.contains("TimedOut") {
            "; the target cluster did not acknowledge in time: check that it is up and reachable"
        } else {
            ""
        };
        out.push_str(hint);
        out
    }

    pub fn servers(&self) -> &str {
        &self.servers
    }

    pub fn init_transactions(&self) -> Result<(), String> {
        self.inner
            .init_transactions(TXN_TIMEOUT)
            .map_err(|e| self.explain(&e.to_string()))
    }

    pub fn begin_transaction(&self) -> Result<(), String> {
        self.inner
            .begin_transaction()
            .map_err(|e| self.explain(&e.to_string()))
    }

    /// Commits; on failure aborts (best effort) so nothing of the object becomes visible.
    pub fn commit_transaction(&self) -> Result<(), String> {
        match self.inner.commit_transaction(TXN_TIMEOUT) {
            Ok(()) => Ok(()),
            Err(e) => {
                let detail = self.explain(&e.to_string());
                if let Err(abort) = self.inner.abort_transaction(TXN_TIMEOUT) {
                    tracing::warn!(error = %abort, "aborting the failed transaction failed too; the broker aborts it after transaction.timeout.ms");
                }
                Err(detail)
            }
        }
    }

    pub fn abort_transaction(&self) {
        if let Err(e) = self.inner.abort_transaction(TXN_TIMEOUT) {
            tracing::warn!(error = %e, "aborting the transaction failed; the broker aborts it after transaction.timeout.ms");
        }
    }

    /// Waits for everything queued (used before dropping the producer).
    pub fn flush(&self, timeout: Duration) {
        let _ = self.inner.flush(timeout);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delivery_opaque_carries_slot_and_index() {
        for (slot, index) in [(0, 0), (3, 0), (0, 1), (255, 1 << 40), (7, 123_456)] {
            assert_eq!(slot_and_index(opaque(slot, index)), (slot, index));
        }
    }

    #[test]
    fn transaction_timeout_covers_a_rate_limited_object() {
        assert_eq!(
            transaction_timeout(64 << 20, None),
            Duration::from_secs(120)
        );
        // 8 MiB at 1 MiB/s: 16 s of margin on top.
        assert_eq!(
            transaction_timeout(8 << 20, Some(1048576.0)),
            Duration::from_secs(136)
        );
        assert_eq!(
            transaction_timeout(1 << 30, Some(1024.0)),
            Duration::from_secs(900)
        );
    }
}
