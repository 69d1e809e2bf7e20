//! A source partition's worker, on its own thread: it fences the partition's earlier holder
//! (with transactions), reads where to start back from the target, and copies what its
//! pipeline hands it, transaction by transaction (or streaming, without transactions), each
//! with the partition's next source offset.
//!
//! Exactly once: a partition's worker owns a transactional producer whose id belongs to that
//! partition, so whoever holds the partition next fences it by initialising the same id (the
//! consumer group cannot fence across clusters). Records and the partition's next source
//! offset go into the target in one transaction; a worker starts from the position it reads
//! back from the target after fencing, never from the source group's offsets (those are only
//! a report for lag and `kafka-consumer-groups`).

use super::bookkeeping::{self, Refused};
use super::landed::Landed;
use super::naming::{crosses, SOURCE_HEADER};
use super::positions::{self, position_key, Position};
use super::setup::FlowSetup;
use super::unacked::{Run, Unacked};
use super::ReplicateError;
use crate::kafka::source::{Batch, Tp};
use crate::kafka::{client_config, servers, KafkaError};
use rdkafka::client::ClientContext;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Bytes of records a transaction gathers at most.
pub(super) const TXN_BYTES: usize = 4 << 20;
/// Bytes of batches queued for a worker: a transaction's worth, so that while one commits the
/// next one gathers whole (a queue of a few small batches made transactions of 1 MiB and kept
/// the pipeline waiting). A full queue makes the pipeline wait, then pauses the partition.
const QUEUE_BYTES: usize = TXN_BYTES;
/// Bytes queued for the workers of one pipeline at most (beyond one batch per partition), so
/// memory does not grow with the partitions a member holds.
const PIPELINE_QUEUE_BYTES: usize = 32 << 20;
/// Batches queued at most, whatever their size.
const QUEUE: usize = 256;

/// Bytes of the batches queued for a worker, counted for its partition and its pipeline.
pub(super) struct Queued {
    own: AtomicUsize,
    all: Arc<AtomicUsize>,
}

impl Queued {
    /// Whether a batch of `bytes` may be queued now; an empty queue takes any batch (one
    /// record may be larger than the bounds).
    pub fn room(&self, bytes: usize) -> bool {
        let own = self.own.load(Ordering::Relaxed);
        own == 0
            || (own + bytes <= QUEUE_BYTES
                && self.all.load(Ordering::Relaxed) + bytes <= PIPELINE_QUEUE_BYTES)
    }

