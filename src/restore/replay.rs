//! Replays planned objects into Kafka on a few worker threads.
//!
//! A worker takes a whole source partition and replays its objects in offset order, one at a
//! time: read and decode (the next object is fetched and decoded meanwhile), send every
//! selected record, wait until Kafka acknowledged all of them, and only then checkpoint the
//! object. So at most one object per source partition is in flight, and only its records can
//! be sent twice after a crash.

use super::checkpoint::{Checkpoint, Done};
use super::offset_map::Ranges;
use super::plan::{choose_partition, PlannedObject, SourcePartition, TimeFilter};
use super::produce::RestoreProducer;
use super::progress::Progress;
use super::rate::RateLimiter;
use super::{eos, CorruptObject, RestoreError};
use crate::config::{Partitioning, RestoreConfig};
use crate::format::{FormatSpec, Record};
use crate::store::ObjectStore;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Memory for decoded objects, shared by the workers: an object is fetched only when its size
/// fits (a larger object waits until it is alone), and holds its share until its records are
/// acknowledged. Decoding may grow the share beyond the budget; later fetches then wait.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

/// Expansion a genuine archive object may have when decoded, beyond the budget.
const DECODE_RATIO: u64 = 16;

/// A share of the [`Budget`], returned when dropped.
#[derive(Debug)]
pub struct Lease<'a> {
    budget: &'a Budget,
    amount: u64,
}

impl Budget {
    pub fn new(limit: u64) -> Self {
        Self {
            limit: limit.max(1),
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Waits until `amount` fits (or nothing else is held), unless `give_up` turns true.
    pub fn acquire(&self, amount: u64, give_up: impl Fn() -> bool) -> Lease<'_> {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used > 0 && *used + amount > self.limit && !give_up() {
            used = match self.freed.wait_timeout(used, Duration::from_millis(100)) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        *used += amount;
        Lease {
            budget: self,
            amount,
        }
    }

    /// The most an object of `size` bytes may decode to: the budget, or 16 times the object
    /// when that is more. A genuine archive of `max_file_size` decodes (a large object is
    /// admitted alone, as before); a few KB crafted to expand to gigabytes stops at the budget.
    pub fn decode_limit(&self, size: u64) -> u64 {
        self.limit.max(size.saturating_mul(DECODE_RATIO))
    }

    #[cfg(test)]
    fn used(&self) -> u64 {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Lease<'_> {
    /// Sets the share to what decoding turned out to need, without waiting.
    pub fn resize(&mut self, amount: u64) {
        let mut used = self.budget.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = (*used + amount).saturating_sub(self.amount);
        self.amount = amount;
        self.budget.freed.notify_all();
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut used = self.budget.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(self.amount);
        self.budget.freed.notify_all();
    }
}

/// Heap bytes of decoded records.
fn decoded_bytes(records: &[Record]) -> u64 {
    records.iter().map(Record::heap_bytes).sum()
}

/// Where the records of one source topic go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub topic: String,
    pub partitions: i32,
}

/// The producers: one shared (a slot per worker), or one transactional producer per worker.
pub enum Producers {
    Shared(RestoreProducer),
    PerWorker(Vec<RestoreProducer>),
}

impl Producers {
    fn get(&self, worker: usize) -> Option<(&RestoreProducer, usize)> {
        match self {
            Producers::Shared(p) => Some((p, worker)),
            Producers::PerWorker(v) => v.get(worker).map(|p| (p, 0)),
        }
    }

    fn transactional(&self) -> bool {
        matches!(self, Producers::PerWorker(_))
    }
}

/// What the workers did, added up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub objects: u64,
    pub records: u64,
    pub bytes: u64,
    pub out_of_range: u64,
    pub duplicates: u64,
    pub corrupt: Vec<CorruptObject>,
}

/// Why an object could not be read.
enum LoadError {
    Corrupt(CorruptObject),
    Other(RestoreError),
}

