//! The poll stage of a task, on the task's own thread: owns the consumer. It reads records and
//! routes them in batches to the writers, applies rebalances (a sequencer per assigned
//! partition), carries out the sequencers' commits and rewinds between polls, pauses
//! partitions when a writer falls behind or a `--once` target is reached, and runs the orderly
//! shutdown. It never blocks on another stage: a full writer queue pauses the partitions
//! instead.

use super::batch::Batch;
use super::budget::ByteBudget;
use super::consumer::{self, AssignmentChange, DumpContext};
use super::index::{self, Seal};
use super::once::{offset_of, Probe, Targets};
use super::start::Facts;
use super::upload::{Control, PartitionFlags, UploadContext};
use super::writer::{self, ToWriter, WriterContext};
use super::{DumpError, DumpOptions, Fatal, Metrics, Summary, Tp};
use crate::config::{DumpTask, KafkaConfig, TopicSelector};
use crate::kafka::{refusal, KafkaError, Reader};
use crate::store::{ErrorKind, ObjectStore};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often timers (interval rolls, metrics, subscriptions) are looked at.
const TICK: Duration = Duration::from_millis(200);
/// How often a `--once` run checks the group's committed offsets.
const ONCE_CHECK: Duration = Duration::from_millis(250);
/// A writer whose queue stays full this long has its partitions paused; until then the poll
/// loop just waits for it. Pausing makes librdkafka drop what it prefetched for the partition
/// and fetch it again on resume, which for a writer only briefly behind (an encoder slower
/// than the fetch) costs more than the wait.
const PAUSE_BEHIND: Duration = Duration::from_secs(2);
/// A clean stop gives the store this long to take what is buffered...
const STOP_GRACE: Duration = Duration::from_secs(60);
/// ... and a `--once` run this long.
const ONCE_STOP_GRACE: Duration = Duration::from_secs(300);
/// How often a `--once` run that holds no partition yet says it is waiting for the group.
const GROUP_WAIT_NOTE: Duration = Duration::from_secs(5);

/// Everything a task needs to run.
pub(super) struct TaskSetup<'a> {
    pub kafka: &'a KafkaConfig,
    pub task: DumpTask,
    pub store: Arc<dyn ObjectStore>,
    pub rt: tokio::runtime::Handle,
    pub memory: usize,
    pub leftover_age: Duration,
    pub opts: DumpOptions,
    pub stop: Arc<AtomicBool>,
}

/// How a task's buffer budget is shared out between the stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shares {
    /// librdkafka's prefetch queue.
    pub queue: usize,
    /// Parts handed to uploads and not yet stored.
    pub in_flight: usize,
    /// Batches waiting in the writers' queues (in batches, per writer).
    pub batches_per_writer: usize,
    /// Open objects, per writer.
    pub open_per_writer: usize,
}

/// The budget's split (pure): an eighth for librdkafka (its queue and the fetch response being
/// received), an eighth (at least two parts) for uploads in flight, a sixteenth for the writers'
/// queues, an eighth left to the allocator's free pages (freed buffers it keeps for reuse; the
/// memory governor hands them back when the process passes its budget), the rest for open
/// objects. CDC tables leave a quarter to free pages: their bundles free and build again tens of
/// builders and whole table files, and with an eighth the governor handed those pages back about
/// 16 times per GiB, each time to fault them in again (a tenth of the task's CPU).
pub(crate) fn shares(memory: usize, part_size: usize, writers: usize, tables: bool) -> Shares {
    let writers = writers.max(1);
    let queue = memory / consumer::QUEUE_SHARE;
    let in_flight = (memory / 8).max(2 * part_size);
    let queued = memory / 16;
    let free_pages = if tables { memory / 4 } else { memory / 8 };
    let batches_per_writer = (queued / super::batch::BATCH_BYTES / writers).max(2);
    let open = memory
        .saturating_sub(queue + in_flight + queued + free_pages)
        .max(2 * part_size);
    Shares {
        queue,
        in_flight,
        batches_per_writer,
        open_per_writer: open / writers,
    }
}

/// Writer threads for a machine with `cores` cores: the poll thread and librdkafka need one.
fn writer_threads(cores: usize) -> usize {
    cores.saturating_sub(1).clamp(1, 4)
}