    pub fn add(&self, bytes: usize) {
        self.own.fetch_add(bytes, Ordering::Relaxed);
        self.all.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn sub(&self, bytes: usize) {
        self.own.fetch_sub(bytes, Ordering::Relaxed);
        self.all.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// How often a worker that waits for a retry looks at whether it should stop.
const TICK: Duration = Duration::from_millis(200);
/// The target's transaction timeout: a transaction left open by a crashed worker is aborted
/// after this (or at once, when the partition's next owner fences it).
const TXN_TIMEOUT: Duration = Duration::from_secs(60);
/// After a failed transaction, wait this long before reading the records again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Without transactions: how often a partition's position is written while records stream
/// (at once when nothing is in flight), and how often a busy worker looks at acknowledgements.
const POSITION_EVERY: Duration = Duration::from_secs(1);
const ACK_POLL: Duration = Duration::from_millis(10);
/// How long a stopping worker without transactions waits for what is in flight.
const DRAIN: Duration = Duration::from_secs(10);
/// How long a worker reads its target partition at most to tell whether it holds records
/// (only when no position is stored and the partition is not empty).
const READ_TARGET: Duration = Duration::from_secs(30);
/// How long a worker may fail in a row before the log says the partition is stuck.
const STUCK_AFTER: Duration = Duration::from_secs(60);

/// Delivery reports of one worker's producer, for the offset syncs: where source
/// records landed, and the first failure.
#[derive(Default)]
struct Deliveries {
    landed: Mutex<Landed>,
    failed: Mutex<Option<String>>,
    /// One past the source offset of the newest replicated record the target acknowledged
    /// (0: none yet); without transactions, what the position may follow.
    acked_next: AtomicI64,
    /// The target partition's end offset is at least this: its end when the worker started,
    /// then one past the newest record that landed (aborted ones too, as they keep their
    /// offsets). Each position notes it, so a later start can tell a recreated target.
    target_end: AtomicI64,
}

impl Deliveries {
    fn acked(&self) -> Option<i64> {
        Some(self.acked_next.load(Ordering::Relaxed) - 1).filter(|a| *a >= 0)
    }
}

/// Marks records that are bookkeeping, not replicated records.
const BOOKKEEPING: usize = usize::MAX;

impl ClientContext for Deliveries {
    crate::kafka::msk_iam::oauth_token_hook!();
}

impl ProducerContext for Deliveries {
    /// The source offset of a replicated record.
    type DeliveryOpaque = usize;

    fn delivery(&self, r: &DeliveryResult<'_>, upstream: usize) {
        match r {
            Ok(m) if upstream != BOOKKEEPING => {
                let (u, d) = (upstream as i64, m.offset());
                self.landed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(u, d);
                self.acked_next.fetch_max(u + 1, Ordering::Relaxed);
                self.target_end.fetch_max(d + 1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err((e, _)) => {
                let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
                f.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// What a worker tells its pipeline.
pub(super) enum FromWorker {
    /// Fenced and ready at `next` (read from the target): the pipeline seeks there.
    Ready { tp: Tp, next: i64 },
    /// A transaction committed up to `next`.
    Committed { tp: Tp, next: i64 },
    /// A transaction failed and was aborted: read again from `next`.
    Rewind { tp: Tp, next: i64 },
    /// Another member holds the partition now (this producer was fenced).
    Fenced { tp: Tp },
}

pub(super) enum ToWorker {
    Batch(Batch),
    /// The pipeline sought back (epoch bumped): batches of older epochs are stale.
    Resumed {
        epoch: u64,
    },
    /// `--once`: every record before `to` was handed over; only markers (if anything) lie
    /// between the last one and `to`.
    Reached {
        to: i64,
        epoch: u64,
    },
}

pub(super) fn client_err(
    k: &crate::config::KafkaConfig,
) -> impl Fn(rdkafka::error::KafkaError) -> ReplicateError + '_ {
    move |source| {
        ReplicateError::Kafka(KafkaError::Client {
            servers: servers(k),
            source,
        })
    }
}

/// A running worker, as its pipeline holds it.
pub(super) struct WorkerHandle {
    pub tx: SyncSender<ToWorker>,
    /// Bytes of the batches in `tx` (the worker subtracts what it takes).
    pub queued: Arc<Queued>,
    thread: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl WorkerHandle {
    /// Starts the worker of a partition, copying into `target_topic`.
    pub fn spawn(
        setup: &Arc<FlowSetup>,
        tp: Tp,
        target_topic: String,
        to_pipeline: Sender<FromWorker>,
        pipeline_queued: Arc<AtomicUsize>,
    ) -> Result<Self, ReplicateError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let queued = Arc::new(Queued {
            own: AtomicUsize::new(0),
            all: pipeline_queued,
        });
        let (setup2, tp2, stop2, queued2) =
            (setup.clone(), tp.clone(), stop.clone(), queued.clone());
        let thread = std::thread::Builder::new()
            .name(format!("repl-{}", tp.partition))
            .spawn(move || {
                let w = Worker {
                    setup: &setup2,
                    tp: &tp2,
                    target: &target_topic,
                    to_pipeline: &to_pipeline,
                    stop: &stop2,
                    queued: &queued2,
                };
                if let Err(e) = w.run(rx) {
                    if !stop2.load(Ordering::Relaxed) {
                        setup2.fatal.set(e);
                    }
                }
            })
            .map_err(|e| ReplicateError::Setup(format!("cannot start a worker thread: {e}")))?;
        Ok(Self {
            tx,
            queued,
            thread: Some(thread),
            stop,
        })
    }

    /// Stops the worker and waits for it; what it left in its queue goes with it.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.tx);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let left = self.queued.own.swap(0, Ordering::Relaxed);
        self.queued.all.fetch_sub(left, Ordering::Relaxed);
    }
}

/// What a worker takes from its queue for one transaction.
struct Gather {
    batches: Vec<Batch>,
    bytes: usize,
    reached: Option<i64>,
}

impl Gather {
    /// Takes one message of the queue (`queued`: the queue's byte count, which it leaves).
    fn take(&mut self, m: ToWorker, epoch: &mut u64, queued: &Queued) {
        if let ToWorker::Batch(b) = &m {
            queued.sub(b.bytes());
        }
        match m {
            ToWorker::Batch(b) if b.epoch == *epoch => {
                self.bytes += b.bytes();
                self.batches.push(b);
            }
            ToWorker::Batch(_) => {}
            ToWorker::Resumed { epoch: e } => {
                *epoch = e;
                self.batches.clear();
                self.bytes = 0;
                self.reached = None;
            }
            ToWorker::Reached { to, epoch: e } if e == *epoch => self.reached = Some(to),
            ToWorker::Reached { .. } => {}
        }
    }
}

#[derive(Default)]
struct Done {
    next: i64,
    records: u64,
    bytes: u64,
    last_timestamp: Option<i64>,
}

enum Failure {
    Fenced,
    Retry(String),
}

fn fenced(e: &rdkafka::error::KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::ProducerFenced) | Some(RDKafkaErrorCode::InvalidProducerEpoch)
    ) || e.to_string().to_ascii_lowercase().contains("fenced")
}

fn failure(e: rdkafka::error::KafkaError) -> Failure {
    if fenced(&e) {
        Failure::Fenced
    } else {
        Failure::Retry(e.to_string())
    }
}

/// Failures no retry heals: the cluster refused the login, the TLS handshake or the ACL, or
/// the stored positions no longer describe the target.
fn refused(e: &ReplicateError) -> bool {
    matches!(
        e,
        ReplicateError::Authentication { .. }
            | ReplicateError::Bookkeeping { .. }
            | ReplicateError::Kafka(
                KafkaError::LoginRefused { .. }
                    | KafkaError::NoToken { .. }
                    | KafkaError::Tls { .. }
                    | KafkaError::NotAuthorized { .. }
            )
    )
}

/// The first failed delivery since the last look, if any.
fn take_failure(p: &ThreadedProducer<Deliveries>) -> Option<String> {
    p.context()
        .failed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
}

/// A source partition's worker: fence, read the position, then copy transaction by
/// transaction.
struct Worker<'a> {
    setup: &'a FlowSetup,
    tp: &'a Tp,
    target: &'a str,
    to_pipeline: &'a Sender<FromWorker>,
    stop: &'a AtomicBool,
    queued: &'a Queued,
}

impl Worker<'_> {
    fn producer(&self) -> Result<ThreadedProducer<Deliveries>, ReplicateError> {
        let s = self.setup;
        let mut pc = client_config(&s.target);
        pc.set("compression.type", s.task.compression.as_str())
            // With transactions, 5 ms had librdkafka's broker threads spend most of a copy's CPU
            // polling; 20 ms costs far less at the same latency (bench/README.md, Replicate).
            // Without transactions records stream without a wait for acknowledgements, and the
            // linger is what a record waits at most.
            .set("linger.ms", if s.task.exactly_once { "20" } else { "5" })
            .set("batch.size", (1 << 20).to_string())
            .set("queue.buffering.max.kbytes", (8 << 10).to_string())
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set(
                "topic.metadata.refresh.interval.ms",
                s.task
                    .topic_refresh
                    .as_millis()
                    .clamp(1000, 300_000)
                    .to_string(),
            );
        if s.task.exactly_once {
            pc.set(
                "transactional.id",
                s.names.transactional_id(&self.tp.topic, self.tp.partition),
            )
            .set(
                "transaction.timeout.ms",
                TXN_TIMEOUT.as_millis().to_string(),
            );
        }
        for (k, v) in &s.target.properties {
            pc.set(k, v);
        }
        pc.create_with_context(Deliveries::default())
            .map_err(client_err(&s.target))
    }

    /// Partitions added to the source reach the group before the controller adds them to
    /// the target: wait until the producer sees this one (else every send fails as unknown).
    fn wait_for_target_partition(&self, p: &ThreadedProducer<Deliveries>) {
        let s = self.setup;
        let since = Instant::now();
        let mut warned = false;
        while !self.stop.load(Ordering::Relaxed) {
            let known = p
                .client()
                .fetch_metadata(Some(self.target), Duration::from_secs(5))
                .ok()
                .and_then(|m| {
                    m.topics()
                        .iter()
                        .find(|t| t.name() == self.target)
                        .map(|t| t.partitions().len())
                });
            if known.is_some_and(|n| n > self.tp.partition as usize) {
                return;
            }
            if !warned && since.elapsed() >= STUCK_AFTER {
                warned = true;
                tracing::warn!(task = %s.task.name, flow = %s.flow(), topic = %self.target, partition = self.tp.partition, "the target topic does not have this partition yet; waiting for it to be added");
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Fences the partition's earlier holder (with transactions) and reads where to start:
    /// the producer, the position, and whether the target holds one yet.
    fn start(&self) -> Result<(ThreadedProducer<Deliveries>, i64, bool), ReplicateError> {
        let s = self.setup;
        let p = self.producer()?;
        if s.task.exactly_once {
            // Fences whoever held this partition before (and aborts its open transaction).
            p.init_transactions(TXN_TIMEOUT).map_err(|e| {
                super::setup::classify(
                    s.task.name.as_str(),
                    s.names.target.as_str(),
                    &s.target,
                    KafkaError::Unreachable {
                        servers: crate::kafka::servers(&s.target),
                        detail: format!("starting the transactional producer: {e}"),
                    },
                )
            })?;
        }
        self.wait_for_target_partition(&p);
        let (low, high) = p
            .client()
            .fetch_watermarks(self.target, self.tp.partition, Duration::from_secs(30))
            .map_err(|e| {
                ReplicateError::Kafka(KafkaError::Topic {
                    topic: self.target.to_string(),
                    detail: format!("watermarks of partition {}: {e}", self.tp.partition),
                })
            })?;
        let reader = s.positions_reader()?;
        let found = positions::read(&reader, &s.names.positions_topic())?;
        let stored = found.get(&self.tp.topic, self.tp.partition);
        // The start checked the partitions there were; this one may have come later, or the
        // target changed since.
        let finding = bookkeeping::judge(stored, low, high, s.shared_targets, || {
            bookkeeping::holds_committed(
                &reader,
                self.target,
                self.tp.partition,
                high,
                READ_TARGET,
            )?
            .ok_or_else(|| bookkeeping::undecided(self.target, self.tp.partition, READ_TARGET))
        })?;
        drop(reader);
        if let Some(finding) = finding {
            let refused = Refused {
                source: self.tp.topic.to_string(),
                partition: self.tp.partition,
                target: self.target.to_string(),
                low,
                high,
                finding,
            };
            return Err(ReplicateError::Bookkeeping {
                task: s.task.name.to_string(),
                flow: s.flow(),
                detail: bookkeeping::refusal(&s.names.positions_topic(), &[refused]),
            });
        }
        let noted = stored.and_then(|p| p.target_end).unwrap_or(0);
        p.context()
            .target_end
            .fetch_max(high.max(noted), Ordering::Relaxed);
        let next = match stored {
            Some(p) => p.next,
            None => s.start_offset(self.tp)?,
        };
        if stored.is_none() && !s.task.exactly_once {
            // Without transactions records land before their position: one stored now means
            // a crash before the first position is written is not taken for lost bookkeeping.
            let not_stored = |e: rdkafka::error::KafkaError| {
                ReplicateError::Kafka(KafkaError::Unreachable {
                    servers: servers(&s.target),
                    detail: format!("storing the first position: {e}"),
                })
            };
            let end = p.context().target_end.load(Ordering::Relaxed);
            self.send_position(&p, next, end).map_err(not_stored)?;
            p.flush(Duration::from_secs(30)).map_err(not_stored)?;
            return Ok((p, next, true));
        }
        Ok((p, next, stored.is_some()))
    }

    fn run(&self, rx: Receiver<ToWorker>) -> Result<(), ReplicateError> {
        let s = self.setup;
        // A cluster out of reach at the start (a worker starts at every rebalance) is waited
        // for; a refusal (login, TLS, ACL) ends the task.
        let mut pause = RETRY_PAUSE;
        let (p, mut next, mut written) = loop {
            match self.start() {
                Ok(started) => break started,
                Err(e) if !refused(&e) => {
                    if self.stop.load(Ordering::Relaxed) {
                        return Ok(());
                    }
                    s.stats.error("start");
                    tracing::warn!(task = %s.task.name, flow = %s.flow(), topic = %self.tp.topic, partition = self.tp.partition, error = %e, "cannot start copying this partition; retrying");
                    let until = Instant::now() + pause;
                    while Instant::now() < until && !self.stop.load(Ordering::Relaxed) {
                        std::thread::sleep(TICK);
                    }
                    pause = (pause * 2).min(STUCK_AFTER / 2);
                }
                Err(e) => return Err(e),
            }
        };
        tracing::debug!(task = %s.task.name, flow = %s.flow(), topic = %self.tp.topic, partition = self.tp.partition, next, "partition worker ready");
        let _ = self.to_pipeline.send(FromWorker::Ready {
            tp: self.tp.clone(),
            next,
        });
        let mut epoch = 0u64;
        let mut failing_since: Option<Instant> = None;
        let mut last_stuck_log: Option<Instant> = None;
        let mut stream = (!s.task.exactly_once).then(|| Stream::new(next, written));
        loop {
            let busy = stream.as_ref().is_some_and(Stream::busy);
            let got = if self.stop.load(Ordering::Relaxed) {
                None
            } else {
                match rx.recv_timeout(if busy {
                    ACK_POLL
                } else {
                    Duration::from_secs(1)
                }) {
                    Ok(m) => Some(Some(m)),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Some(None),
                    Err(_) => None,
                }
            };
            let Some(first) = got else {
                // Stopping (revoked or shut down): what is in flight is waited for, so the
                // position written last covers it.
                if let Some(st) = stream.as_mut() {
                    let _ = p.flush(DRAIN);
                    let _ = self.stream(&p, st, None);
                    let _ = p.flush(DRAIN);
                }
                return Ok(());
            };
            let mut g = Gather {
                batches: Vec::new(),
                bytes: 0,
                reached: None,
            };
            if let Some(first) = first {
                g.take(first, &mut epoch, self.queued);
                while g.bytes < TXN_BYTES && g.reached.is_none() {
                    match rx.try_recv() {
                        Ok(m) => g.take(m, &mut epoch, self.queued),
                        Err(_) => break,
                    }
                }
            } else if !busy {
                s.stats.lag_seconds(self.tp, 0.0);
            }
            let result = match stream.as_mut() {
                Some(st) => {
                    let r = self.stream(&p, st, Some(&g));
                    next = st.settled;
                    r
                }
                None => {
                    // --once: the position moves past trailing markers too.
                    let up_to = g.reached.filter(|&to| to > next || !written);
                    if g.batches.is_empty() && up_to.is_none() {
                        continue;
                    }
                    self.transaction(&p, &g.batches, next, up_to)
                }
            };
            match result {
                Ok(Some(done)) => {
                    failing_since = None;
                    last_stuck_log = None;
                    written = true;
                    self.count(&done);
                    next = done.next;
                    let _ = self.to_pipeline.send(FromWorker::Committed {
                        tp: self.tp.clone(),
                        next,
                    });
                }
                Ok(None) => {}
                Err(Failure::Fenced) => {
                    let _ = self.to_pipeline.send(FromWorker::Fenced {
                        tp: self.tp.clone(),
                    });
                    return Ok(());
                }
                Err(Failure::Retry(why)) => {
                    s.stats.error("transaction");
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    let stuck = since.elapsed() >= STUCK_AFTER;
                    if stuck && last_stuck_log.is_none_or(|t| t.elapsed() >= STUCK_AFTER) {
                        last_stuck_log = Some(Instant::now());
                        tracing::error!(task = %s.task.name, flow = %s.flow(), topic = %self.tp.topic, partition = self.tp.partition, seconds = since.elapsed().as_secs(), %why, "no progress on this partition: every transaction into the target fails; retrying");
                    } else if !stuck {
                        tracing::warn!(task = %s.task.name, flow = %s.flow(), topic = %self.tp.topic, partition = self.tp.partition, %why, "copying a batch failed; it is read again from the last committed position");
                    }
                    std::thread::sleep(RETRY_PAUSE);
                    // Batches already queued follow the failed ones: taking them would leave
                    // a gap. Nothing is taken until the pipeline says it sought back.
                    epoch = u64::MAX;
                    let _ = self.to_pipeline.send(FromWorker::Rewind {
                        tp: self.tp.clone(),
                        next,
                    });
                }
            }
        }
    }

    /// Records and lag of what became stored.
    fn count(&self, done: &Done) {
        let s = self.setup;
        if done.records > 0 {
            s.stats.add(&self.tp.topic, done.records, done.bytes);
        }
        if let Some(ts) = done.last_timestamp {
            let now = chrono::Utc::now().timestamp_millis();
            s.stats
                .lag_seconds(self.tp, (now - ts).max(0) as f64 / 1000.0);
        }
    }

    /// Sends the batches' records at or after `next` to the target (filtering what came from
    /// it, adding the source header).
    fn send_run(
        &self,
        p: &ThreadedProducer<Deliveries>,
        batches: &[Batch],
        next: i64,
    ) -> Result<Sent, rdkafka::error::KafkaError> {
        let s = self.setup;
        let mut out = Sent {
            last: next - 1,
            last_sent: None,
            records: 0,
            bytes: 0,
            last_timestamp: None,
        };
        let header = s.task.source_header;
        let source_alias = s.names.source.as_str().as_bytes();
        batches.iter().try_for_each(|b| {
            b.try_for_each(self.tp.partition, |r| {
                if r.offset < next {
                    return Ok(());
                }
                out.last = r.offset;
                let from = r
                    .headers
                    .iter()
                    .find(|h| h.key == SOURCE_HEADER)
                    .and_then(|h| h.value);
                if header && !crosses(from, &s.names.target) {
                    // It came from the target: sending it back would loop.
                    return Ok(());
                }
                let mut hs = OwnedHeaders::new_with_capacity(r.headers.len() + 1);
                for h in r.headers {
                    hs = hs.insert(Header {
                        key: h.key,
                        value: h.value,
                    });
                }
                if header && from.is_none() {
                    hs = hs.insert(Header {
                        key: SOURCE_HEADER,
                        value: Some(source_alias),
                    });
                }
                let mut rec = BaseRecord::with_opaque_to(self.target, r.offset as usize)
                    .partition(self.tp.partition)
                    .headers(hs);
                if let Some(k) = r.key {
                    rec = rec.key(k);
                }
                if let Some(v) = r.value {
                    rec = rec.payload(v);
                }
                if let Some(ts) = r.timestamp {
                    rec = rec.timestamp(ts);
                    out.last_timestamp = Some(ts);
                }
                out.records += 1;
                out.bytes += (r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len)) as u64;
                out.last_sent = Some(r.offset);
                send(p, rec)
            })
        })?;
        Ok(out)
    }

    /// Queues the partition's position record. `target_end`: what the target partition's end
    /// offset is at least once the record is readable (see [`Deliveries::target_end`]).
    fn send_position(
        &self,
        p: &ThreadedProducer<Deliveries>,
        next: i64,
        target_end: i64,
    ) -> Result<(), rdkafka::error::KafkaError> {
        let key = position_key(&self.tp.topic, self.tp.partition);
        let value = Position {
            next,
            target_end: Some(target_end),
        }
        .to_json();
        let positions_topic = self.setup.names.positions_topic();
        let rec = BaseRecord::with_opaque_to(&positions_topic, BOOKKEEPING)
            .partition(0)
            .key(key.as_bytes())
            .payload(&value[..]);
        send(p, rec)
    }

    /// MirrorMaker 2's offset syncs for where the records delivered since the last call landed.
    fn write_syncs(&self, p: &ThreadedProducer<Deliveries>) {
        let syncs =
            std::mem::take(&mut *p.context().landed.lock().unwrap_or_else(|e| e.into_inner()))
                .syncs();
        for (upstream, downstream) in syncs {
            self.setup
                .offset_sync(&self.tp.topic, self.tp.partition, upstream, downstream);
        }
    }

    /// Produces the batches' records (those at or after `next`) and the new position in one
    /// transaction. `up_to`: `--once`'s end, when only markers follow. `Ok(None)`: nothing new.
    fn transaction(
        &self,
        p: &ThreadedProducer<Deliveries>,
        batches: &[Batch],
        next: i64,
        up_to: Option<i64>,
    ) -> Result<Option<Done>, Failure> {
        let abort = |f: Failure| {
            let _ = p.abort_transaction(TXN_TIMEOUT);
            f
        };
        p.begin_transaction().map_err(failure)?;
        // Every earlier transaction's records have landed below this.
        let end_before = p.context().target_end.load(Ordering::Relaxed);
        *p.context().failed.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *p.context().landed.lock().unwrap_or_else(|e| e.into_inner()) = Landed::default();
        let sent = self
            .send_run(p, batches, next)
            .map_err(|e| abort(failure(e)))?;
        let new_next = sent.next(up_to);
        if new_next < next || (new_next == next && up_to.is_none()) {
            let _ = p.abort_transaction(TXN_TIMEOUT);
            return Ok(None);
        }
        // The position is read only once the transaction committed, when this transaction's
        // records are in the target too: each at its own offset at or past `end_before`.
        let target_end =
            (end_before + sent.records as i64).max(p.context().target_end.load(Ordering::Relaxed));
        self.send_position(p, new_next, target_end)
            .map_err(|e| abort(failure(e)))?;
        p.commit_transaction(TXN_TIMEOUT)
            .map_err(|e| abort(failure(e)))?;
        // A committed transaction has every record.
        let _ = take_failure(p);
        self.write_syncs(p);
        Ok(Some(Done {
            next: new_next,
            records: sent.records,
            bytes: sent.bytes,
            last_timestamp: sent.last_timestamp,
        }))
    }

    /// Without transactions: sends what was gathered (if anything) without waiting, settles
    /// the runs the target acknowledged, and writes the position when it moved and a second
    /// passed or nothing is in flight. `Ok(Some)`: a position was written. A failed delivery
    /// drops what is in flight; the caller rewinds to the settled position (at least once).
    fn stream(
        &self,
        p: &ThreadedProducer<Deliveries>,
        st: &mut Stream,
        g: Option<&Gather>,
    ) -> Result<Option<Done>, Failure> {
        let fail = |st: &mut Stream, f: Failure| {
            p.purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
            // Purged records report failures too: they belong to the runs dropped here.
            let _ = p.flush(Duration::from_secs(1));
            let _ = take_failure(p);
            // Syncs of the dropped runs would be followed by lower ones when they are sent
            // again: a rewind to the sync store. The next second's syncs cover it.
            *p.context().landed.lock().unwrap_or_else(|e| e.into_inner()) = Landed::default();
            st.unacked.clear();
            st.sent_next = st.settled;
            f
        };
        if let Some(why) = take_failure(p) {
            return Err(fail(st, Failure::Retry(why)));
        }
        if let Some(g) = g {
            // --once: the position moves past trailing markers too.
            let up_to = g
                .reached
                .filter(|&to| to > st.sent_next || st.written.is_none());
            if !g.batches.is_empty() || up_to.is_some() {
                let sent = match self.send_run(p, &g.batches, st.sent_next) {
                    Ok(sent) => sent,
                    Err(e) => return Err(fail(st, failure(e))),
                };
                let new_next = sent.next(up_to);
                if new_next > st.sent_next || up_to.is_some() {
                    st.sent_next = new_next.max(st.sent_next);
                    st.unacked.push(Run {
                        last_sent: sent.last_sent,
                        next: st.sent_next,
                        records: sent.records,
                        bytes: sent.bytes,
                        last_timestamp: sent.last_timestamp,
                    });
                }
            }
        }
        if let Some(done) = st.unacked.settle(p.context().acked()) {
            st.settled = done.next;
            st.pending.records += done.records;
            st.pending.bytes += done.bytes;
            st.pending.last_timestamp = done.last_timestamp.or(st.pending.last_timestamp);
        }
        let moved = st.written != Some(st.settled);
        if !moved || (!st.unacked.is_empty() && st.written_at.elapsed() < POSITION_EVERY) {
            return Ok(None);
        }
        // Without transactions the position follows acknowledged records only.
        let end = p.context().target_end.load(Ordering::Relaxed);
        if let Err(e) = self.send_position(p, st.settled, end) {
            return Err(fail(st, failure(e)));
        }
        st.written = Some(st.settled);
        st.written_at = Instant::now();
        self.write_syncs(p);
        let pending = std::mem::take(&mut st.pending);
        Ok(Some(Done {
            next: st.settled,
            records: pending.records,
            bytes: pending.bytes,
            last_timestamp: pending.last_timestamp,
        }))
    }
}

/// What [`Worker::send_run`] sent.
struct Sent {
    /// The last source offset looked at (sent or filtered).
    last: i64,
    last_sent: Option<i64>,
    records: u64,
    bytes: u64,
    last_timestamp: Option<i64>,
}

impl Sent {
    /// The partition's position once the run is stored: after its last record, or at
    /// `--once`'s end when only markers follow.
    fn next(&self, up_to: Option<i64>) -> i64 {
        up_to.map_or(self.last + 1, |to| to.max(self.last + 1))
    }
}

/// A worker's state without transactions.
struct Stream {
    unacked: Unacked,
    /// Where the next run starts (past what is in flight).
    sent_next: i64,
    /// Every record before it is acknowledged by the target.
    settled: i64,
    /// The position last written (`None`: the target holds none yet).
    written: Option<i64>,
    written_at: Instant,
    /// What settled since the last position was written (for the metrics).
    pending: Done,
}

impl Stream {
    fn new(next: i64, stored: bool) -> Self {
        Self {
            unacked: Unacked::default(),
            sent_next: next,
            settled: next,
            written: stored.then_some(next),
            written_at: Instant::now(),
            pending: Done::default(),
        }
    }

    /// Records in flight, or a position not written yet.
    fn busy(&self) -> bool {
        !self.unacked.is_empty() || self.written != Some(self.settled)
    }
}

/// Sends one record, waiting while the producer's queue is full.
fn send(
    p: &ThreadedProducer<Deliveries>,
    mut rec: BaseRecord<'_, [u8], [u8], usize>,
) -> Result<(), rdkafka::error::KafkaError> {
    loop {
        match p.send(rec) {
            Ok(()) => return Ok(()),
            Err((
                rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                r,
            )) => {
                rec = r;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err((e, _)) => return Err(e),
        }
    }
}
