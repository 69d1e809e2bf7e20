//! The dump's side of the Kafka source: batches go to the writer thread of their partition (in
//! order with what else the partition's writer is told), every assigned partition gets a
//! sequencer, the sequencers' commits, rewinds and questions are carried out between polls,
//! and a `--once` run checks the group's coverage. It never blocks: a writer whose queue is
//! full makes the source keep the partition's batch (and pause it when that lasts).

use super::once::{Probe, Targets};
use super::requests::{Control, FactsAck};
use super::sequencer::{PartitionFlags, UploadContext};
use super::writer::ToWriter;
use super::{DumpError, DumpOptions, Metrics, Tp};
use crate::config::{DumpTask, KafkaConfig};
use crate::kafka::source::{offset_of, Admit, Batch, Sink, Source};
use crate::kafka::{refusal, KafkaError, Reader};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a `--once` run checks the group's committed offsets.
const ONCE_CHECK: Duration = Duration::from_millis(250);
/// How often a `--once` run that holds no partition yet says it is waiting for the group.
const GROUP_WAIT_NOTE: Duration = Duration::from_secs(5);

type CommitAck = tokio::sync::oneshot::Sender<Result<(), String>>;

/// One assigned partition, as the sink sees it.
struct Assigned {
    writer: usize,
    flags: Arc<PartitionFlags>,
    /// `--once`: the partition was read to its target (its writer was told to close).
    reached: bool,
}

pub(super) struct DumpSink {
    task: Arc<DumpTask>,
    kafka: KafkaConfig,
    rt: tokio::runtime::Handle,
    /// The task's cluster state snapshots (a continuous dump's every interval).
    snapshots: super::snapshot::Snapshots,
    /// Reads the group's committed offsets: never queued behind the consumer's JoinGroup.
    group: Reader,
    writers: Vec<SyncSender<ToWriter>>,
    /// Per writer, messages its full queue did not take yet (in order).
    stash: Vec<VecDeque<ToWriter>>,
    next_writer: usize,
    parts: HashMap<Tp, Assigned>,
    control: Receiver<Control>,
    ucx: Arc<UploadContext>,
    sequencers: Vec<tokio::task::JoinHandle<()>>,
    opts: DumpOptions,
    pub targets: Option<Targets>,
    probe: Option<Probe>,
    /// `--once`: something happened (a target read, a commit) that may complete the run, so
    /// the coverage check runs now rather than at its next turn.
    once_soon: bool,
    next_check: Instant,
    /// `--once`: when to say next that the run is waiting for the group to assign partitions.
    waiting_note: Instant,
    next_refresh: Instant,
    /// The topics this sink chose last.
    wanted: Option<Vec<String>>,
    /// Stopping: no more coverage checks, only what the stages ask.
    stopping: bool,
    metrics: Arc<Metrics>,
    /// Records and bytes taken since the metrics were last updated.
    consumed: (u64, u64),
    /// Records and bytes taken in all.
    taken: (u64, u64),
    /// `--once` on a terminal.
    progress: super::progress::OnceProgress,
    in_flight: Arc<super::budget::ByteBudget>,
    buffered: Arc<AtomicUsize>,
    /// Told the task runs at the first turn of the source (subscribed, writers started).
    pub ready: Option<crate::telemetry::readiness::Part>,
}

fn kafka_err(servers: &str) -> impl Fn(rdkafka::error::KafkaError) -> DumpError + '_ {
    move |e| {
        DumpError::Kafka(KafkaError::Unreachable {
            servers: servers.to_string(),
            detail: e.to_string(),
        })
    }
}