/// Runs one task to its end: until `stop`, or for `--once` until every partition is covered.
pub(super) fn run_task(s: TaskSetup<'_>) -> Result<Summary, DumpError> {
    let task = Arc::new(s.task);
    let name = task.name.to_string();
    let writers =
        writer_threads(std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get));
    let part_size = s.store.part_size();
    let sh = shares(s.memory, part_size, writers, task.cdc.is_some());
    let consumer = consumer::create(s.kafka, &task, sh.queue, false)?;
    let group = crate::kafka::group_reader(s.kafka, task.name.as_str())?;
    let fatal = Arc::new(Fatal::default());
    let metrics = Arc::new(Metrics::new(&name));
    let stats = Arc::new(Mutex::new(Summary {
        task: name.clone(),
        ..Summary::default()
    }));
    let (control_tx, control_rx) = std::sync::mpsc::channel();
    let ucx = Arc::new(UploadContext {
        task: name.clone(),
        dir: task.directory.clone(),
        store: s.store.clone(),
        control: control_tx,
        fatal: fatal.clone(),
        stats: stats.clone(),
        metrics: metrics.clone(),
        unstored: Arc::new(AtomicU64::new(0)),
        start_offset: task.start_offset,
        litter_age: task.interval + s.leftover_age,
        gaps: Arc::new(Mutex::new(Vec::new())),
    });
    clean_up_leftovers(&s.rt, &group, &task, s.store.as_ref(), s.leftover_age);
    let in_flight = ByteBudget::new(sh.in_flight);
    let buffered = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    let mut threads = Vec::new();
    for i in 0..writers {
        let (tx, rx) = std::sync::mpsc::sync_channel(sh.batches_per_writer);
        let cx = WriterContext {
            task: task.clone(),
            in_flight: in_flight.clone(),
            part_size,
            open_limit: sh.open_per_writer,
            buffered: buffered.clone(),
            fatal: fatal.clone(),
        };
        let t = std::thread::Builder::new()
            .name(format!("dump-{name}-w{i}"))
            .spawn(move || writer::run(rx, cx))
            .map_err(|e| DumpError::Worker {
                task: name.clone(),
                detail: format!("cannot start a writer thread: {e}"),
            })?;
        senders.push(tx);
        threads.push(t);
    }
    let c = consumer;
    let mut p = Poll {
        task: task.clone(),
        kafka: s.kafka.clone(),
        rt: s.rt,
        group,
        waiting_note: Instant::now() + GROUP_WAIT_NOTE,
        stash: (0..senders.len()).map(|_| VecDeque::new()).collect(),
        behind_since: vec![None; senders.len()],
        writers: senders,
        next_writer: 0,
        parts: HashMap::default(),
        paused: HashSet::new(),
        control: control_rx,
        ucx: ucx.clone(),
        sequencers: Vec::new(),
        opts: s.opts,
        targets: None,
        probe: None,
        once_soon: false,
        subscribed: Vec::new(),
        next_refresh: Instant::now(),
        metrics: metrics.clone(),
        consumed: (0, 0),
        last: None,
        in_flight: in_flight.clone(),
        buffered,
    };
    let outcome = p.run(&c, &s.stop);
    let report = p.targets.as_ref().map(Targets::report);
    p.shut_down(&c);
    drop(p);
    // Dropping the consumer leaves the group and can block; this is the task's own thread.
    drop(c);
    for t in threads {
        let _ = t.join();
    }
    if let Some(e) = fatal.take() {
        return Err(e);
    }
    outcome?;
    let unstored = ucx.unstored.load(Ordering::Relaxed);
    if unstored > 0 {
        return Err(DumpError::Unflushed {
            task: task.name.to_string(),
            partitions: unstored,
        });
    }
    let mut summary = stats.lock().map(|s| s.clone()).unwrap_or_default();
    summary.partitions = report.unwrap_or_default();
    summary.gaps = ucx
        .gaps
        .lock()
        .map(|g| {
            g.iter()
                .map(|(tp, gap)| super::GapReport {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    from: gap.from,
                    to: gap.to,
                })
                .collect()
        })
        .unwrap_or_default();
    tracing::info!(task = %task.name, objects = summary.objects, records = summary.records, "task finished: everything buffered is stored and committed");
    Ok(summary)
}

