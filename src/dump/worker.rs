//! One dump task: poll records, append them to per-partition files, close files on the roll
//! rules, store them, and only then commit their offsets.
//!
//! Ordering per partition is strict: an object is stored, then its offsets are committed, and
//! the next object of that partition is not stored before that commit succeeded. So after a
//! crash at most the last stored object is re-read, and it is rewritten under the same key.

use super::consumer::{self, AssignmentChange, DumpContext};
use super::roll::{self, RollReason};
use super::staging::{Payload, Staging};
use super::{DumpError, Summary};
use crate::config::{DumpTask, KafkaConfig, StartOffset, TimeSource, TopicSelector};
use crate::format::{Encoder, HeaderView, RecordView, TimestampType};
use crate::layout::{object_key, ObjectName};
use crate::store::ObjectStore;
use chrono::NaiveDateTime;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often timers (interval rolls, retries, memory, `--once` progress) are checked.
const TICK: Duration = Duration::from_millis(200);
/// One attempt to store a batch of objects may take this long before it counts as failed
/// (the SDK retries inside it); keeps the consumer polled well within max.poll.interval.ms.
const STORE_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(120);
/// In `--once` mode, give up (and exit non-zero) when the store stays down this long.
const ONCE_OUTAGE_LIMIT: Duration = Duration::from_secs(300);
/// In `--once` mode, partitions must be assigned within this time.
const ONCE_ASSIGN_TIMEOUT: Duration = Duration::from_secs(60);

/// A file being written.
struct OpenFile {
    encoder: Encoder<Staging>,
    key: String,
    last_offset: i64,
    period: NaiveDateTime,
    /// UTC ms span of `period` when exact: records inside it skip the time-zone arithmetic.
    span: Option<(i64, i64)>,
    opened_at: Instant,
}

/// An encoded object waiting to be stored (first try, or retry after a failure).
struct Ready {
    key: String,
    payload: Payload,
    bytes: u64,
    records: u64,
    next_offset: i64,
}

#[derive(Default)]
struct PartitionState {
    file: Option<OpenFile>,
    ready: VecDeque<Ready>,
    /// Stored but not yet committed: the offset to commit.
    uncommitted: Option<i64>,
    /// `--once`: the high watermark at assignment; done once reached.
    target: Option<i64>,
    next_offset: Option<i64>,
}

impl PartitionState {
    fn memory(&self) -> usize {
        self.file.as_ref().map_or(0, |f| f.encoder.memory_bytes())
            + self
                .ready
                .iter()
                .map(|r| r.payload.memory_bytes())
                .sum::<usize>()
    }

    fn idle(&self) -> bool {
        self.file.is_none() && self.ready.is_empty() && self.uncommitted.is_none()
    }

    fn reached_target(&self) -> bool {
        matches!((self.target, self.next_offset), (Some(t), Some(n)) if n >= t)
    }
}

struct Metrics {
    consumed_records: metrics::Counter,
    consumed_bytes: metrics::Counter,
    written_records: metrics::Counter,
    written_bytes: metrics::Counter,
    objects: metrics::Counter,
    upload_seconds: metrics::Histogram,
    store_errors: metrics::Counter,
    commit_errors: metrics::Counter,
    buffered: metrics::Gauge,
}

impl Metrics {
    fn new(task: &str) -> Self {
        let t = task.to_string();
        Self {
            consumed_records: metrics::counter!("strata_dump_records_consumed_total", "task" => t.clone()),
            consumed_bytes: metrics::counter!("strata_dump_bytes_consumed_total", "task" => t.clone()),
            written_records: metrics::counter!("strata_dump_records_written_total", "task" => t.clone()),
            written_bytes: metrics::counter!("strata_dump_bytes_written_total", "task" => t.clone()),
            objects: metrics::counter!("strata_dump_objects_written_total", "task" => t.clone()),
            upload_seconds: metrics::histogram!("strata_dump_upload_seconds", "task" => t.clone()),
            store_errors: metrics::counter!("strata_dump_errors_total", "task" => t.clone(), "kind" => "store"),
            commit_errors: metrics::counter!("strata_dump_errors_total", "task" => t.clone(), "kind" => "commit"),
            buffered: metrics::gauge!("strata_dump_buffered_bytes", "task" => t),
        }
    }
}

