//! The one Kafka source under every mode that consumes (dump, replicate): a member of a consumer
//! group (cooperative rebalancing, read_committed, commits only when the mode asks) that reads
//! records into per-partition batches with epochs, offers them to the mode's [`Sink`], pauses a
//! partition while its sink is full or until the sink says where to read, and stops a
//! partition at its `--once` target. It runs on the caller's thread and never blocks on a sink.

pub mod batch;
pub mod context;

pub use batch::{Batch, BATCH_BYTES};
pub use context::{AssignmentChange, LagOf, RevokeHook, SourceContext};

use super::{client_config, servers, KafkaError};
use crate::config::{ClientKind, KafkaConfig};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A topic-partition, cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tp {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl Tp {
    pub fn new(topic: &str, partition: i32) -> Self {
        Self {
            topic: Arc::from(topic),
            partition,
        }
    }

    /// A polled message's partition, reusing `last` while messages come from one partition
    /// (a run of them usually does): no allocation per message on the poll loop.
    pub fn of_message<M: Message>(last: &mut Option<Tp>, m: &M) -> Tp {
        match last {
            Some(t) if t.partition == m.partition() && &*t.topic == m.topic() => t.clone(),
            _ => {
                let t = Tp::new(m.topic(), m.partition());
                *last = Some(t.clone());
                t
            }
        }
    }
}

/// How often timers (sinks' ticks, `--once` positions, retried seeks) are looked at.
const TICK: Duration = Duration::from_millis(200);
/// A partition whose sink refuses its batch this long is paused; until then the source waits
/// for the sink instead of polling. Pausing makes librdkafka drop what it prefetched for the
/// partition and fetch it again on resume, which for a sink only briefly behind (an encoder
/// slower than the fetch) costs more than the wait.
pub const PAUSE_BEHIND: Duration = Duration::from_secs(2);
/// How long a poll waits when librdkafka's queue is empty.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// Re-check of a full prefetch queue, in ms; a fraction of the time a sink takes to drain the
/// queue at its slowest.
const FETCH_QUEUE_BACKOFF_MS: &str = "20";
/// Upper bound of one partition's share of a fetch response.
const PARTITION_FETCH_MAX: usize = 4 << 20;

/// librdkafka's fetch and queue sizes within `queue_bytes`: the response being received (a
/// quarter, `fetch.max.bytes`) and the messages queued ahead of the poll loop (the rest); the
/// queue limit does not count the response, so both come out of the share. Measured choices
/// (bench/README.md, "What moved the dump figures"):
/// - partitions fetch up to 4 MiB at a time instead of 1 MiB: fewer requests and socket reads
///   per byte, never more than one fetch response may hold;
/// - a full queue is re-checked after 20 ms instead of 1 s, so a sink slower than the network
///   (Parquet, jsonl) does not drain the queue and then sit idle.
pub fn fetch_budget(queue_bytes: usize) -> Vec<(&'static str, String)> {
    let fetch_max = (queue_bytes / 4).clamp(1 << 20, 50 << 20);
    let queue_kib = (queue_bytes.saturating_sub(fetch_max) / 1024).max(1024);
    let partition_fetch_max = fetch_max.min(PARTITION_FETCH_MAX);
    vec![
        ("queued.max.messages.kbytes", queue_kib.to_string()),
        ("fetch.max.bytes", fetch_max.to_string()),
        ("max.partition.fetch.bytes", partition_fetch_max.to_string()),
        ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS.to_string()),
    ]
}