/// Removes what a crash of an earlier run left: incomplete uploads older than any object of
/// this task can live (its interval plus `limits.leftover_age_secs`), and the seals strata
/// versions before the kept index left (except the seal of a stored object whose offsets are
/// not committed: its next owner adopts the object). Seals of the index that never became
/// visible are removed by each partition's sequencer when it meets them. Done before consuming
/// starts, within a bounded time.
fn clean_up_leftovers(
    rt: &tokio::runtime::Handle,
    c: &Reader,
    task: &DumpTask,
    store: &dyn ObjectStore,
    leftover_age: Duration,
) {
    const BOUND: Duration = Duration::from_secs(60);
    let older_than = task.interval + leftover_age;
    let prefix = task.directory.prefix();
    let name = task.name.to_string();
    let look = async {
        match store.remove_incomplete(&prefix, older_than).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(task = %name, removed = n, "removed incomplete uploads a crash left behind")
            }
            Err(e) => {
                tracing::warn!(task = %name, error = %e, "could not look for incomplete uploads a crash left behind; an S3 lifecycle rule for incomplete multipart uploads cleans them up")
            }
        }
        let cutoff = chrono::Utc::now()
            - chrono::Duration::from_std(older_than).unwrap_or(chrono::Duration::MAX);
        let mut found = Vec::new();
        let Ok(listed) = store.list(&index::legacy_prefix(&task.directory)).await else {
            return found;
        };
        for o in listed
            .iter()
            .filter(|o| o.last_modified.is_some_and(|t| t < cutoff))
        {
            let Some((tp, _, tag)) = index::parse_legacy_seal_key(&task.directory, &o.key) else {
                continue;
            };
            let Ok(raw) = store.get(&o.key).await else {
                continue;
            };
            // A seal that does not parse cannot help an adoption.
            let Ok(seal) = serde_json::from_slice::<Seal>(&raw) else {
                found.push((o.key.clone(), tp, None));
                continue;
            };
            // No object under the seal's key: the crash came between the seal and the
            // object, which never became visible; the seal is litter. A bundle's seal lives
            // while any of its files is visible under its upload's tag.
            let object_tag = if seal.files.is_empty() {
                match store.tag_of(&seal.key).await {
                    Ok(t) => t,
                    Err(e) if e.kind == ErrorKind::NotFound => None,
                    Err(_) => continue,
                }
            } else {
                let mut live = None;
                let mut unknown = false;
                for (file, file_tag) in &seal.files {
                    match store.tag_of(file).await {
                        Ok(Some(t)) if t == *file_tag => {
                            live = Some(tag.clone());
                            break;
                        }
                        Ok(_) => {}
                        Err(e) if e.kind == ErrorKind::NotFound => {}
                        Err(_) => unknown = true,
                    }
                }
                if live.is_none() && unknown {
                    continue;
                }
                live
            };
            let live = object_tag.as_deref() == Some(tag.as_str());
            found.push((o.key.clone(), tp, Some((seal, tag, object_tag, live))));
        }
        found
    };
    // Set-up, before any stage runs: the task's own thread may wait here.
    let Ok(found) = rt.block_on(async { tokio::time::timeout(BOUND, look).await }) else {
        tracing::warn!(task = %name, "looking for leftovers of a crash took over a minute; going on");
        return;
    };
    let mut tpl = TopicPartitionList::new();
    for (_, tp, _) in found.iter().filter(|f| f.2.as_ref().is_some_and(|s| s.3)) {
        if tpl.find_partition(&tp.topic, tp.partition).is_none() {
            tpl.add_partition(&tp.topic, tp.partition);
        }
    }
    // Unknown commits keep the seals of stored objects: removing one too many loses data.
    let committed = (tpl.count() > 0)
        .then(|| crate::kafka::committed_offsets(c, &tpl, Duration::from_secs(10)).ok())
        .flatten();
    let litter: Vec<String> = found
        .into_iter()
        .filter(|(_, tp, s)| match s {
            None => true,
            Some((seal, tag, object_tag, _)) => {
                let at = committed
                    .as_ref()
                    .and_then(|l| offset_of(l, &tp.topic, tp.partition));
                index::legacy_seal_is_litter(seal, tag, object_tag.as_deref(), at)
            }
        })
        .map(|(k, _, _)| k)
        .collect();
    let remove = async {
        for k in &litter {
            let _ = store.delete(k).await;
        }
    };
    if rt
        .block_on(async { tokio::time::timeout(BOUND, remove).await })
        .is_err()
    {
        tracing::warn!(task = %name, "removing the leftovers of a crash took over a minute; going on");
    }
}

type CommitAck = tokio::sync::oneshot::Sender<Result<(), String>>;

/// One assigned partition, as the poll loop sees it.
struct Assigned {
    writer: usize,
    epoch: u64,
    batch: Batch,
    flags: Arc<PartitionFlags>,
    /// `--once`: the partition reached its target (paused; its writer was told to close).
    reached: bool,
}

struct Poll {
    task: Arc<DumpTask>,
    kafka: KafkaConfig,
    rt: tokio::runtime::Handle,
    /// Reads the group's committed offsets: never queued behind the consumer's JoinGroup.
    group: Reader,
    /// `--once`: when to say next that the run is waiting for the group to assign partitions.
    waiting_note: Instant,
    writers: Vec<SyncSender<ToWriter>>,
    /// Per writer, messages its full queue did not take yet (in order).
    stash: Vec<VecDeque<ToWriter>>,
    /// Per writer, since when its stash holds something.
    behind_since: Vec<Option<Instant>>,
    next_writer: usize,
    /// Looked up once per polled record: foldhash, not std's SipHash (bench/README.md).
    parts: HashMap<Tp, Assigned, foldhash::fast::RandomState>,
    /// Partitions paused now (back-pressure or a reached target).
    paused: HashSet<Tp>,
    control: Receiver<Control>,
    ucx: Arc<UploadContext>,
    sequencers: Vec<tokio::task::JoinHandle<()>>,
    opts: DumpOptions,
    targets: Option<Targets>,
    probe: Option<Probe>,
    /// `--once`: something happened (a target read, a commit) that may complete the run, so
    /// the coverage check runs now rather than at its next turn.
    once_soon: bool,
    subscribed: Vec<String>,
    next_refresh: Instant,
    metrics: Arc<Metrics>,
    /// Records and bytes consumed since the metrics were last updated.
    consumed: (u64, u64),
    /// The partition of the last message, reused while messages come in runs.
    last: Option<Tp>,
    in_flight: Arc<ByteBudget>,
    buffered: Arc<AtomicUsize>,
}