pub(super) struct Worker {
    consumer: BaseConsumer<DumpContext>,
    state: State,
}

/// Everything but the consumer, so a borrowed message and the state can be used together.
struct State {
    task: DumpTask,
    store: Arc<dyn ObjectStore>,
    rt: tokio::runtime::Handle,
    parts: BTreeMap<(String, i32), PartitionState>,
    budget: usize,
    paused: bool,
    once: bool,
    stop: Arc<AtomicBool>,
    backoff: Option<Duration>,
    retry_at: Option<Instant>,
    outage_since: Option<Instant>,
    subscribed: Vec<String>,
    next_refresh: Instant,
    metrics: Metrics,
    /// Records and bytes consumed since the metrics were last updated (once per tick).
    consumed: (u64, u64),
    /// The key of the partition of the last message, reused while messages come in runs.
    last_key: (String, i32),
    summary: Summary,
}

impl Worker {
    pub(super) fn new(
        kafka: &KafkaConfig,
        task: DumpTask,
        store: Arc<dyn ObjectStore>,
        rt: tokio::runtime::Handle,
        memory: usize,
        once: bool,
        stop: Arc<AtomicBool>,
    ) -> Result<Self, DumpError> {
        let queue = memory / consumer::QUEUE_SHARE;
        let consumer = consumer::create(kafka, &task, queue, once)?;
        Ok(Self {
            consumer,
            state: State {
                metrics: Metrics::new(task.name.as_str()),
                store,
                rt,
                parts: BTreeMap::new(),
                budget: memory - queue,
                paused: false,
                once,
                stop,
                backoff: None,
                retry_at: None,
                outage_since: None,
                subscribed: Vec::new(),
                next_refresh: Instant::now(),
                consumed: (0, 0),
                last_key: (String::new(), -1),
                summary: Summary {
                    task: task.name.to_string(),
                    ..Summary::default()
                },
                task,
            },
        })
    }

    pub(super) fn run(self) -> Result<Summary, DumpError> {
        let Self {
            consumer: c,
            state: mut s,
        } = self;
        let started = Instant::now();
        s.refresh_subscription(&c)?;
        let mut next_tick = Instant::now() + TICK;
        let mut seen_assignment = false;
        let mut polls: u32 = 0;
        loop {
            if s.stop.load(Ordering::Relaxed) {
                break;
            }
            // A non-blocking poll first: while records are queued it skips librdkafka's timeout
            // bookkeeping (a clock read per message); block only when the queue is empty.
            let polled = match c.poll(Duration::ZERO) {
                None => c.poll(Duration::from_millis(100)),
                some => some,
            };
            seen_assignment |= s.apply_changes(&c)?;
            // Reading the clock per message shows in profiles: look every 64 messages.
            polls = polls.wrapping_add(1);
            let check_clock = polled.is_none() || polls % 64 == 0;
            match polled {
                None => {}
                Some(Ok(m)) => s.on_message(&c, &m)?,
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => {
                    tracing::warn!(task = %s.task.name, error = %e, "consumer error; librdkafka retries")
                }
            }
            if check_clock && Instant::now() >= next_tick {
                next_tick = Instant::now() + TICK;
                s.tick(&c)?;
                if s.once {
                    if !seen_assignment && started.elapsed() > ONCE_ASSIGN_TIMEOUT {
                        return Err(DumpError::NoAssignment {
                            task: s.task.name.to_string(),
                            topics: s.task.topics.to_string(),
                        });
                    }
                    if seen_assignment && s.once_complete(&c) {
                        break;
                    }
                }
            }
        }
        s.shutdown(&c)?;
        // Dropping a consumer leaves the group and can block; this is the worker's own thread.
        drop(c);
        Ok(s.summary)
    }
}