/// Everything the workers share.
pub struct Engine {
    pub cfg: RestoreConfig,
    pub store: Arc<dyn ObjectStore>,
    pub rt: tokio::runtime::Handle,
    pub targets: BTreeMap<String, Target>,
    pub producers: Producers,
    pub checkpoint: Mutex<Checkpoint>,
    pub progress: Arc<Progress>,
    pub rate: Option<RateLimiter>,
    pub filter: TimeFilter,
    /// Set by a signal: stop after the records in flight are acknowledged.
    pub stop: Arc<AtomicBool>,
    /// The settings fingerprint, naming exactly-once markers.
    pub fingerprint: String,
    pub abort: AtomicBool,
    pub first_error: Mutex<Option<RestoreError>>,
    pub counts: Mutex<Counts>,
    pub queue: Mutex<VecDeque<SourcePartition>>,
    pub budget: Budget,
}

/// Bytes a record puts on the wire (key, value, header keys and values).
pub fn record_bytes(r: &Record) -> u64 {
    let h: usize = r
        .headers
        .iter()
        .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
        .sum();
    (r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len) + h) as u64
}

impl Engine {
    fn halted(&self) -> bool {
        self.stop.load(Relaxed) || self.abort.load(Relaxed)
    }

    /// Runs `workers` threads until the queue is empty, a signal stops them or one fails.
    pub fn run(&self, workers: usize) -> Result<(), RestoreError> {
        std::thread::scope(|s| {
            for w in 0..workers {
                let spawned = std::thread::Builder::new()
                    .name(format!("restore-{w}"))
                    .spawn_scoped(s, move || self.worker(w));
                if let Err(e) = spawned {
                    self.fail(RestoreError::Internal(format!(
                        "cannot start worker thread: {e}"
                    )));
                    break;
                }
            }
        });
        match self.first_error.lock() {
            Ok(mut e) => e.take().map_or(Ok(()), Err),
            Err(_) => Err(RestoreError::Internal("a worker panicked".into())),
        }
    }

    fn fail(&self, e: RestoreError) {
        self.abort.store(true, Relaxed);
        if let Ok(mut first) = self.first_error.lock() {
            if first.is_none() {
                *first = Some(e);
            }
        }
    }

    fn worker(&self, w: usize) {
        loop {
            if self.halted() {
                return;
            }
            let next = self.queue.lock().ok().and_then(|mut q| q.pop_front());
            let Some(part) = next else { return };
            if let Err(e) = self.partition(w, &part) {
                self.fail(e);
                return;
            }
        }
    }

    fn partition(&self, w: usize, part: &SourcePartition) -> Result<(), RestoreError> {
        let mut last_offset = self
            .checkpoint
            .lock()
            .ok()
            .and_then(|c| c.last_offset(&part.topic, part.partition));
        std::thread::scope(|s| {
            let mut objects = part.objects.iter();
            let mut pending = objects.next().map(|o| (o, s.spawn(move || self.load(o))));
            while let Some((obj, handle)) = pending.take() {
                let loaded = handle
                    .join()
                    .map_err(|_| RestoreError::Internal("decoder thread panicked".into()))?;
                if self.halted() {
                    return Ok(());
                }
                // Read and decode the next object while this one is sent.
                pending = objects.next().map(|o| (o, s.spawn(move || self.load(o))));
                match loaded {
                    Ok((records, lease)) => {
                        self.object(w, obj, &records, &mut last_offset)?;
                        drop(records);
                        drop(lease);
                    }
                    Err(LoadError::Corrupt(c)) if self.cfg.skip_corrupt => {
                        self.progress.println(&format!(
                            "skipping corrupt object {} ({}): --skip-corrupt is on",
                            c.location, c.detail
                        ));
                        self.progress.archive_read(obj.size);
                        if let Ok(mut counts) = self.counts.lock() {
                            counts.corrupt.push(c);
                        }
                    }
                    Err(LoadError::Corrupt(c)) => return Err(RestoreError::Corrupt(c)),
                    Err(LoadError::Other(e)) => return Err(e),
                }
            }
            Ok(())
        })
    }