fn kafka_err(servers: &str) -> impl Fn(rdkafka::error::KafkaError) -> DumpError + '_ {
    move |e| {
        DumpError::Kafka(KafkaError::Unreachable {
            servers: servers.to_string(),
            detail: e.to_string(),
        })
    }
}

impl Poll {
    fn run(&mut self, c: &BaseConsumer<DumpContext>, stop: &AtomicBool) -> Result<(), DumpError> {
        self.refresh_subscription(c)?;
        if self.opts.once {
            self.targets = Some(
                Targets::note(c, &self.group, &self.subscribed, self.opts.once_deadline)
                    .map_err(DumpError::Kafka)?,
            );
        }
        let mut next_tick = Instant::now() + TICK;
        let mut next_check = Instant::now();
        let mut polls: u32 = 0;
        loop {
            if stop.load(Ordering::Relaxed) || self.ucx.fatal.is_set() {
                return Ok(());
            }
            self.serve_controls(c);
            self.drain_stash(c);
            if self.wait_for_writers(c) {
                std::thread::sleep(Duration::from_millis(1));
                if Instant::now() >= next_tick {
                    next_tick = Instant::now() + TICK;
                    self.tick(c)?;
                }
                continue;
            }
            // A non-blocking poll first: while records are queued it skips librdkafka's timeout
            // bookkeeping (a clock read per message); block only when the queue is empty.
            let polled = match c.poll(Duration::ZERO) {
                None => {
                    self.flush_batches(c);
                    c.poll(Duration::from_millis(100))
                }
                some => some,
            };
            self.apply_changes(c)?;
            polls = polls.wrapping_add(1);
            let check_clock = polled.is_none() || polls % 64 == 0;
            match polled {
                None => {}
                Some(Ok(m)) => self.route(c, &m),
                Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => {}
                Some(Err(e))
                    if e.rdkafka_error_code()
                        .is_some_and(refusal::is_authorization) =>
                {
                    return Err(DumpError::Kafka(KafkaError::not_authorized(
                        &self.kafka,
                        format!(
                            "{e} (reading topics {} in consumer group {:?})",
                            self.subscribed.join(", "),
                            self.task.name.as_str()
                        ),
                    )));
                }
                Some(Err(e)) => {
                    tracing::warn!(task = %self.task.name, error = %e, "consumer error; librdkafka retries")
                }
            }
            if check_clock && Instant::now() >= next_tick {
                next_tick = Instant::now() + TICK;
                self.tick(c)?;
            }
            if self.opts.once && (self.once_soon || (check_clock && Instant::now() >= next_check)) {
                self.once_soon = false;
                next_check = Instant::now() + ONCE_CHECK;
                if self.once_progress(c)? {
                    return Ok(());
                }
            }
        }
    }

    /// Hands a message to its partition's batch.
    fn route(&mut self, c: &BaseConsumer<DumpContext>, m: &rdkafka::message::BorrowedMessage<'_>) {
        let tp = Tp::of_message(&mut self.last, m);
        if let Some(t) = &self.targets {
            // Past what `--once` was asked to read (or a partition it does not cover): later.
            match t.target(&tp) {
                Some(to) if m.offset() < to => self.once_soon |= m.offset() + 1 >= to,
                _ => {
                    self.set_paused(c, &tp, true);
                    return;
                }
            }
        }
        let Some(a) = self.parts.get_mut(&tp) else {
            return;
        };
        a.flags.closed.store(false, Ordering::Relaxed);
        a.batch.push(m);
        self.consumed.0 += 1;
        self.consumed.1 += (m.payload_len() + m.key().map_or(0, <[u8]>::len)) as u64;
        if a.batch.is_full() {
            self.send_batch(c, &tp);
        }
    }