impl State {
    /// Subscribes to the task's topics; for a regex, re-lists topics so new ones are picked up.
    fn refresh_subscription(&mut self, c: &BaseConsumer<DumpContext>) -> Result<(), DumpError> {
        if Instant::now() < self.next_refresh {
            return Ok(());
        }
        self.next_refresh = Instant::now() + self.task.topic_refresh;
        let wanted: Vec<String> = match &self.task.topics {
            TopicSelector::List(l) => l.clone(),
            TopicSelector::Regex(_) => {
                let md = match c.fetch_metadata(None, Duration::from_secs(10)) {
                    Ok(md) => md,
                    Err(e) if !self.subscribed.is_empty() => {
                        tracing::warn!(task = %self.task.name, error = %e, "cannot list topics; keeping the current subscription");
                        return Ok(());
                    }
                    Err(e) => {
                        return Err(DumpError::Kafka(crate::kafka::KafkaError::Unreachable {
                            servers: "the configured brokers".into(),
                            detail: e.to_string(),
                        }))
                    }
                };
                let mut t: Vec<String> = md
                    .topics()
                    .iter()
                    .map(|t| t.name().to_string())
                    .filter(|n| self.task.topics.matches(n))
                    .collect();
                t.sort();
                t
            }
        };
        if wanted != self.subscribed {
            if self.once && self.subscribed.is_empty() {
                self.check_topics_exist(c, &wanted)?;
            }
            let names: Vec<&str> = wanted.iter().map(String::as_str).collect();
            if names.is_empty() {
                c.unsubscribe();
            } else {
                c.subscribe(&names).map_err(|e| {
                    DumpError::Kafka(crate::kafka::KafkaError::Client {
                        servers: "the configured brokers".into(),
                        source: e,
                    })
                })?;
            }
            tracing::info!(task = %self.task.name, topics = ?wanted, "subscribed");
            self.subscribed = wanted;
        }
        Ok(())
    }

