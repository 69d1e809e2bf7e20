//! One pipeline of a flow: a member of the flow's source consumer group (the Kafka source,
//! `kafka::source`), whose sink starts a transaction worker (`worker.rs`) per partition it
//! holds. A partition is held until its worker fenced the earlier holder and read where to
//! start; its batches then go to the worker's queue, and the worker's reports (committed,
//! rewound, fenced) come back between polls.

use super::setup::{FlowSetup, Route};
use super::worker::{client_err, FromWorker, ToWorker, WorkerHandle};
use super::ReplicateError;
use crate::kafka::source::{Admit, Batch, LagOf, Settings, Sink, Source, Tp};
use rdkafka::consumer::CommitMode;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::mpsc::{Receiver, Sender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records wait at most this long in a partly filled batch before they go to their worker: a
/// steady stream fills a batch slowly, and the latency to the target is what users see.
const BATCH_LINGER: Duration = Duration::from_millis(5);
/// After its producer was fenced, a partition the group still assigns to this member gets a
/// new worker this much later: by then a zombie has heard of its revocation, while a producer
/// fenced only by a timed-out transaction resumes.
const REFENCE_AFTER: Duration = Duration::from_secs(5);

/// Runs one pipeline until `stop` or a fatal error of the flow.
pub(super) fn pipeline(
    setup: Arc<FlowSetup>,
    index: u32,
    stop: Arc<AtomicBool>,
) -> Result<(), ReplicateError> {
    let names = &setup.names;
    let settings = Settings {
        group: names.group(),
        client_id: Some(format!("{}-{index}", names.group())),
        task: setup.task.name.to_string(),
        flow: Some(setup.flow()),
        lag: LagOf::Position,
        tuning: vec![
            ("queued.max.messages.kbytes", (16 << 10).to_string()),
            ("max.partition.fetch.bytes", (2 << 20).to_string()),
            // Partitions added to a subscribed topic reach the group on a metadata refresh
            // only.
            (
                "topic.metadata.refresh.interval.ms",
                setup
                    .task
                    .topic_refresh
                    .as_millis()
                    .clamp(1000, 300_000)
                    .to_string(),
            ),
        ],
        partition_eof: false,
        linger: Some(BATCH_LINGER),
        on_revoke: None,
    };
    let mut src = Source::new(&setup.source, &settings).map_err(ReplicateError::Kafka)?;
    let mut sink = ReplicateSink {
        setup: setup.clone(),
        held: HashMap::new(),
        from: std::sync::mpsc::channel(),
        routes: Arc::new(Vec::new()),
        version: u64::MAX,
        fenced: Vec::new(),
        reached: Vec::new(),
        queued: Arc::new(AtomicUsize::new(0)),
    };
    let r = src.run(&mut sink, &stop);
    for (_, h) in sink.held.drain() {
        h.worker.stop();
    }
    r
}

/// A partition this pipeline holds: its worker, and the epoch of what it reads.
struct Held {
    worker: WorkerHandle,
    epoch: u64,
}

struct ReplicateSink {
    setup: Arc<FlowSetup>,
    held: HashMap<Tp, Held>,
    from: (Sender<FromWorker>, Receiver<FromWorker>),
    routes: Arc<Vec<Route>>,
    version: u64,
    /// Partitions whose producer was fenced, and when to look at them again.
    fenced: Vec<(Tp, Instant)>,
    /// `--once`: partitions whose worker still has to hear that the target was reached.
    reached: Vec<(Tp, i64)>,
    /// Bytes queued for all its workers.
    queued: Arc<AtomicUsize>,
}

impl ReplicateSink {
    /// Starts the worker of a partition this member was given: the partition is held until
    /// the worker knows where to start.
    fn start_partition(&mut self, tp: &Tp) -> Admit {
        let Some(route) = self.routes.iter().find(|r| *r.source == *tp.topic) else {
            return Admit::Skip;
        };
        let target = match &self.setup.once {
            Some(targets) => match targets.get(&(tp.topic.to_string(), tp.partition)) {
                Some(&to) => Some(to),
                // Not there when --once started: not this run's business.
                None => return Admit::Skip,
            },
            None => None,
        };
        match WorkerHandle::spawn(
            &self.setup,
            tp.clone(),
            route.target.clone(),
            self.from.0.clone(),
            self.queued.clone(),
        ) {
            Ok(worker) => {
                self.held.insert(tp.clone(), Held { worker, epoch: 0 });
                Admit::Hold { target }
            }
            Err(e) => {
                self.setup.fatal.set(e);
                Admit::Skip
            }
        }
    }

    /// Tells workers of reached targets; a full queue is tried again at the next turn.
    fn tell_reached(&mut self) {
        let held = &self.held;
        self.reached.retain(|(tp, to)| {
            let Some(h) = held.get(tp) else {
                return false;
            };
            matches!(
                h.worker.tx.try_send(ToWorker::Reached {
                    to: *to,
                    epoch: h.epoch,
                }),
                Err(TrySendError::Full(_))
            )
        });
    }
}

impl Sink for ReplicateSink {
    type Error = ReplicateError;

    /// Follows the controller's topic list.
    fn topics(&mut self, _src: &Source) -> Result<Option<Vec<String>>, ReplicateError> {
        let (version, routes) = self.setup.routes();
        if version == self.version {
            return Ok(None);
        }
        let topics = routes.iter().map(|r| r.source.clone()).collect();
        self.version = version;
        self.routes = routes;
        Ok(Some(topics))
    }

    fn assigned(&mut self, tp: &Tp) -> Result<Admit, ReplicateError> {
        Ok(self.start_partition(tp))
    }

    fn revoked(&mut self, tp: &Tp) {
        self.fenced.retain(|(f, _)| f != tp);
        self.reached.retain(|(r, _)| r != tp);
        if let Some(h) = self.held.remove(tp) {
            h.worker.stop();
        }
    }

    fn offer(&mut self, tp: &Tp, batch: Batch) -> Result<(), Batch> {
        let Some(h) = self.held.get(tp) else {
            return Ok(());
        };
        let q = &h.worker.queued;
        if !q.room(batch.bytes()) {
            return Err(batch);
        }
        let bytes = batch.bytes();
        q.add(bytes);
        match h.worker.tx.try_send(ToWorker::Batch(batch)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(ToWorker::Batch(b))) => {
                q.sub(bytes);
                Err(b)
            }
            // The worker is gone (it failed; the flow stops): the batch with it.
            Err(_) => {
                q.sub(bytes);
                Ok(())
            }
        }
    }

    fn reached(&mut self, _src: &mut Source, tp: &Tp, to: i64) {
        self.reached.push((tp.clone(), to));
        self.tell_reached();
    }

    fn serve(&mut self, src: &mut Source) -> Result<bool, ReplicateError> {
        if self.setup.fatal.is_set() {
            return Ok(true);
        }
        while let Ok(m) = self.from.1.try_recv() {
            match m {
                FromWorker::Ready { tp, next } => src.release(&tp, next),
                FromWorker::Committed { tp, next } => {
                    // A report for lag metrics and kafka-consumer-groups: the target holds the
                    // truth.
                    let mut tpl = TopicPartitionList::new();
                    let _ = tpl.add_partition_offset(&tp.topic, tp.partition, Offset::Offset(next));
                    let _ = src.commit(&tpl, CommitMode::Async);
                }
                FromWorker::Rewind { tp, next } => {
                    self.reached.retain(|(r, _)| *r != tp);
                    if let (Some(h), Some(epoch)) = (self.held.get_mut(&tp), src.rewind(&tp, next))
                    {
                        h.epoch = epoch;
                        let _ = h.worker.tx.send(ToWorker::Resumed { epoch });
                    }
                }
                FromWorker::Fenced { tp } => {
                    tracing::warn!(task = %self.setup.task.name, flow = %self.setup.flow(), topic = %tp.topic, partition = tp.partition, "this partition's producer was fenced: another member took the partition over (or the target aborted a transaction that outlived its timeout); leaving it, and starting again if the group still gives it to this member");
                    self.reached.retain(|(r, _)| *r != tp);
                    if let Some(h) = self.held.remove(&tp) {
                        h.worker.stop();
                    }
                    src.hold(&tp);
                    self.fenced.push((tp, Instant::now() + REFENCE_AFTER));
                }
            }
        }
        self.tell_reached();
        Ok(false)
    }

    fn tick(&mut self, src: &mut Source) -> Result<(), ReplicateError> {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = self.fenced.drain(..).partition(|(_, at)| *at <= now);
        self.fenced = later;
        for (tp, _) in due {
            if src.is_assigned(&tp) {
                let admit = self.start_partition(&tp);
                src.readmit(&tp, admit);
            }
        }
        Ok(())
    }

    fn consume_error(
        &mut self,
        _src: &Source,
        e: rdkafka::error::KafkaError,
    ) -> Result<(), ReplicateError> {
        if matches!(e, rdkafka::error::KafkaError::Subscription(_)) {
            return Err(client_err(&self.setup.source)(e));
        }
        self.setup.stats.error("consume");
        tracing::warn!(task = %self.setup.task.name, flow = %self.setup.flow(), error = %e, "consumer error; librdkafka retries");
        Ok(())
    }
}