    fn send_batch(&mut self, c: &BaseConsumer<DumpContext>, tp: &Tp) {
        let Some(a) = self.parts.get_mut(tp) else {
            return;
        };
        if a.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut a.batch, Batch::new(a.epoch));
        let w = a.writer;
        self.queue_for(
            c,
            w,
            ToWriter::Batch {
                tp: tp.clone(),
                batch,
            },
        );
    }

    fn flush_batches(&mut self, c: &BaseConsumer<DumpContext>) {
        let tps: Vec<Tp> = self
            .parts
            .iter()
            .filter(|(_, a)| !a.batch.is_empty())
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in tps {
            self.send_batch(c, &tp);
        }
    }

    /// Queues a message for a writer, in order; a full queue pauses consumption instead of
    /// blocking.
    fn queue_for(&mut self, c: &BaseConsumer<DumpContext>, w: usize, msg: ToWriter) {
        if w >= self.writers.len() {
            // Shutting down: the writers are gone.
            return;
        }
        if self.stash[w].is_empty() {
            match self.writers[w].try_send(msg) {
                Ok(()) => return,
                Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(msg)) => self.stash[w].push_back(msg),
            }
            self.behind_since[w] = Some(Instant::now());
            self.update_pauses(c);
        } else {
            self.stash[w].push_back(msg);
        }
    }

    fn drain_stash(&mut self, c: &BaseConsumer<DumpContext>) {
        let mut freed = false;
        for w in 0..self.writers.len().min(self.stash.len()) {
            if self.stash[w].is_empty() {
                continue;
            }
            while let Some(msg) = self.stash[w].pop_front() {
                match self.writers[w].try_send(msg) {
                    Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                    Err(TrySendError::Full(msg)) => {
                        self.stash[w].push_front(msg);
                        break;
                    }
                }
            }
            if self.stash[w].is_empty() {
                self.behind_since[w] = None;
                freed = true;
            }
        }
        if freed {
            self.update_pauses(c);
        }
    }

    /// Whether a writer's queue has been full for [`PAUSE_BEHIND`].
    fn long_behind(&self, w: usize) -> bool {
        self.behind_since
            .get(w)
            .copied()
            .flatten()
            .is_some_and(|t| t.elapsed() >= PAUSE_BEHIND)
    }

    /// Whether the loop should wait for a writer instead of polling: one is behind, not for
    /// long. Once it is behind for long, its partitions are paused and polling goes on.
    fn wait_for_writers(&mut self, c: &BaseConsumer<DumpContext>) -> bool {
        let behind: Vec<usize> = (0..self.behind_since.len())
            .filter(|&w| self.behind_since[w].is_some())
            .collect();
        if behind.is_empty() {
            return false;
        }
        if behind.iter().any(|&w| self.long_behind(w)) {
            self.update_pauses(c);
            return false;
        }
        true
    }

    /// Pauses what should not be read now (a writer long behind, a reached target), resumes
    /// the rest.
    fn update_pauses(&mut self, c: &BaseConsumer<DumpContext>) {
        let want: HashSet<Tp> = self
            .parts
            .iter()
            .filter(|(_, a)| a.reached || self.long_behind(a.writer))
            .map(|(tp, _)| tp.clone())
            .collect();
        let (pause, resume): (Vec<Tp>, Vec<Tp>) = (
            want.difference(&self.paused).cloned().collect(),
            self.paused.difference(&want).cloned().collect(),
        );
        for tp in pause {
            self.set_paused(c, &tp, true);
        }
        for tp in resume {
            self.set_paused(c, &tp, false);
        }
    }

    fn set_paused(&mut self, c: &BaseConsumer<DumpContext>, tp: &Tp, pause: bool) {
        if pause == self.paused.contains(tp) {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&tp.topic, tp.partition);
        let r = if pause { c.pause(&tpl) } else { c.resume(&tpl) };
        match r {
            Ok(()) if pause => {
                self.paused.insert(tp.clone());
            }
            Ok(()) => {
                self.paused.remove(tp);
            }
            Err(e) => tracing::warn!(task = %self.task.name, error = %e, "pause/resume failed"),
        }
    }

    /// Carries out what the sequencers asked: commits (together, in one request), rewinds.
    fn serve_controls(&mut self, c: &BaseConsumer<DumpContext>) {
        let mut commits: Vec<(Tp, i64, CommitAck)> = Vec::new();
        while let Ok(ctl) = self.control.try_recv() {
            match ctl {
                Control::Commit { tp, offset, ack } => commits.push((tp, offset, ack)),
                Control::Rewind {
                    tp,
                    to,
                    commit,
                    cut,
                    limit,
                    ack,
                } => {
                    let r = self.rewind(c, &tp, to, commit, cut, limit);
                    let _ = ack.send(r);
                }
                Control::Facts { tp, ack } => {
                    let _ = ack.send(self.facts(c, &tp));
                }
            }
        }
        if commits.is_empty() {
            return;
        }
        self.once_soon |= self.targets.is_some();
        let mut tpl = TopicPartitionList::new();
        for (tp, offset, _) in &commits {
            let _ = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(*offset));
        }
        let r = c.commit(&tpl, CommitMode::Sync).map_err(|e| e.to_string());
        for (_, _, ack) in commits {
            let _ = ack.send(r.clone());
        }
    }

    /// The group's committed offset and the partition's watermarks, now.
    fn facts(&self, c: &BaseConsumer<DumpContext>, tp: &Tp) -> Result<Facts, String> {
        let committed = self.committed(tp)?;
        let (low, high) = c
            .fetch_watermarks(&tp.topic, tp.partition, Duration::from_secs(10))
            .map_err(|e| format!("watermarks: {e}"))?;
        Ok(Facts {
            committed,
            low,
            high,
        })
    }

    /// The group's committed offset of one partition.
    fn committed(&self, tp: &Tp) -> Result<Option<i64>, String> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&tp.topic, tp.partition);
        let committed = crate::kafka::committed_offsets(&self.group, &tpl, Duration::from_secs(10))
            .map_err(|e| format!("the group's committed offset: {e}"))?;
        Ok(offset_of(&committed, &tp.topic, tp.partition))
    }

    /// Moves a partition back (after a failed upload) or on (after an adopted object, to a
    /// settled start) to `to`; bumps its epoch so the writer drops what was read before. With
    /// `commit`, the group's committed offset wins when it is further (this position was
    /// stale), and `to` is committed when the group is behind it. The new epoch is the answer.
    fn rewind(
        &mut self,
        c: &BaseConsumer<DumpContext>,
        tp: &Tp,
        to: i64,
        commit: bool,
        cut: Option<i64>,
        limit: Option<i64>,
    ) -> Result<u64, String> {
        if !self.parts.contains_key(tp) {
            return Err("the partition is not assigned to this member any more".into());
        }
        let mut to = to;
        if commit {
            match self.committed(tp)? {
                Some(at) if at >= to => to = at,
                _ => {
                    let mut tpl = TopicPartitionList::new();
                    let _ = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(to));
                    c.commit(&tpl, CommitMode::Sync)
                        .map_err(|e| e.to_string())?;
                    self.once_soon |= self.targets.is_some();
                }
            }
        }
        c.seek(
            &tp.topic,
            tp.partition,
            Offset::Offset(to),
            Duration::from_secs(10),
        )
        .map_err(|e| e.to_string())?;
        let Some(a) = self.parts.get_mut(tp) else {
            return Err("the partition was revoked".into());
        };
        a.epoch += 1;
        a.batch = Batch::new(a.epoch);
        a.reached = false;
        a.flags.closed.store(false, Ordering::Relaxed);
        let (w, epoch) = (a.writer, a.epoch);
        self.queue_for(
            c,
            w,
            ToWriter::Reset {
                tp: tp.clone(),
                epoch,
                from: to,
                cut,
                limit,
            },
        );
        self.update_pauses(c);
        tracing::info!(task = %self.task.name, topic = %tp.topic, partition = tp.partition, offset = to, "partition rewound");
        Ok(epoch)
    }

    /// Applies rebalance results.
    fn apply_changes(&mut self, c: &BaseConsumer<DumpContext>) -> Result<(), DumpError> {
        for change in c.context().take_changes() {
            match change {
                AssignmentChange::Assigned(list) => {
                    for (topic, partition) in &list {
                        self.assign(c, Tp::new(topic, *partition));
                    }
                }
                AssignmentChange::Revoked(list) => {
                    for (topic, partition) in list {
                        let tp = Tp::new(&topic, partition);
                        self.paused.remove(&tp);
                        if let Some(a) = self.parts.remove(&tp) {
                            a.flags.revoked.store(true, Ordering::Relaxed);
                            self.queue_for(c, a.writer, ToWriter::Revoked { tp: tp.clone() });
                            if a.flags.pending.load(Ordering::Relaxed) > 0 || !a.batch.is_empty() {
                                tracing::info!(task = %self.task.name, topic = %tp.topic, partition = tp.partition, "partition revoked: dropping what is not stored; its new owner reads it again from the committed offset");
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn assign(&mut self, c: &BaseConsumer<DumpContext>, tp: Tp) {
        if self.parts.contains_key(&tp) {
            return;
        }
        let writer = self.next_writer % self.writers.len();
        self.next_writer += 1;
        let flags = Arc::new(PartitionFlags::default());
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let handle = self.rt.spawn(super::upload::sequence(
            tp.clone(),
            0,
            rx,
            flags.clone(),
            self.ucx.clone(),
        ));
        self.sequencers.push(handle);
        self.sequencers.retain(|h| !h.is_finished());
        self.parts.insert(
            tp.clone(),
            Assigned {
                writer,
                epoch: 0,
                batch: Batch::new(0),
                flags: flags.clone(),
                reached: false,
            },
        );
        self.queue_for(
            c,
            writer,
            ToWriter::Assigned {
                tp,
                epoch: 0,
                objects: tx,
                flags,
            },
        );
    }

    fn tick(&mut self, c: &BaseConsumer<DumpContext>) -> Result<(), DumpError> {
        self.flush_batches(c);
        for w in 0..self.writers.len() {
            self.queue_for(c, w, ToWriter::Tick);
        }
        let (records, bytes) = std::mem::take(&mut self.consumed);
        self.metrics.consumed_records.increment(records);
        self.metrics.consumed_bytes.increment(bytes);
        let held = self.buffered.load(Ordering::Relaxed) + self.in_flight.used();
        self.metrics.buffered.set(held as f64);
        if !self.opts.once {
            self.refresh_subscription(c)?;
        }
        Ok(())
    }

    /// `--once`: closes partitions that reached their target, commits targets past trailing
    /// markers, checks the group's coverage. `true` once every partition is covered.
    fn once_progress(&mut self, c: &BaseConsumer<DumpContext>) -> Result<bool, DumpError> {
        let positions = c.position().ok();
        let mut close = Vec::new();
        let mut commit = TopicPartitionList::new();
        if let Some(targets) = self.targets.as_mut() {
            for (tp, a) in &mut self.parts {
                let Some(to) = targets.target(tp) else {
                    continue;
                };
                if a.flags.stored.load(Ordering::Relaxed) > 0 {
                    targets.touched(tp);
                }
                let pos = positions
                    .as_ref()
                    .and_then(|p| offset_of(p, &tp.topic, tp.partition));
                if !a.reached && pos.is_some_and(|p| p >= to) {
                    a.reached = true;
                    close.push(tp.clone());
                } else if a.reached
                    && a.flags.closed.load(Ordering::Relaxed)
                    && a.flags.pending.load(Ordering::Relaxed) == 0
                    && a.batch.is_empty()
                {
                    // Everything read is stored and committed, and only markers (which no
                    // consumer receives) lie between the last record and the target.
                    let _ =
                        commit.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(to));
                    targets.touched(tp);
                }
            }
        }
        for tp in close {
            self.send_batch(c, &tp);
            if let Some(a) = self.parts.get(&tp) {
                let w = a.writer;
                self.queue_for(c, w, ToWriter::Close { tp: Some(tp) });
            }
        }
        self.update_pauses(c);
        let Some(targets) = self.targets.as_mut() else {
            return Ok(true);
        };
        let committed =
            crate::kafka::committed_offsets(&self.group, &targets.list(), Duration::from_secs(10))
                .map_err(kafka_err("the group coordinator"))?;
        // Targets this run reached and stored up to, where the group is still behind them.
        let mut behind = TopicPartitionList::new();
        for e in commit.elements() {
            if let Offset::Offset(to) = e.offset() {
                if offset_of(&committed, e.topic(), e.partition()).is_none_or(|c| c < to) {
                    let _ =
                        behind.add_partition_offset(e.topic(), e.partition(), Offset::Offset(to));
                }
            }
        }
        if behind.count() > 0 {
            if let Err(e) = c.commit(&behind, CommitMode::Sync) {
                tracing::warn!(task = %self.task.name, error = %e, "commit of a --once target failed; retried");
            }
        }
        targets.update(&committed);
        let ours: HashSet<Tp> = self.parts.keys().cloned().collect();
        let due = targets.due_for_probe(&committed, |tp| ours.contains(tp));
        if !due.is_empty() {
            if self.probe.is_none() {
                self.probe = Some(Probe::new(&self.kafka, self.task.name.as_str())?);
            }
            if let Some(probe) = &self.probe {
                for (tp, from, to) in due {
                    if probe.only_markers(&tp, from, to) {
                        targets.probed_empty(&tp);
                    }
                }
            }
        }
        if targets.all_covered() {
            return Ok(true);
        }
        if targets.past_deadline() {
            return Err(targets.incomplete(self.task.name.as_str()));
        }
        if self.parts.is_empty() && Instant::now() >= self.waiting_note {
            self.waiting_note = Instant::now() + GROUP_WAIT_NOTE;
            tracing::info!(task = %self.task.name, group = %self.task.name, left_s = targets.left().as_secs(), "waiting for the consumer group to give this run partitions: a member that stopped without leaving the group (killed, crashed) keeps its partitions until its session times out (session.timeout.ms, 45 s unless set), and other members finish what they hold; waiting up to the --once deadline");
        }
        Ok(false)
    }

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
                    Err(e) => return Err(self.kafka_failure(c, e)),
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
            if self.opts.once && self.subscribed.is_empty() {
                self.check_topics_exist(c, &wanted)?;
            }
            let names: Vec<&str> = wanted.iter().map(String::as_str).collect();
            if names.is_empty() {
                c.unsubscribe();
            } else {
                c.subscribe(&names).map_err(|e| {
                    DumpError::Kafka(KafkaError::Client {
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

    /// A failed Kafka call: the cluster's refusal when the consumer saw one, else unreachable.
    fn kafka_failure(
        &self,
        c: &BaseConsumer<DumpContext>,
        e: rdkafka::error::KafkaError,
    ) -> DumpError {
        DumpError::Kafka(c.context().watch.failure(&self.kafka, e))
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
            .map_err(|e| self.kafka_failure(c, e))?;
        let missing: Vec<&String> = wanted
            .iter()
            .filter(|w| {
                !md.topics()
                    .iter()
                    .any(|t| t.name() == w.as_str() && t.error().is_none())
            })
            .collect();
        // A topic this principal may not describe is missing from the listing: say so.
        for w in &missing {
            let denied = c
                .fetch_metadata(Some(w.as_str()), Duration::from_secs(10))
                .ok()
                .and_then(|md| md.topics().first().and_then(|t| t.error()))
                .map(rdkafka::types::RDKafkaErrorCode::from)
                .filter(|code| refusal::is_authorization(*code));
            if let Some(code) = denied {
                return Err(DumpError::Kafka(KafkaError::not_authorized(
                    &self.kafka,
                    format!("{code} (describing topic {w:?})"),
                )));
            }
        }
        if !missing.is_empty() {
            return Err(DumpError::NoTopics {
                task: self.task.name.to_string(),
                topics: format!("{missing:?}"),
            });
        }
        Ok(())
    }

    /// Closes every open object, lets the writers and sequencers store and commit what they
    /// hold (serving their commits meanwhile), within a grace period.
    fn shut_down(&mut self, c: &BaseConsumer<DumpContext>) {
        self.flush_batches(c);
        for w in 0..self.writers.len() {
            self.queue_for(c, w, ToWriter::Close { tp: None });
        }
        let tps: Vec<Tp> = self.parts.keys().cloned().collect();
        for tp in &tps {
            self.set_paused(c, tp, true);
        }
        let grace = if self.opts.once {
            ONCE_STOP_GRACE
        } else {
            STOP_GRACE
        };
        let deadline = Instant::now() + grace;
        // Writers end once their queue is drained and closed.
        while self.stash.iter().any(|s| !s.is_empty()) && Instant::now() < deadline {
            self.drain_stash(c);
            self.serve_controls(c);
            let _ = c.poll(Duration::from_millis(20));
        }
        self.writers.clear();
        self.stash.clear();
        while self.sequencers.iter().any(|h| !h.is_finished()) {
            if Instant::now() > deadline {
                let left: u64 = self
                    .parts
                    .values()
                    .map(|a| a.flags.pending.load(Ordering::Relaxed))
                    .sum();
                tracing::error!(task = %self.task.name, objects = left, "objects still not stored at the end of the grace period; their offsets stay uncommitted");
                self.ucx.fatal.set(DumpError::Unflushed {
                    task: self.task.name.to_string(),
                    partitions: left,
                });
                break;
            }
            self.serve_controls(c);
            // Keep the group membership alive (and hear about revocations) meanwhile.
            let _ = c.poll(Duration::from_millis(50));
            let _ = self.apply_changes(c);
        }
        // A last round for commits asked for right at the end.
        self.serve_controls(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_out_between_the_stages() {
        let s = shares(256 << 20, 8 << 20, 1, false);
        assert_eq!(s.queue, 32 << 20);
        assert_eq!(s.in_flight, 32 << 20);
        assert_eq!(s.batches_per_writer, 64);
        let used = s.queue
            + s.in_flight
            + s.batches_per_writer * super::super::batch::BATCH_BYTES
            + s.open_per_writer;
        assert_eq!(
            used + (32 << 20),
            256 << 20,
            "the stages and the allocator's eighth add up to the budget"
        );
        // Two writers split the open share; small budgets keep room for two parts in flight.
        let two = shares(256 << 20, 8 << 20, 2, false);
        assert_eq!(two.open_per_writer * 2, s.open_per_writer);
        let small = shares(8 << 20, 8 << 20, 1, false);
        assert_eq!(small.in_flight, 16 << 20);
        assert!(small.open_per_writer >= 16 << 20);
        assert!(small.batches_per_writer >= 2);
        // CDC tables leave a quarter to free pages, taken from the open objects.
        let tables = shares(256 << 20, 8 << 20, 1, true);
        assert_eq!(tables.open_per_writer + (32 << 20), s.open_per_writer);
        assert_eq!((tables.queue, tables.in_flight), (s.queue, s.in_flight));
    }

    #[test]
    fn writers_leave_a_core_to_the_poll_thread() {
        assert_eq!(writer_threads(1), 1);
        assert_eq!(writer_threads(2), 1);
        assert_eq!(writer_threads(4), 3);
        assert_eq!(writer_threads(64), 4);
    }
}