/// How a source's consumer is set up.
pub struct Settings {
    /// The consumer group.
    pub group: String,
    pub client_id: Option<String>,
    /// The task whose metrics the consumer's lag carries.
    pub task: String,
    /// A replication flow's name, labelled on its metrics beside the task.
    pub flow: Option<String>,
    pub lag: LagOf,
    /// librdkafka properties of the mode's choosing (fetch and queue sizes, timeouts), set
    /// before the user's `[kafka.properties]`.
    pub tuning: Vec<(&'static str, String)>,
    /// Report the end of a partition (`--once` runs).
    pub partition_eof: bool,
    /// Records wait at most this long in a partly filled batch before they are offered
    /// (`None`: until librdkafka's queue runs dry).
    pub linger: Option<Duration>,
    /// Called in the rebalance callback with the partitions given up ([`RevokeHook`]).
    pub on_revoke: Option<RevokeHook>,
}

/// Creates the source's consumer.
fn consumer(k: &KafkaConfig, s: &Settings) -> Result<BaseConsumer<SourceContext>, KafkaError> {
    let mut c = client_config(k, ClientKind::Consumer);
    c.set("group.id", &s.group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        // Where a partition starts is the sink's to say once it is assigned; a position out
        // of range (retention passed it) must never jump to the end and skip what is there.
        .set("auto.offset.reset", "earliest")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("isolation.level", "read_committed")
        .set("statistics.interval.ms", "10000")
        .set(
            "enable.partition.eof",
            if s.partition_eof { "true" } else { "false" },
        );
    if let Some(id) = &s.client_id {
        c.set("client.id", id);
    }
    for (key, value) in &s.tuning {
        c.set(*key, value);
    }
    for (key, value) in k.properties_for(ClientKind::Consumer) {
        c.set(key, value);
    }
    let mut cx = SourceContext::measuring(&s.task, s.lag).on_revoke(s.on_revoke.clone());
    if let Some(f) = &s.flow {
        cx = cx.of_flow(f.clone());
    }
    let client_err = |source| KafkaError::Client {
        servers: servers(k),
        source,
    };
    let consumer: BaseConsumer<SourceContext> = c.create_with_context(cx).map_err(client_err)?;
    // AWS_MSK_IAM: a token before the first blocking call (the poll loop refreshes it later).
    crate::kafka::msk_iam::prime(consumer.client(), &c)
        .map_err(|e| client_err(rdkafka::error::KafkaError::ClientCreation(e.to_string())))?;
    Ok(consumer)
}

/// How the source reads a partition the group assigned to this member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// From where the consumer stands (the group's committed offset), up to `target`.
    Read { target: Option<i64> },
    /// Not until the sink says where ([`Source::release`]), then up to `target`.
    Hold { target: Option<i64> },
    /// Not at all (not this run's business): paused while assigned.
    Skip,
}

/// A mode's side of the source: where its batches go and what it asks of the consumer.
pub trait Sink {
    type Error;
    /// The topics to read: `Some` when they changed (the first call decides the first ones).
    fn topics(&mut self, source: &Source) -> Result<Option<Vec<String>>, Self::Error>;
    /// A partition became this member's: how to read it. Called within a poll, before the
    /// partition's first record is routed.
    fn assigned(&mut self, tp: &Tp) -> Result<Admit, Self::Error>;
    /// A partition was revoked: drop what is held for it (the source forgot it already).
    fn revoked(&mut self, tp: &Tp);
    /// Takes a batch of a partition, or hands it back while the partition's queue is full.
    fn offer(&mut self, tp: &Tp, batch: Batch) -> Result<(), Batch>;
    /// `--once`: every record of the partition before `to` was taken; beyond the last one
    /// lie transaction markers at most.
    fn reached(&mut self, source: &mut Source, tp: &Tp, to: i64);
    /// Between polls, every turn (so keep it cheap): what the sink's stages ask of the
    /// consumer. `Ok(true)` ends the run.
    fn serve(&mut self, source: &mut Source) -> Result<bool, Self::Error>;
    /// Every few hundred milliseconds: the sink's timers.
    fn tick(&mut self, source: &mut Source) -> Result<(), Self::Error>;
    /// A consumer error other than the end of a partition: `Err` ends the run.
    fn consume_error(
        &mut self,
        source: &Source,
        e: rdkafka::error::KafkaError,
    ) -> Result<(), Self::Error>;
}

/// Where a partition is in its reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    Yes,
    /// Until the sink releases it.
    Held,
    /// At this offset once the consumer takes the seek (retried each tick until then).
    Seek(i64),
    Skipped,
}

/// One assigned partition, as the source sees it.
struct Part {
    epoch: u64,
    batch: Batch,
    reading: Reading,
    target: Option<i64>,
    reached: bool,
    /// The sink heard that the target was reached.
    told: bool,
    /// Since when the sink refuses the partition's batch.
    full: Option<Instant>,
    paused: bool,
}

impl Part {
    fn wants_pause(&self) -> bool {
        self.reading != Reading::Yes
            || self.reached
            || self.full.is_some_and(|t| t.elapsed() >= PAUSE_BEHIND)
    }
}

/// The consumer and what the source knows of each partition it was assigned.
pub struct Source {
    consumer: BaseConsumer<SourceContext>,
    st: State,
}