    /// `--once` must not succeed silently when there is nothing it could read.
    fn check_topics_exist(
        &self,
        c: &BaseConsumer<DumpContext>,
        wanted: &[String],
    ) -> Result<(), DumpError> {
        if wanted.is_empty() {
            return Err(DumpError::NoTopics {
                task: self.task.name.to_string(),
                topics: self.task.topics.to_string(),
            });
        }
        let md = c
            .fetch_metadata(None, Duration::from_secs(10))
            .map_err(|e| {
                DumpError::Kafka(crate::kafka::KafkaError::Unreachable {
                    servers: "the configured brokers".into(),
                    detail: e.to_string(),
                })
            })?;
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|w| {
                !md.topics()
                    .iter()
                    .any(|t| t.name() == w.as_str() && t.error().is_none())
            })
            .collect();
        if !missing.is_empty() {
            return Err(DumpError::NoTopics {
                task: self.task.name.to_string(),
                topics: format!("{missing:?}"),
            });
        }
        Ok(())
    }

    /// Applies rebalance results; returns whether any partition is assigned now.
    fn apply_changes(&mut self, c: &BaseConsumer<DumpContext>) -> Result<bool, DumpError> {
        for change in c.context().take_changes() {
            match change {
                AssignmentChange::Assigned(list) => {
                    for tp in &list {
                        self.parts.entry(tp.clone()).or_default();
                    }
                    if self.once || self.task.start_offset == StartOffset::Latest {
                        self.note_start_positions(c, &list)?;
                    }
                    if self.paused {
                        self.set_paused(c, true);
                    }
                }
                AssignmentChange::Revoked(list) => {
                    for tp in list {
                        if let Some(state) = self.parts.remove(&tp) {
                            let buffered = state.file.as_ref().map_or(0, |f| f.encoder.records())
                                + state.ready.iter().map(|r| r.records).sum::<u64>();
                            if buffered > 0 {
                                tracing::info!(task = %self.task.name, topic = %tp.0, partition = tp.1, records = buffered, "partition revoked: dropping its uncommitted buffer; its new owner re-reads from the committed offset");
                            }
                        }
                    }
                }
            }
        }
        Ok(!self.parts.is_empty())
    }

    /// Where each newly assigned partition starts and ends now. A group without a committed
    /// offset that starts at `latest` commits that position at once: otherwise a run that
    /// stores nothing commits nothing, and the next run starts at the (later) end again,
    /// skipping what arrived in between. `--once` also notes the high watermark as its target.
    fn note_start_positions(
        &mut self,
        c: &BaseConsumer<DumpContext>,
        tps: &[(String, i32)],
    ) -> Result<(), DumpError> {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in tps {
            tpl.add_partition(t, *p);
        }
        let committed = c
            .committed_offsets(tpl, Duration::from_secs(30))
            .map_err(|e| {
                DumpError::Kafka(crate::kafka::KafkaError::Unreachable {
                    servers: "the group coordinator".into(),
                    detail: e.to_string(),
                })
            })?;
        let mut initial = TopicPartitionList::new();
        for (t, p) in tps {
            let (low, high) = c
                .fetch_watermarks(t, *p, Duration::from_secs(30))
                .map_err(|e| {
                    DumpError::Kafka(crate::kafka::KafkaError::Topic {
                        topic: t.clone(),
                        detail: format!("watermarks of partition {p}: {e}"),
                    })
                })?;
            let start = match committed.find_partition(t, *p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o.max(low),
                _ => match self.task.start_offset {
                    StartOffset::Earliest => low,
                    StartOffset::Latest => {
                        let _ = initial.add_partition_offset(t, *p, Offset::Offset(high));
                        high
                    }
                },
            };
            if self.once {
                if let Some(s) = self.parts.get_mut(&(t.clone(), *p)) {
                    s.target = Some(high);
                    s.next_offset = Some(start);
                }
                tracing::info!(task = %self.task.name, topic = %t, partition = p, from = start, to = high, "--once: reading up to the high watermark noted at start");
            }
        }
        if initial.count() > 0 {
            if let Err(e) = c.commit(&initial, CommitMode::Sync) {
                tracing::warn!(task = %self.task.name, error = %e, "could not commit the starting position of a new group; a restart before the first upload starts at the end again");
            }
        }
        Ok(())
    }

    fn once_complete(&mut self, c: &BaseConsumer<DumpContext>) -> bool {
        // Control records (transaction markers) at the end are never delivered; the consumer
        // position moves past them, so it also counts as progress.
        if let Ok(pos) = c.position() {
            for e in pos.elements() {
                if let (Offset::Offset(o), Some(s)) = (
                    e.offset(),
                    self.parts.get_mut(&(e.topic().to_string(), e.partition())),
                ) {
                    if s.next_offset.is_none_or(|n| o > n) {
                        s.next_offset = Some(o);
                    }
                }
            }
        }
        self.parts.values().all(PartitionState::reached_target)
    }

    fn on_message(
        &mut self,
        c: &BaseConsumer<DumpContext>,
        m: &BorrowedMessage<'_>,
    ) -> Result<(), DumpError> {
        // Messages come in runs per partition: reuse the key instead of allocating per record.
        if self.last_key.1 != m.partition() || self.last_key.0 != m.topic() {
            self.last_key = (m.topic().to_string(), m.partition());
        }
        let Some(state) = self.parts.get(&self.last_key) else {
            return Ok(());
        };
        if self.once && state.target.is_some_and(|t| m.offset() >= t) {
            // Past what `--once` was asked to read: leave it for the next run.
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(m.topic(), m.partition());
            let _ = c.pause(&tpl);
            return Ok(());
        }
        let (ts, ts_type) = match m.timestamp() {
            rdkafka::Timestamp::CreateTime(t) => (Some(t), TimestampType::CreateTime),
            rdkafka::Timestamp::LogAppendTime(t) => (Some(t), TimestampType::LogAppendTime),
            rdkafka::Timestamp::NotAvailable => (None, TimestampType::NotAvailable),
        };
        let placed_at = match self.task.time_source {
            TimeSource::Record => ts.unwrap_or_else(now_ms),
            TimeSource::Dump => now_ms(),
        };
        let open = state.file.as_ref();
        let period = match open {
            Some(f) if f.span.is_some_and(|(a, b)| a <= placed_at && placed_at < b) => f.period,
            _ => self
                .task
                .time_directory
                .period_start(placed_at, self.task.time_zone),
        };
        if open.is_some_and(|f| roll::rolls_before(f.period, period)) {
            let tp = self.last_key.clone();
            self.close_file(&tp, RollReason::TimeDirectory)?;
            self.store_ready(c)?;
        }
        let headers: Vec<HeaderView<'_>> = m
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| HeaderView {
                        key: h.key,
                        value: h.value,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let view = RecordView {
            partition: m.partition(),
            offset: m.offset(),
            timestamp: ts,
            timestamp_type: ts_type,
            key: m.key(),
            value: m.payload(),
            headers: &headers,
        };
        let Some(state) = self.parts.get_mut(&self.last_key) else {
            return Ok(());
        };
        let file = match &mut state.file {
            Some(f) => f,
            none => {
                let time_dir = self.task.time_directory.render(period);
                let name = ObjectName {
                    topic: m.topic().to_string(),
                    partition: m.partition(),
                    first_offset: m.offset(),
                    extension: self.task.format.extension().to_string(),
                };
                let key = object_key(&self.task.directory, &time_dir, &name);
                let staging = Staging::for_key(self.store.as_ref(), &key).map_err(|source| {
                    DumpError::Store {
                        task: self.task.name.to_string(),
                        source,
                    }
                })?;
                none.insert(OpenFile {
                    encoder: Encoder::new(&self.task.format, m.topic(), staging).map_err(|e| {
                        DumpError::Encode {
                            task: self.task.name.to_string(),
                            detail: e.to_string(),
                        }
                    })?,
                    key,
                    last_offset: m.offset(),
                    span: self
                        .task
                        .time_directory
                        .exact_span(period, self.task.time_zone),
                    period,
                    opened_at: Instant::now(),
                })
            }
        };
        file.encoder.append(&view).map_err(|e| DumpError::Encode {
            task: self.task.name.to_string(),
            detail: e.to_string(),
        })?;
        file.last_offset = m.offset();
        let full =
            roll::rolls_on_size(file.encoder.output_bytes(), self.task.max_file_size.bytes());
        state.next_offset = Some(m.offset() + 1);
        self.consumed.0 += 1;
        self.consumed.1 += (m.payload_len() + m.key().map_or(0, <[u8]>::len)) as u64;
        if full {
            let tp = self.last_key.clone();
            self.close_file(&tp, RollReason::Size)?;
            self.store_ready(c)?;
        }
        Ok(())
    }

    /// Encodes the open file of a partition into a [`Ready`] object.
    fn close_file(&mut self, tp: &(String, i32), reason: RollReason) -> Result<(), DumpError> {
        let Some(state) = self.parts.get_mut(tp) else {
            return Ok(());
        };
        let Some(file) = state.file.take() else {
            return Ok(());
        };
        let encode_err = |e: String| DumpError::Encode {
            task: self.task.name.to_string(),
            detail: format!("{}: {e}", file.key),
        };
        let done = file
            .encoder
            .finish()
            .map_err(|e| encode_err(e.to_string()))?;
        if done.ambiguous > 0 {
            tracing::warn!(task = %self.task.name, topic = %tp.0, partition = tp.1, records = done.ambiguous, "records contain the record delimiter or key separator: restore cannot split them back exactly; use format = \"jsonl\" or \"parquet\" for such data");
        }
        let (payload, bytes) = done
            .out
            .into_payload()
            .map_err(|e| encode_err(e.to_string()))?;
        tracing::debug!(task = %self.task.name, key = %file.key, reason = reason.as_str(), records = done.records, "file closed");
        state.ready.push_back(Ready {
            key: file.key,
            payload,
            bytes,
            records: done.records,
            next_offset: file.last_offset + 1,
        });
        Ok(())
    }

    /// Stores the next ready object of every partition whose previous object is committed,
    /// concurrently, then commits their offsets in one request. Repeats while progress is made.
    fn store_ready(&mut self, c: &BaseConsumer<DumpContext>) -> Result<(), DumpError> {
        loop {
            if self.retry_at.is_some_and(|t| Instant::now() < t) {
                return Ok(());
            }
            self.commit_pending(c);
            let batch: Vec<((String, i32), String, Payload)> = self
                .parts
                .iter()
                .filter(|(_, s)| s.uncommitted.is_none())
                .filter_map(|(tp, s)| {
                    s.ready
                        .front()
                        .map(|r| (tp.clone(), r.key.clone(), r.payload.clone()))
                })
                .collect();
            if batch.is_empty() {
                return Ok(());
            }
            let store = self.store.clone();
            let started = Instant::now();
            let results = self.rt.block_on(async move {
                let puts = batch.into_iter().map(|(tp, key, payload)| {
                    let store = store.clone();
                    async move {
                        let t0 = Instant::now();
                        let r = tokio::time::timeout(
                            STORE_ATTEMPT_TIMEOUT,
                            payload.store(store.as_ref(), &key),
                        )
                        .await;
                        let r = match r {
                            Ok(r) => r,
                            Err(_) => Err(crate::store::StoreError::new(
                                crate::store::ErrorKind::Unreachable,
                                store.location(&key),
                                format!("no answer within {} s", STORE_ATTEMPT_TIMEOUT.as_secs()),
                            )),
                        };
                        (tp, key, r, t0.elapsed())
                    }
                });
                futures::future::join_all(puts).await
            });
            let mut failed = None;
            for (tp, key, r, took) in results {
                match r {
                    Ok(()) => {
                        let Some(state) = self.parts.get_mut(&tp) else {
                            continue;
                        };
                        let Some(ready) = state.ready.pop_front() else {
                            continue;
                        };
                        state.uncommitted = Some(ready.next_offset);
                        self.metrics.objects.increment(1);
                        self.metrics.written_records.increment(ready.records);
                        self.metrics.written_bytes.increment(ready.bytes);
                        self.metrics.upload_seconds.record(took.as_secs_f64());
                        self.summary.objects += 1;
                        self.summary.records += ready.records;
                        self.summary.bytes += ready.bytes;
                        tracing::info!(task = %self.task.name, object = %self.store.location(&key), records = ready.records, bytes = ready.bytes, ms = took.as_millis() as u64, "stored");
                    }
                    Err(e) => {
                        self.metrics.store_errors.increment(1);
                        failed = Some(e);
                    }
                }
            }
            self.commit_pending(c);
            if let Some(e) = failed {
                let backoff = roll::next_backoff(self.backoff);
                self.backoff = Some(backoff);
                self.retry_at = Some(Instant::now() + backoff);
                let since = *self.outage_since.get_or_insert(started);
                tracing::warn!(task = %self.task.name, error = %e, retry_in_s = backoff.as_secs(), "storing failed; offsets stay uncommitted and the data stays buffered");
                if self.once && since.elapsed() > ONCE_OUTAGE_LIMIT {
                    return Err(DumpError::Store {
                        task: self.task.name.to_string(),
                        source: e,
                    });
                }
                if !e.is_transient() && matches!(e.kind, crate::store::ErrorKind::InvalidInput) {
                    return Err(DumpError::Store {
                        task: self.task.name.to_string(),
                        source: e,
                    });
                }
                return Ok(());
            }
            self.backoff = None;
            self.retry_at = None;
            self.outage_since = None;
        }
    }

    /// Commits every stored-but-uncommitted offset; failures are retried on the next call and
    /// hold back that partition's next object.
    fn commit_pending(&mut self, c: &BaseConsumer<DumpContext>) {
        let mut tpl = TopicPartitionList::new();
        for ((t, p), s) in &self.parts {
            if let Some(o) = s.uncommitted {
                let _ = tpl.add_partition_offset(t, *p, Offset::Offset(o));
            }
        }
        if tpl.count() == 0 {
            return;
        }
        match c.commit(&tpl, CommitMode::Sync) {
            Ok(()) => {
                for s in self.parts.values_mut() {
                    s.uncommitted = None;
                }
            }
            Err(e) => {
                self.metrics.commit_errors.increment(1);
                tracing::warn!(task = %self.task.name, error = %e, "offset commit failed; the objects are stored, the commit is retried");
            }
        }
    }

    fn tick(&mut self, c: &BaseConsumer<DumpContext>) -> Result<(), DumpError> {
        let (records, bytes) = std::mem::take(&mut self.consumed);
        self.metrics.consumed_records.increment(records);
        self.metrics.consumed_bytes.increment(bytes);
        if !self.once {
            self.refresh_subscription(c)?;
        }
        let now = Instant::now();
        let due: Vec<(String, i32)> = self
            .parts
            .iter()
            .filter(|(_, s)| {
                s.file
                    .as_ref()
                    .is_some_and(|f| roll::interval_due(f.opened_at, now, self.task.interval))
            })
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in &due {
            self.close_file(tp, RollReason::Interval)?;
        }
        if self.once {
            let done: Vec<(String, i32)> = self
                .parts
                .iter()
                .filter(|(_, s)| s.file.is_some() && s.reached_target())
                .map(|(tp, _)| tp.clone())
                .collect();
            for tp in &done {
                self.close_file(tp, RollReason::Shutdown)?;
            }
        }
        self.enforce_budget()?;
        self.store_ready(c)?;
        let total: usize = self.parts.values().map(PartitionState::memory).sum();
        self.metrics.buffered.set(total as f64);
        let should_pause = total > self.budget;
        let should_resume = total < self.budget / 4 * 3;
        if should_pause && !self.paused {
            tracing::warn!(task = %self.task.name, buffered = total, budget = self.budget, "buffer budget full: pausing consumption until the store takes data again");
            self.set_paused(c, true);
        } else if self.paused && should_resume {
            tracing::info!(task = %self.task.name, buffered = total, "resuming consumption");
            self.set_paused(c, false);
        }
        Ok(())
    }

    /// Closes the largest open files when the budget is exceeded.
    fn enforce_budget(&mut self) -> Result<(), DumpError> {
        let keys: Vec<(String, i32)> = self.parts.keys().cloned().collect();
        let sizes: Vec<usize> = keys
            .iter()
            .map(|k| {
                self.parts
                    .get(k)
                    .and_then(|s| s.file.as_ref())
                    .map_or(0, |f| f.encoder.memory_bytes())
            })
            .collect();
        let total: usize = self.parts.values().map(PartitionState::memory).sum();
        for i in roll::pick_for_memory(&sizes, total, self.budget, self.budget / 2) {
            self.close_file(&keys[i], RollReason::Memory)?;
        }
        Ok(())
    }

    fn set_paused(&mut self, c: &BaseConsumer<DumpContext>, pause: bool) {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in self.parts.keys() {
            tpl.add_partition(t, *p);
        }
        let r = if pause { c.pause(&tpl) } else { c.resume(&tpl) };
        if let Err(e) = r {
            tracing::warn!(task = %self.task.name, error = %e, "pause/resume failed");
        }
        self.paused = pause;
    }

    /// Flushes everything, stores and commits; errors if data could not be stored.
    fn shutdown(&mut self, c: &BaseConsumer<DumpContext>) -> Result<(), DumpError> {
        let keys: Vec<(String, i32)> = self.parts.keys().cloned().collect();
        for tp in &keys {
            self.close_file(tp, RollReason::Shutdown)?;
        }
        let deadline = Instant::now()
            + if self.once {
                ONCE_OUTAGE_LIMIT
            } else {
                Duration::from_secs(60)
            };
        self.retry_at = None;
        self.set_paused(c, true);
        loop {
            self.store_ready(c)?;
            self.commit_pending(c);
            if self.parts.values().all(PartitionState::idle) {
                break;
            }
            if Instant::now() > deadline {
                let records: u64 = self
                    .parts
                    .values()
                    .flat_map(|s| s.ready.iter())
                    .map(|r| r.records)
                    .sum();
                return Err(DumpError::Unflushed {
                    task: self.task.name.to_string(),
                    records,
                });
            }
            // Keep the group membership alive (and hear about revocations) while the store
            // is retried; partitions are paused, so no records arrive.
            let _ = c.poll(Duration::from_millis(200));
            self.apply_changes(c)?;
        }
        tracing::info!(task = %self.task.name, objects = self.summary.objects, records = self.summary.records, "task finished: everything buffered is stored and committed");
        Ok(())
    }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