impl DumpSink {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        task: Arc<DumpTask>,
        kafka: KafkaConfig,
        rt: tokio::runtime::Handle,
        snapshots: super::snapshot::Snapshots,
        group: Reader,
        writers: Vec<SyncSender<ToWriter>>,
        control: Receiver<Control>,
        ucx: Arc<UploadContext>,
        opts: DumpOptions,
        metrics: Arc<Metrics>,
        in_flight: Arc<super::budget::ByteBudget>,
        buffered: Arc<AtomicUsize>,
    ) -> Self {
        Self {
            task,
            kafka,
            rt,
            snapshots,
            group,
            stash: (0..writers.len()).map(|_| VecDeque::new()).collect(),
            writers,
            next_writer: 0,
            parts: HashMap::new(),
            control,
            ucx,
            sequencers: Vec::new(),
            opts,
            targets: None,
            probe: None,
            once_soon: false,
            next_check: Instant::now(),
            waiting_note: Instant::now() + GROUP_WAIT_NOTE,
            next_refresh: Instant::now(),
            wanted: None,
            stopping: false,
            metrics,
            consumed: (0, 0),
            taken: (0, 0),
            progress: super::progress::OnceProgress::new(
                opts.once && std::io::IsTerminal::is_terminal(&std::io::stderr()),
            ),
            in_flight,
            buffered,
            ready: None,
        }
    }

    /// Queues a message for a writer, in order; a full queue stashes it instead of blocking.
    fn queue_for(&mut self, w: usize, msg: ToWriter) {
        if w >= self.writers.len() {
            // Shutting down: the writers are gone.
            return;
        }
        if self.stash[w].is_empty() {
            match self.writers[w].try_send(msg) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                Err(TrySendError::Full(msg)) => self.stash[w].push_back(msg),
            }
        } else {
            self.stash[w].push_back(msg);
        }
    }

    fn drain_stash(&mut self) {
        for w in 0..self.writers.len().min(self.stash.len()) {
            while let Some(msg) = self.stash[w].pop_front() {
                match self.writers[w].try_send(msg) {
                    Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                    Err(TrySendError::Full(msg)) => {
                        self.stash[w].push_front(msg);
                        break;
                    }
                }
            }
        }
    }

    /// Carries out what the sequencers asked: commits (together, in one request), rewinds,
    /// questions about a partition.
    fn serve_controls(&mut self, src: &mut Source) {
        let mut commits: Vec<(Tp, i64, CommitAck)> = Vec::new();
        let mut asked = Vec::new();
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
                    let r = self.rewind(src, &tp, to, commit, cut, limit);
                    let _ = ack.send(r);
                }
                Control::Facts { tp, ack } => asked.push((tp, ack)),
            }
        }
        if !asked.is_empty() {
            self.answer_facts(src, asked);
        }
        if commits.is_empty() {
            return;
        }
        self.once_soon |= self.targets.is_some();
        let mut tpl = TopicPartitionList::new();
        for (tp, offset, _) in &commits {
            let _ = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(*offset));
        }
        let r = src
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| e.to_string());
        for (_, _, ack) in commits {
            let _ = ack.send(r.clone());
        }
    }

    /// The group's committed offsets and the partitions' watermarks, now. The partitions
    /// assigned together ask together: one committed-offsets request serves them all (one per
    /// partition made a start of many partitions wait a coordinator round trip each).
    fn answer_facts(&self, src: &Source, asked: Vec<(Tp, FactsAck)>) {
        let mut tpl = TopicPartitionList::new();
        for (tp, _) in &asked {
            tpl.add_partition(&tp.topic, tp.partition);
        }
        let committed = crate::kafka::committed_offsets(&self.group, &tpl, Duration::from_secs(10))
            .map_err(|e| format!("the group's committed offset: {e}"));
        for (tp, ack) in asked {
            let facts = committed.clone().and_then(|c| {
                let (low, high) = src
                    .consumer()
                    .fetch_watermarks(&tp.topic, tp.partition, Duration::from_secs(10))
                    .map_err(|e| format!("watermarks: {e}"))?;
                Ok(super::start::Facts {
                    committed: offset_of(&c, &tp.topic, tp.partition),
                    low,
                    high,
                })
            });
            let _ = ack.send(facts);
        }
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
    /// settled start) to `to`; the new epoch makes the writer drop what was read before. With
    /// `commit`, the group's committed offset wins when it is further (this position was
    /// stale), and `to` is committed when the group is behind it. The new epoch is the answer.
    fn rewind(
        &mut self,
        src: &mut Source,
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
                    src.commit(&tpl, CommitMode::Sync)
                        .map_err(|e| e.to_string())?;
                    self.once_soon |= self.targets.is_some();
                }
            }
        }
        let epoch = src
            .rewind(tp, to)
            .ok_or_else(|| "the partition was revoked".to_string())?;
        let Some(a) = self.parts.get_mut(tp) else {
            return Err("the partition was revoked".into());
        };
        a.reached = false;
        a.flags.closed.store(false, Ordering::Relaxed);
        let w = a.writer;
        self.queue_for(
            w,
            ToWriter::Reset {
                tp: tp.clone(),
                epoch,
                from: to,
                cut,
                limit,
            },
        );
        tracing::info!(task = %self.task.name, topic = %tp.topic, partition = tp.partition, offset = to, "partition rewound");
        Ok(epoch)
    }

    /// `--once`: commits targets past trailing markers, checks the group's coverage. `true`
    /// once every partition is covered.
    fn once_progress(&mut self, src: &mut Source) -> Result<bool, DumpError> {
        let mut commit = TopicPartitionList::new();
        if let Some(targets) = self.targets.as_mut() {
            for (tp, a) in &self.parts {
                let Some(to) = targets.target(tp) else {
                    continue;
                };
                // Held by this member: whatever covers it (a stored object, an adopted one, a
                // start committed where the archive ends) is this run's doing.
                targets.touched(tp);
                if a.reached
                    && a.flags.closed.load(Ordering::Relaxed)
                    && a.flags.pending.load(Ordering::Relaxed) == 0
                    && src.drained(tp)
                {
                    // Everything read is stored and committed, and only markers (which no
                    // consumer receives) lie between the last record and the target.
                    let _ =
                        commit.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(to));
                    targets.touched(tp);
                }
            }
        }
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
            if let Err(e) = src.commit(&behind, CommitMode::Sync) {
                tracing::warn!(task = %self.task.name, error = %e, "commit of a --once target failed; retried");
            }
        }
        targets.update(&committed);
        self.progress
            .update(self.taken.0, self.taken.1, targets.to_go(&committed));
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
            self.progress.finish();
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

    /// The task's topics now: the list, or the topics its regex matches (listed again every
    /// `topic_refresh_secs`; once for `--once`).
    fn wanted(&mut self, src: &Source) -> Result<Option<Vec<String>>, DumpError> {
        let first = self.wanted.is_none();
        if !first && (self.opts.once || Instant::now() < self.next_refresh) {
            return Ok(None);
        }
        self.next_refresh = Instant::now() + self.task.topic_refresh;
        let c = src.consumer();
        let wanted: Vec<String> = match self.task.topics.listed() {
            Some(l) => l,
            None => {
                let md = match c.fetch_metadata(None, Duration::from_secs(10)) {
                    Ok(md) => md,
                    Err(e) if !first => {
                        tracing::warn!(task = %self.task.name, error = %e, "cannot list topics; keeping the current subscription");
                        return Ok(None);
                    }
                    Err(e) => return Err(self.kafka_failure(src, e)),
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
        if self.wanted.as_ref() == Some(&wanted) {
            return Ok(None);
        }
        if self.opts.once && first {
            self.check_topics_exist(src, &wanted)?;
            self.targets = Some(
                Targets::note(c, &self.group, &wanted, self.opts.once_deadline)
                    .map_err(DumpError::Kafka)?,
            );
        }
        self.wanted = Some(wanted.clone());
        Ok(Some(wanted))
    }

    /// A failed Kafka call: the cluster's refusal when the consumer saw one, else unreachable.
    fn kafka_failure(&self, src: &Source, e: rdkafka::error::KafkaError) -> DumpError {
        DumpError::Kafka(src.consumer().context().watch.failure(&self.kafka, e))
    }

    /// `--once` must not succeed silently when there is nothing it could read.
    fn check_topics_exist(&self, src: &Source, wanted: &[String]) -> Result<(), DumpError> {
        if wanted.is_empty() {
            return Err(DumpError::NoTopics {
                task: self.task.name.to_string(),
                topics: self.task.topics.to_string(),
            });
        }
        let c = src.consumer();
        let md = c
            .fetch_metadata(None, Duration::from_secs(10))
            .map_err(|e| self.kafka_failure(src, e))?;
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

    /// The snapshots, for the one at the end of a run.
    pub fn into_snapshots(self) -> super::snapshot::Snapshots {
        self.snapshots
    }

    /// Closes every open object, lets the writers and sequencers store and commit what they
    /// hold (serving their commits meanwhile), within a grace period.
    pub fn shut_down(&mut self, src: &mut Source) {
        self.stopping = true;
        self.progress.finish();
        src.flush(self);
        for w in 0..self.writers.len() {
            self.queue_for(w, ToWriter::Close { tp: None });
        }
        let grace = if self.opts.once {
            super::task::ONCE_STOP_GRACE
        } else {
            super::task::STOP_GRACE
        };
        let deadline = Instant::now() + grace;
        // Writers end once their queue is drained and closed.
        src.drain(self, deadline, |s| s.stash.iter().any(|q| !q.is_empty()));
        self.writers.clear();
        self.stash.clear();
        if !src.drain(self, deadline, |s| {
            s.sequencers.iter().any(|h| !h.is_finished())
        }) {
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
        }
        // A last round for commits asked for right at the end.
        self.serve_controls(src);
    }
}

impl Sink for DumpSink {
    type Error = DumpError;

    fn topics(&mut self, src: &Source) -> Result<Option<Vec<String>>, DumpError> {
        self.wanted(src)
    }

    fn assigned(&mut self, tp: &Tp) -> Result<Admit, DumpError> {
        let admit = match &self.targets {
            // Not a partition of this run's targets (created after it started): later.
            Some(t) => match t.target(tp) {
                Some(to) => Admit::Read { target: Some(to) },
                None => return Ok(Admit::Skip),
            },
            None => Admit::Read { target: None },
        };
        let writer = self.next_writer % self.writers.len().max(1);
        self.next_writer += 1;
        let flags = Arc::new(PartitionFlags::default());
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let handle = self.rt.spawn(super::sequencer::sequence(
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
                flags: flags.clone(),
                reached: false,
            },
        );
        self.queue_for(
            writer,
            ToWriter::Assigned {
                tp: tp.clone(),
                epoch: 0,
                objects: tx,
                flags,
            },
        );
        Ok(admit)
    }

    fn revoked(&mut self, tp: &Tp) {
        let Some(a) = self.parts.remove(tp) else {
            return;
        };
        a.flags.revoked.store(true, Ordering::Relaxed);
        self.queue_for(a.writer, ToWriter::Revoked { tp: tp.clone() });
        if a.flags.pending.load(Ordering::Relaxed) > 0 {
            tracing::info!(task = %self.task.name, topic = %tp.topic, partition = tp.partition, "partition revoked: dropping what is not stored; its new owner reads it again from the committed offset");
        }
    }

    fn offer(&mut self, tp: &Tp, batch: Batch) -> Result<(), Batch> {
        let Some(a) = self.parts.get(tp) else {
            return Ok(());
        };
        let w = a.writer;
        if w >= self.writers.len() {
            return Ok(());
        }
        // Behind what its writer was told before: wait, to keep the order.
        if !self.stash[w].is_empty() {
            return Err(batch);
        }
        let (records, bytes) = (batch.len() as u64, batch.bytes() as u64);
        match self.writers[w].try_send(ToWriter::Batch {
            tp: tp.clone(),
            batch,
        }) {
            Ok(()) => {
                a.flags.closed.store(false, Ordering::Relaxed);
                self.consumed.0 += records;
                self.consumed.1 += bytes;
                self.taken.0 += records;
                self.taken.1 += bytes;
                Ok(())
            }
            Err(TrySendError::Full(ToWriter::Batch { batch, .. })) => Err(batch),
            Err(_) => Ok(()),
        }
    }

    fn reached(&mut self, _src: &mut Source, tp: &Tp, _to: i64) {
        let Some(a) = self.parts.get_mut(tp) else {
            return;
        };
        a.reached = true;
        let w = a.writer;
        self.queue_for(
            w,
            ToWriter::Close {
                tp: Some(tp.clone()),
            },
        );
        self.once_soon = true;
    }

    fn serve(&mut self, src: &mut Source) -> Result<bool, DumpError> {
        if self.ucx.fatal.is_set() {
            return Ok(true);
        }
        if let Some(part) = self.ready.take() {
            part.running();
        }
        self.drain_stash();
        self.serve_controls(src);
        if self.targets.is_some()
            && !self.stopping
            && (self.once_soon || Instant::now() >= self.next_check)
        {
            self.once_soon = false;
            self.next_check = Instant::now() + ONCE_CHECK;
            return self.once_progress(src);
        }
        Ok(false)
    }

    fn tick(&mut self, _src: &mut Source) -> Result<(), DumpError> {
        for w in 0..self.writers.len() {
            self.queue_for(w, ToWriter::Tick);
        }
        if !self.opts.once {
            self.snapshots.tick();
        }
        let (records, bytes) = std::mem::take(&mut self.consumed);
        self.metrics.consumed_records.increment(records);
        self.metrics.consumed_bytes.increment(bytes);
        let held = self.buffered.load(Ordering::Relaxed) + self.in_flight.used();
        self.metrics.buffered.set(held as f64);
        Ok(())
    }

    fn consume_error(
        &mut self,
        src: &Source,
        e: rdkafka::error::KafkaError,
    ) -> Result<(), DumpError> {
        consumer_error(&self.kafka, src, &self.task.name, e)
    }
}

/// What a dump consumer's error means, for the plain and the Iceberg sink alike: a refused read
/// and a subscription that cannot hold stop the task with the reason; librdkafka retries the
/// rest.
pub(crate) fn consumer_error(
    kafka: &KafkaConfig,
    src: &Source,
    task: &crate::config::TaskName,
    e: rdkafka::error::KafkaError,
) -> Result<(), DumpError> {
    if e.rdkafka_error_code()
        .is_some_and(refusal::is_authorization)
    {
        return Err(DumpError::Kafka(KafkaError::not_authorized(
            kafka,
            format!(
                "{e} (reading topics {} in consumer group {:?})",
                src.subscribed().join(", "),
                task.as_str()
            ),
        )));
    }
    if matches!(e, rdkafka::error::KafkaError::Subscription(_)) {
        return Err(DumpError::Kafka(KafkaError::Client {
            servers: "the configured brokers".into(),
            source: e,
        }));
    }
    tracing::warn!(task = %task, error = %e, "consumer error; librdkafka retries");
    Ok(())
}