struct State {
    /// Looked up once per polled record: foldhash, not std's SipHash (bench/README.md).
    parts: HashMap<Tp, Part, foldhash::fast::RandomState>,
    /// The partition of the last message, reused while messages come in runs.
    last: Option<Tp>,
    subscribed: Vec<String>,
    linger: Option<Duration>,
    servers: String,
}

impl Source {
    pub fn new(k: &KafkaConfig, s: &Settings) -> Result<Self, KafkaError> {
        Ok(Self {
            consumer: consumer(k, s)?,
            st: State {
                parts: HashMap::default(),
                last: None,
                subscribed: Vec::new(),
                linger: s.linger,
                servers: servers(k),
            },
        })
    }

    /// The consumer, for what the source does not do itself (metadata, watermarks, the
    /// positions librdkafka holds).
    pub fn consumer(&self) -> &BaseConsumer<SourceContext> {
        &self.consumer
    }

    /// The topics subscribed to now.
    pub fn subscribed(&self) -> &[String] {
        &self.st.subscribed
    }

    /// Reads and offers until `stop` is set, the sink ends the run, or it fails.
    pub fn run<S: Sink>(&mut self, sink: &mut S, stop: &AtomicBool) -> Result<(), S::Error> {
        self.follow_topics(sink)?;
        let mut next_tick = Instant::now() + TICK;
        let mut next_flush = self.st.linger.map(|l| Instant::now() + l);
        let mut polls: u32 = 0;
        loop {
            if stop.load(Ordering::Relaxed) || sink.serve(self)? {
                return Ok(());
            }
            if self.wait_for_sink(sink) {
                std::thread::sleep(Duration::from_millis(1));
                if Instant::now() >= next_tick {
                    next_tick = Instant::now() + TICK;
                    self.tick(sink)?;
                }
                continue;
            }
            // A non-blocking poll first: while records are queued it skips librdkafka's timeout
            // bookkeeping (a clock read per message); block only when the queue is empty.
            let polled = match self.consumer.poll(Duration::ZERO) {
                None => {
                    self.flush(sink);
                    let wait = self.st.linger.map_or(IDLE_POLL, |l| l.min(IDLE_POLL));
                    self.consumer.poll(wait)
                }
                some => some,
            };
            // Rebalances happen inside the poll: a partition assigned there is known before its
            // first record is routed, and a revoked one gone before another is.
            self.st.apply_changes(&self.consumer, sink)?;
            polls = polls.wrapping_add(1);
            let check_clock = polled.is_none() || polls.is_multiple_of(64);
            let failed = match polled {
                None => None,
                Some(Ok(m)) => {
                    self.st.route(sink, &m);
                    None
                }
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => None,
                Some(Err(e)) => Some(e),
            };
            if let Some(e) = failed {
                sink.consume_error(self, e)?;
            }
            if !check_clock {
                continue;
            }
            let now = Instant::now();
            if next_flush.is_some_and(|t| now >= t) {
                next_flush = self.st.linger.map(|l| now + l);
                self.flush(sink);
            }
            if now >= next_tick {
                next_tick = now + TICK;
                self.tick(sink)?;
            }
        }
    }

    /// Keeps the group membership alive and the sink served, without reading (every
    /// partition paused), while `busy` says the sink still has work; at most until
    /// `deadline`. `true` when the sink finished in time.
    pub fn drain<S: Sink>(
        &mut self,
        sink: &mut S,
        deadline: Instant,
        mut busy: impl FnMut(&mut S) -> bool,
    ) -> bool {
        self.pause_all();
        loop {
            let _ = sink.serve(self);
            if !busy(sink) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            let _ = self.consumer.poll(Duration::from_millis(20));
            let _ = self.st.apply_changes(&self.consumer, sink);
        }
    }

    /// Every partition's batch goes to its sink (what the sink refuses stays gathered).
    pub fn flush<S: Sink>(&mut self, sink: &mut S) {
        let tps: Vec<Tp> = self
            .st
            .parts
            .iter()
            .filter(|(_, p)| !p.batch.is_empty())
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in tps {
            self.st.offer(sink, &tp);
        }
        self.settle(sink);
    }

    /// Pauses every assigned partition (a stop: nothing more is read).
    pub fn pause_all(&mut self) {
        let tps: Vec<Tp> = self.st.parts.keys().cloned().collect();
        for tp in tps {
            if let Some(p) = self.st.parts.get_mut(&tp) {
                p.reading = Reading::Skipped;
            }
            self.sync_pause(&tp);
        }
    }