    fn load(&self, obj: &PlannedObject) -> Result<(Vec<Record>, Lease<'_>), LoadError> {
        let location = self.store.location(&obj.key);
        // Until decoded, the object needs its bytes and about as much again for the records.
        let mut lease = self
            .budget
            .acquire(obj.size.saturating_mul(2), || self.halted());
        let spec = FormatSpec::from_extension(&obj.name.extension, self.cfg.text.clone())
            .ok_or_else(|| {
                LoadError::Other(RestoreError::Internal(format!(
                    "{location}: extension {:?} has no decoder",
                    obj.name.extension
                )))
            })?;
        let mut files = Vec::with_capacity(1 + obj.bundle.len());
        for key in std::iter::once(&obj.key).chain(&obj.bundle) {
            let data = self
                .rt
                .block_on(self.store.get(key))
                .map_err(|source| LoadError::Other(RestoreError::Read { source }))?;
            files.push((key, data));
        }
        let limit = self.budget.decode_limit(obj.size);
        let records = crate::cdc::decode_files(&spec, &obj.name.topic, files, limit).map_err(
            |(key, e)| {
                LoadError::Corrupt(CorruptObject {
                    location: self.store.location(key),
                    at: e.at,
                    detail: e.message,
                })
            },
        )?;
        lease.resize(decoded_bytes(&records));
        Ok((records, lease))
    }

    /// Sends one decoded object and checkpoints it once every record is acknowledged.
    fn object(
        &self,
        w: usize,
        obj: &PlannedObject,
        records: &[Record],
        last_offset: &mut Option<i64>,
    ) -> Result<(), RestoreError> {
        let location = self.store.location(&obj.key);
        let target = self.targets.get(&obj.name.topic).ok_or_else(|| {
            RestoreError::Internal(format!("no target topic for {}", obj.name.topic))
        })?;
        let (producer, slot) = self
            .producers
            .get(w)
            .ok_or_else(|| RestoreError::Internal(format!("no producer for worker {w}")))?;
        let txn = self.producers.transactional();
        let produce_err = |detail: String, failed: u64, sent: u64| RestoreError::Produce {
            object: location.clone(),
            topic: target.topic.clone(),
            servers: producer.servers().to_string(),
            failed,
            sent,
            detail,
        };
        // With original partitioning every record of the object goes to its archived
        // partition: record where each lands, for the offset map.
        let map_partition = match self.cfg.partitioning {
            Partitioning::Original => choose_partition(
                Partitioning::Original,
                obj.name.partition,
                target.partitions,
            ),
            Partitioning::KeyHash => None,
        };
        let mut sources: Vec<i64> = Vec::new();
        let mut mappable = map_partition.is_some();
        if mappable {
            sources.reserve(records.len());
        }
        producer.begin_object(slot, if mappable { records.len() + 1 } else { 0 });
        if txn {
            producer
                .begin_transaction()
                .map_err(|d| produce_err(d, 0, 0))?;
        }
        // Archive bytes are credited to the progress bar record by record.
        let share = obj.size / (records.len().max(1) as u64);
        let (mut sent, mut bytes, mut out_of_range, mut duplicates) = (0u64, 0u64, 0u64, 0u64);
        let mut max_offset: Option<i64> = None;
        let mut interrupted = false;
        let mut pending_progress = (0u64, 0u64, 0u64);
        for r in records {
            if self.halted() {
                interrupted = true;
                break;
            }
            pending_progress.2 += share;
            if pending_progress.2 >= 1 << 20 {
                self.flush_progress(&mut pending_progress);
            }
            if let Some(o) = r.offset {
                max_offset = Some(max_offset.map_or(o, |m: i64| m.max(o)));
                if last_offset.is_some_and(|l| o <= l) {
                    duplicates += 1;
                    continue;
                }
            }
            if !self.filter.keeps(r.timestamp) {
                out_of_range += 1;
                continue;
            }
            let archived = r.partition.unwrap_or(obj.name.partition);
            let partition = choose_partition(self.cfg.partitioning, archived, target.partitions);
            if mappable {
                match r.offset {
                    Some(o) if partition == map_partition => sources.push(o),
                    _ => mappable = false,
                }
            }
            let size = record_bytes(r);
            if let Some(rate) = &self.rate {
                rate.acquire(size);
            }
            if let Err(detail) = producer.send(slot, sent as usize, &target.topic, partition, r) {
                let at = r
                    .offset
                    .map_or(String::new(), |o| format!(" at offset {o}"));
                // Let what was queued settle before reporting, so nothing is left behind.
                let _ = producer.wait_object(slot, sent);
                if txn {
                    producer.abort_transaction();
                }
                return Err(produce_err(format!("record{at}: {detail}"), 1, sent + 1));
            }
            sent += 1;
            bytes += size;
            pending_progress.0 += 1;
            pending_progress.1 += size;
            if pending_progress.0 >= 1024 {
                self.flush_progress(&mut pending_progress);
            }
        }
        self.flush_progress(&mut pending_progress);
        if txn && interrupted {
            let _ = producer.wait_object(slot, sent);
            producer.abort_transaction();
            return Ok(());
        }
        // Every record acknowledged first: their offsets go into the exactly-once marker.
        if let Err(f) = producer.wait_object(slot, sent) {
            if txn {
                producer.abort_transaction();
            }
            return Err(produce_err(f.detail, f.failed, f.sent));
        }
        let map = match (mappable, map_partition) {
            (true, Some(p)) => {
                let targets = producer.take_offsets(slot);
                let ranges =
                    Ranges::of_object(&sources, targets.get(..sources.len()).unwrap_or(&[]));
                if ranges.is_none() {
                    tracing::warn!(object = %location, "delivery reports lack offsets or go back; the partition's offset map is incomplete (restoring consumer groups onto it will be refused)");
                }
                ranges.map(|r| (target.topic.clone(), p, r))
            }
            _ => None,
        };
        if txn {
            let m = eos::Marker {
                topic: obj.name.topic.clone(),
                partition: obj.name.partition,
                records: sent,
                last_offset: max_offset,
                map: map.as_ref().map(|(_, p, r)| (*p, r.clone())),
            };
            let marker = eos::marker(&self.fingerprint, &obj.key, &m);
            if let Err(d) =
                producer.send(slot, sent as usize, eos::PROGRESS_TOPIC, Some(0), &marker)
            {
                let _ = producer.wait_object(slot, sent);
                producer.abort_transaction();
                return Err(produce_err(format!("progress marker: {d}"), 1, sent + 1));
            }
            if let Err(f) = producer.wait_object(slot, sent + 1) {
                producer.abort_transaction();
                return Err(produce_err(f.detail, f.failed, f.sent));
            }
            producer.commit_transaction().map_err(|d| {
                produce_err(
                    format!("commit of the object's transaction: {d}"),
                    sent,
                    sent,
                )
            })?;
        }
        if interrupted {
            // Sent in part: not checkpointed, so the next run sends it again (the bound).
            return Ok(());
        }
        {
            let mut cp = self
                .checkpoint
                .lock()
                .map_err(|_| RestoreError::Internal("checkpoint lock poisoned".into()))?;
            cp.finish(
                &obj.key,
                Done {
                    topic: obj.name.topic.clone(),
                    partition: obj.name.partition,
                    records: sent,
                    last_offset: max_offset,
                    map,
                },
            )?;
        }
        if let Some(m) = max_offset {
            *last_offset = Some(last_offset.map_or(m, |l| l.max(m)));
        }
        self.progress
            .archive_read(obj.size.saturating_sub(share * records.len() as u64));
        self.progress.object_done();
        if let Ok(mut c) = self.counts.lock() {
            c.objects += 1;
            c.records += sent;
            c.bytes += bytes;
            c.out_of_range += out_of_range;
            c.duplicates += duplicates;
        }
        tracing::debug!(object = %location, records = sent, out_of_range, duplicates, "object restored");
        Ok(())
    }