    /// Commits offsets (the next ones to read) of the group.
    pub fn commit(
        &self,
        offsets: &TopicPartitionList,
        mode: CommitMode,
    ) -> Result<(), rdkafka::error::KafkaError> {
        self.consumer.commit(offsets, mode)
    }

    /// Moves a partition to `to` and bumps its epoch, so batches read before are recognised
    /// as stale; what was gathered goes, the target counts as reached again only once read
    /// to. Until the consumer takes the seek (retried every tick), nothing of the partition
    /// is read. `None`: the partition is not assigned to this member.
    pub fn rewind(&mut self, tp: &Tp, to: i64) -> Option<u64> {
        let p = self.st.parts.get_mut(tp)?;
        p.epoch += 1;
        p.batch = Batch::new(p.epoch);
        p.full = None;
        p.reached = p.target.is_some_and(|t| to >= t);
        p.told = false;
        p.reading = Reading::Seek(to);
        let epoch = p.epoch;
        self.try_seek(tp);
        Some(epoch)
    }

    /// A held partition is read from `at` on (the sink knows now where it starts).
    pub fn release(&mut self, tp: &Tp, at: i64) {
        let Some(p) = self.st.parts.get_mut(tp) else {
            return;
        };
        p.reached |= p.target.is_some_and(|t| at >= t);
        p.reading = Reading::Seek(at);
        self.try_seek(tp);
    }

    /// A partition is not read until released (its sink lost its worker, say).
    pub fn hold(&mut self, tp: &Tp) {
        if let Some(p) = self.st.parts.get_mut(tp) {
            p.reading = Reading::Held;
            p.batch = Batch::new(p.epoch);
            p.full = None;
        }
        self.sync_pause(tp);
    }

    /// Reads a held partition again, as [`Admit`] says (the sink got it back).
    pub fn readmit(&mut self, tp: &Tp, admit: Admit) {
        if let Some(p) = self.st.parts.get_mut(tp) {
            let (reading, target) = reading_of(admit);
            p.reading = reading;
            p.target = target;
            p.reached = false;
            p.told = false;
        }
        self.sync_pause(tp);
    }

    pub fn is_assigned(&self, tp: &Tp) -> bool {
        self.st.parts.contains_key(tp)
    }

    /// The partitions this member holds.
    pub fn assigned(&self) -> impl Iterator<Item = &Tp> {
        self.st.parts.keys()
    }

    /// Nothing of the partition waits in the source to be offered.
    pub fn drained(&self, tp: &Tp) -> bool {
        self.st.parts.get(tp).is_none_or(|p| p.batch.is_empty())
    }

    /// Whether to wait for the sink instead of polling: it refuses a partition's batch, not
    /// for long. Once it refused for long, the partition is paused and polling goes on.
    fn wait_for_sink<S: Sink>(&mut self, sink: &mut S) -> bool {
        let full: Vec<Tp> = self
            .st
            .parts
            .iter()
            .filter(|(_, p)| p.full.is_some())
            .map(|(tp, _)| tp.clone())
            .collect();
        if full.is_empty() {
            return false;
        }
        let mut wait = false;
        for tp in &full {
            self.st.offer(sink, tp);
            wait |= self
                .st
                .parts
                .get(tp)
                .is_some_and(|p| p.full.is_some_and(|t| t.elapsed() < PAUSE_BEHIND));
        }
        self.settle(sink);
        wait
    }

    fn tick<S: Sink>(&mut self, sink: &mut S) -> Result<(), S::Error> {
        self.follow_topics(sink)?;
        let seeks: Vec<Tp> = self
            .st
            .parts
            .iter()
            .filter(|(_, p)| matches!(p.reading, Reading::Seek(_)))
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in seeks {
            self.try_seek(&tp);
        }
        // A partition whose position passed its target (the last offsets were transaction
        // markers, which are never delivered) reached it too.
        if self
            .st
            .parts
            .values()
            .any(|p| p.target.is_some() && !p.reached)
        {
            if let Ok(positions) = self.consumer.position() {
                for (tp, p) in self.st.parts.iter_mut() {
                    if p.reading != Reading::Yes || p.reached {
                        continue;
                    }
                    let pos = offset_of(&positions, &tp.topic, tp.partition);
                    if let (Some(pos), Some(to)) = (pos, p.target) {
                        p.reached = pos >= to;
                    }
                }
            }
        }
        self.flush(sink);
        sink.tick(self)
    }

    /// Subscribes to what the sink wants to read.
    fn follow_topics<S: Sink>(&mut self, sink: &mut S) -> Result<(), S::Error> {
        let Some(wanted) = sink.topics(self)? else {
            return Ok(());
        };
        if wanted == self.st.subscribed {
            return Ok(());
        }
        let names: Vec<&str> = wanted.iter().map(String::as_str).collect();
        let r = if names.is_empty() {
            self.consumer.unsubscribe();
            Ok(())
        } else {
            self.consumer.subscribe(&names)
        };
        match r {
            Ok(()) => {
                tracing::info!(topics = ?wanted, "subscribed");
                self.st.subscribed = wanted;
            }
            Err(e) => {
                return sink.consume_error(self, e);
            }
        }
        Ok(())
    }

    /// Tells the sink of reached targets and brings pauses in line with what each partition
    /// wants.
    fn settle<S: Sink>(&mut self, sink: &mut S) {
        let due: Vec<(Tp, i64)> = self
            .st
            .parts
            .iter()
            .filter(|(_, p)| p.reached && !p.told && p.batch.is_empty() && p.full.is_none())
            .filter_map(|(tp, p)| p.target.map(|t| (tp.clone(), t)))
            .collect();
        for (tp, to) in due {
            if let Some(p) = self.st.parts.get_mut(&tp) {
                p.told = true;
            }
            sink.reached(self, &tp, to);
        }
        let change: Vec<Tp> = self
            .st
            .parts
            .iter()
            .filter(|(_, p)| p.wants_pause() != p.paused)
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in change {
            self.sync_pause(&tp);
        }
    }

    fn sync_pause(&mut self, tp: &Tp) {
        self.st.sync_pause(&self.consumer, tp);
    }

    fn try_seek(&mut self, tp: &Tp) {
        let Some(p) = self.st.parts.get_mut(tp) else {
            return;
        };
        let Reading::Seek(to) = p.reading else {
            return;
        };
        match self.consumer.seek(
            &tp.topic,
            tp.partition,
            Offset::Offset(to),
            Duration::from_secs(5),
        ) {
            Ok(()) => {
                p.reading = Reading::Yes;
                tracing::debug!(topic = %tp.topic, partition = tp.partition, offset = to, "partition sought");
            }
            Err(e) => {
                tracing::debug!(topic = %tp.topic, partition = tp.partition, offset = to, error = %e, "seek not possible yet; retried");
            }
        }
        self.sync_pause(tp);
    }

    /// The servers, for messages.
    pub fn servers(&self) -> &str {
        &self.st.servers
    }
}

fn reading_of(admit: Admit) -> (Reading, Option<i64>) {
    match admit {
        Admit::Read { target } => (Reading::Yes, target),
        Admit::Hold { target } => (Reading::Held, target),
        Admit::Skip => (Reading::Skipped, None),
    }
}