    fn flush_progress(&self, p: &mut (u64, u64, u64)) {
        self.progress.sent(p.0, p.1);
        self.progress.archive_read(p.2);
        *p = (0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_waits_for_room_and_lets_a_big_object_through_alone() {
        let b = Budget::new(100);
        let a = b.acquire(60, || false);
        assert_eq!(b.used(), 60);
        // 60 + 50 > 100: a second acquire must wait; give_up lets the test see that.
        let waited = std::sync::atomic::AtomicU32::new(0);
        let c = b.acquire(50, || waited.fetch_add(1, Relaxed) >= 2);
        assert!(waited.load(Relaxed) >= 2, "it waited");
        drop(c);
        drop(a);
        assert_eq!(b.used(), 0);
        // Alone, an object larger than the budget still goes.
        let mut big = b.acquire(500, || false);
        big.resize(700);
        assert_eq!(b.used(), 700);
        big.resize(300);
        assert_eq!(b.used(), 300);
        drop(big);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn budget_is_released_to_a_waiting_thread() {
        let b = Arc::new(Budget::new(100));
        let first = b.acquire(100, || false);
        let b2 = b.clone();
        let t = std::thread::spawn(move || {
            let _l = b2.acquire(100, || false);
            b2.used()
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(first);
        assert_eq!(t.join().unwrap(), 100);
    }
}