impl State {
    /// Applies rebalance results: assigned partitions are admitted as the sink says, revoked
    /// ones forgotten (and the sink told).
    fn apply_changes<S: Sink>(
        &mut self,
        c: &BaseConsumer<SourceContext>,
        sink: &mut S,
    ) -> Result<(), S::Error> {
        for change in c.context().take_changes() {
            match change {
                AssignmentChange::Assigned(list) => {
                    for (topic, partition) in list {
                        let tp = Tp::new(&topic, partition);
                        if self.parts.contains_key(&tp) {
                            continue;
                        }
                        let (reading, target) = reading_of(sink.assigned(&tp)?);
                        self.parts.insert(
                            tp.clone(),
                            Part {
                                epoch: 0,
                                batch: Batch::new(0),
                                reading,
                                target,
                                reached: false,
                                told: false,
                                full: None,
                                paused: false,
                            },
                        );
                        self.sync_pause(c, &tp);
                    }
                }
                AssignmentChange::Revoked(list) => {
                    for (topic, partition) in list {
                        let tp = Tp::new(&topic, partition);
                        if self.parts.remove(&tp).is_some() {
                            sink.revoked(&tp);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn sync_pause(&mut self, c: &BaseConsumer<SourceContext>, tp: &Tp) {
        let Some(p) = self.parts.get_mut(tp) else {
            return;
        };
        let want = p.wants_pause();
        if want == p.paused {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&tp.topic, tp.partition);
        let r = if want { c.pause(&tpl) } else { c.resume(&tpl) };
        match r {
            Ok(()) => p.paused = want,
            Err(e) => {
                tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "pause/resume failed")
            }
        }
    }

    /// Hands a message to its partition's batch.
    fn route<S: Sink, M: Message>(&mut self, sink: &mut S, m: &M) {
        let tp = Tp::of_message(&mut self.last, m);
        let Some(p) = self.parts.get_mut(&tp) else {
            return;
        };
        if p.reading != Reading::Yes || p.reached {
            // Fetched before a seek, or past the target: read again when it matters.
            return;
        }
        if let Some(to) = p.target {
            if m.offset() >= to {
                p.reached = true;
                self.offer(sink, &tp);
                return;
            }
            p.reached = m.offset() + 1 >= to;
        }
        p.batch.push(m);
        if p.batch.is_full() || p.reached {
            self.offer(sink, &tp);
        }
    }

    /// Offers the partition's batch; a refused one stays gathered.
    fn offer<S: Sink>(&mut self, sink: &mut S, tp: &Tp) {
        let Some(p) = self.parts.get_mut(tp) else {
            return;
        };
        if p.batch.is_empty() {
            p.full = None;
            return;
        }
        let batch = std::mem::replace(&mut p.batch, Batch::new(p.epoch));
        match sink.offer(tp, batch) {
            Ok(()) => p.full = None,
            Err(back) => {
                p.batch = back;
                p.full.get_or_insert_with(Instant::now);
            }
        }
    }
}

/// The offset of a partition in a list (`None`: not there, or a logical offset).
pub fn offset_of(tpl: &TopicPartitionList, topic: &str, partition: i32) -> Option<i64> {
    match tpl.find_partition(topic, partition).map(|e| e.offset()) {
        Some(Offset::Offset(o)) => Some(o),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(queue_bytes: usize, key: &str) -> usize {
        let all = fetch_budget(queue_bytes);
        let found = all.iter().find(|(k, _)| *k == key);
        found
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} missing or not a number in {all:?}"))
    }

    #[test]
    fn the_default_budget_fetches_4_mib_per_partition_and_rechecks_a_full_queue_quickly() {
        // The default dump budget of 256 MiB gives librdkafka an eighth: the response being
        // received and the queue together.
        let queue = (256 << 20) / 8;
        assert_eq!(setting(queue, "queued.max.messages.kbytes"), 24 * 1024);
        assert_eq!(setting(queue, "fetch.max.bytes"), 8 << 20);
        assert_eq!(setting(queue, "max.partition.fetch.bytes"), 4 << 20);
        assert_eq!(setting(queue, "fetch.queue.backoff.ms"), 20);
    }

    #[test]
    fn a_partition_never_fetches_more_than_a_whole_fetch_may_hold() {
        for queue in [0, 1 << 10, 1 << 20, 3 << 20, 8 << 20, 64 << 20, 1 << 30] {
            let fetch = setting(queue, "fetch.max.bytes");
            let partition = setting(queue, "max.partition.fetch.bytes");
            assert!(partition <= fetch, "queue {queue}: {partition} > {fetch}");
            assert!(
                (1 << 20..=50 << 20).contains(&fetch),
                "queue {queue}: fetch {fetch}"
            );
            assert!(partition >= 1 << 20, "queue {queue}: partition {partition}");
        }
        // A small queue keeps librdkafka's 1 MiB floor instead of starving a partition.
        assert_eq!(setting(2 << 20, "max.partition.fetch.bytes"), 1 << 20);
    }

    fn part(reading: Reading) -> Part {
        Part {
            epoch: 0,
            batch: Batch::new(0),
            reading,
            target: None,
            reached: false,
            told: false,
            full: None,
            paused: false,
        }
    }

    #[test]
    fn a_partition_is_paused_while_held_reached_or_long_refused() {
        assert!(!part(Reading::Yes).wants_pause());
        assert!(part(Reading::Held).wants_pause());
        assert!(part(Reading::Seek(5)).wants_pause());
        assert!(part(Reading::Skipped).wants_pause());
        let mut p = part(Reading::Yes);
        p.reached = true;
        assert!(p.wants_pause());
        let mut p = part(Reading::Yes);
        p.full = Some(Instant::now());
        assert!(
            !p.wants_pause(),
            "briefly refused: the source waits instead"
        );
        p.full = Instant::now().checked_sub(PAUSE_BEHIND);
        assert!(p.wants_pause());
    }
}
