//! An Iceberg task's side of the Kafka source: a partition is held when assigned until its
//! table says where it continues, batches go to the writer thread, a cut every
//! `dump_interval_secs` (and when a `--once` run read everything it holds) makes the committer
//! commit what was written. The table holds the offsets; the group's committed offsets are
//! only a report of them (for lag monitoring).

use super::catalog::{self, Tables};
use super::fence::Fence;
use super::offsets::{self, Offsets};
use super::pipeline::{self, Committer, Done, Report, Schemas, ToWriter};
use super::IcebergError;
use crate::config::{DumpTask, KafkaConfig};
use crate::dump::snapshot::Snapshots;
use crate::dump::start::{plan, store_gap, Facts, Plan, Refusal};
use crate::dump::task::{shares, TaskSetup};
use crate::dump::{Coverage, DumpError, DumpOptions, GapReport, PartitionReport, Summary};
use crate::kafka::source::{self, Admit, Batch, LagOf, Settings, Sink, Source};
use crate::kafka::Tp;
use crate::state::Occasion;
use crate::store::ObjectStore;
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Batches waiting for the writer thread.
const WRITER_QUEUE: usize = 64;
/// Closed files waiting for their upload.
const COMMITTER_QUEUE: usize = 4;
/// How often a `--once` run looks at the tables for what other members committed.
const ONCE_LOOK: Duration = Duration::from_secs(1);
/// What a stop gives the stages to commit what they hold.
const STOP_GRACE: Duration = Duration::from_secs(120);
/// How long a revoke waits for the commit in flight (a catalog that fails is retried for two
/// minutes; the group waits for this member meanwhile).
const REVOKE_WAIT: Duration = Duration::from_secs(60);

/// One partition this member holds.
struct Held {
    gen: u64,
    /// Where reading started (known once the table answered).
    started: Option<i64>,
    reached: bool,
}

struct IcebergSink {
    task: Arc<DumpTask>,
    kafka: KafkaConfig,
    opts: DumpOptions,
    rt: tokio::runtime::Handle,
    tables: Arc<Tables>,
    writer: Option<SyncSender<ToWriter>>,
    /// Messages the writer's full queue did not take yet, in order.
    stash: VecDeque<ToWriter>,
    reports: Receiver<Report>,
    report_tx: Sender<Report>,
    fatal: Option<IcebergError>,
    held: HashMap<Tp, Held>,
    gen: u64,
    /// `--once`: each partition's low and high watermark at start.
    targets: Option<HashMap<Tp, (i64, i64)>>,
    deadline: Instant,
    /// The newest offsets seen per topic's table.
    known: HashMap<String, Offsets>,
    wanted: Option<Vec<String>>,
    next_refresh: Instant,
    next_cut: Instant,
    /// `--once`: a partition reached its target since the last cut.
    cut_due: bool,
    next_look: Instant,
    looking: Arc<AtomicBool>,
    stopping: bool,
    store: Arc<dyn ObjectStore>,
    /// Offsets retention deleted before the tables had them, found by this run.
    gaps: Vec<GapReport>,
    snapshots: Snapshots,
    /// The task's part of `/readyz`, set running once the source serves the sink.
    ready: Option<crate::telemetry::readiness::Part>,
    /// The partitions held, as the committer checks them.
    fence: Arc<Fence>,
}

/// Runs one `format = "iceberg"` dump task to its end on the calling (the task's own) thread.
pub(crate) fn run_task(s: TaskSetup<'_>) -> Result<Summary, DumpError> {
    let TaskSetup {
        kafka,
        task,
        store,
        rt,
        memory,
        opts,
        stop,
        snapshots,
        ready,
        ..
    } = s;
    // The task's buffer budget, shared out as a dump task's with one writer.
    let shares = shares(memory, store.part_size(), 1, task.cdc.is_some());
    let task = Arc::new(task);
    let name = task.name.to_string();
    let fail = {
        let task = name.clone();
        move |e: IcebergError| DumpError::Iceberg {
            task: task.clone(),
            source: e,
        }
    };
    let Some(options) = task.iceberg.clone() else {
        return Err(DumpError::Worker {
            task: name.clone(),
            detail: "not an Iceberg task".into(),
        });
    };
    // Set-up, before any stage runs: the task's own thread may wait here.
    let tables = Arc::new(
        rt.block_on(catalog::open(
            &name,
            &options,
            store.clone(),
            &task.directory,
        ))
        .map_err(&fail)?,
    );
    // The cluster state a recovery needs, as a dump task records it (docs/restore.md).
    let snapshots = Snapshots::new(
        kafka.clone(),
        task.clone(),
        store.clone(),
        rt.clone(),
        snapshots,
    );
    snapshots.take_now(Occasion::Start)?;
    let fence = Arc::new(Fence::default());
    let on_revoke: source::RevokeHook = {
        let (fence, task) = (fence.clone(), name.clone());
        Arc::new(move |tps: &[(String, i32)]| {
            if !fence.give_up(tps, REVOKE_WAIT) {
                tracing::warn!(task = %task, ?tps, "partitions given up while a commit was still in flight after {} s; their next owner may find it landed later and stop with a refused commit (a restart resumes at the table's offsets)", REVOKE_WAIT.as_secs());
            }
        })
    };
    let mut src = Source::new(
        kafka,
        &Settings {
            group: name.clone(),
            client_id: None,
            task: name.clone(),
            flow: None,
            lag: LagOf::Committed,
            tuning: {
                let mut t = source::fetch_budget(shares.queue);
                t.push(("max.poll.interval.ms", "600000".into()));
                t
            },
            partition_eof: false,
            linger: None,
            on_revoke: Some(on_revoke),
        },
    )?;
    let schemas: Schemas = Arc::new(Mutex::new(HashMap::new()));
    let done = Arc::new(Mutex::new(Done::default()));
    let (report_tx, reports) = std::sync::mpsc::channel();
    let (to_committer, committer_rx) = tokio::sync::mpsc::channel(COMMITTER_QUEUE);
    let committer = rt.spawn(
        Committer {
            tables: tables.clone(),
            store: store.clone(),
            schemas: schemas.clone(),
            reports: report_tx.clone(),
            done: done.clone(),
            task: name.clone(),
            cdc: task.cdc.is_some().then(|| task.directory.clone()),
            fence: fence.clone(),
        }
        .run(committer_rx),
    );
    let (writer_tx, writer_rx) = std::sync::mpsc::sync_channel(WRITER_QUEUE);
    let writer = {
        let report = report_tx.clone();
        let setup = pipeline::WriterSetup {
            schemas,
            compression: task.format.compression,
            max_file_size: task.max_file_size.bytes(),
            cdc: task.cdc.clone(),
            open_budget: shares.open_per_writer,
        };
        std::thread::Builder::new()
            .name(format!("dump-{name}-iceberg"))
            .spawn(move || {
                pipeline::write(writer_rx, to_committer, setup, |e| {
                    let _ = report.send(Report::Failed(e));
                })
            })
            .map_err(|e| DumpError::Worker {
                task: name.clone(),
                detail: format!("cannot start the writer thread: {e}"),
            })?
    };
    let mut sink = IcebergSink {
        task: task.clone(),
        kafka: kafka.clone(),
        opts,
        rt,
        tables,
        writer: Some(writer_tx),
        stash: VecDeque::new(),
        reports,
        report_tx,
        fatal: None,
        held: HashMap::new(),
        gen: 0,
        targets: None,
        deadline: Instant::now() + opts.once_deadline,
        known: HashMap::new(),
        wanted: None,
        next_refresh: Instant::now(),
        next_cut: Instant::now() + task.interval,
        cut_due: false,
        next_look: Instant::now(),
        looking: Arc::new(AtomicBool::new(false)),
        stopping: false,
        store: store.clone(),
        gaps: Vec::new(),
        snapshots,
        ready: Some(ready),
        fence,
    };
    let outcome = src.run(&mut sink, &stop);
    // Shut down: what is read goes to the writer, the writer cuts once more when its queue
    // closes, the committer commits it and ends.
    sink.stopping = true;
    let deadline = Instant::now() + STOP_GRACE;
    src.flush(&mut sink);
    src.drain(&mut sink, deadline, |s| !s.stash.is_empty());
    sink.writer = None;
    let finished = src.drain(&mut sink, deadline, |s| {
        !committer.is_finished() && s.fatal.is_none()
    });
    let partitions = sink.coverage();
    let gaps = std::mem::take(&mut sink.gaps);
    let fatal = sink.fatal.take();
    drop(src);
    let _ = writer.join();
    if let Some(e) = fatal {
        return Err(fail(e));
    }
    outcome?;
    if !finished {
        return Err(DumpError::Unflushed {
            task: name,
            partitions: 1,
        });
    }
    if sink.opts.once {
        sink.snapshots.take_now(Occasion::End)?;
    }
    let d = done.lock().map(|d| d.clone()).unwrap_or_default();
    tracing::info!(task = %name, files = d.files, commits = d.commits, records = d.records, "task finished: everything read is in its tables");
    Ok(Summary {
        task: name,
        objects: d.files,
        records: d.records,
        bytes: d.bytes,
        cdc: d.cdc,
        partitions,
        gaps,
    })
}

impl IcebergSink {
    fn queue(&mut self, msg: ToWriter) {
        let Some(w) = &self.writer else { return };
        if self.stash.is_empty() {
            match w.try_send(msg) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                Err(TrySendError::Full(msg)) => self.stash.push_back(msg),
            }
        } else {
            self.stash.push_back(msg);
        }
    }

    fn drain_stash(&mut self) {
        let Some(w) = &self.writer else { return };
        while let Some(msg) = self.stash.pop_front() {
            match w.try_send(msg) {
                Ok(()) | Err(TrySendError::Disconnected(_)) => {}
                Err(TrySendError::Full(msg)) => {
                    self.stash.push_front(msg);
                    break;
                }
            }
        }
    }

    /// Where a partition starts: where its table holds it up to (`at`), else at the task's
    /// `start_offset`. Records retention deleted before the table had them are a gap, recorded
    /// and reported as a dump's; a table ahead of the partition's end is refused.
    fn start_of(&mut self, src: &Source, tp: &Tp, at: Option<i64>) -> Result<i64, DumpError> {
        let (low, high) = src
            .consumer()
            .fetch_watermarks(&tp.topic, tp.partition, Duration::from_secs(10))
            .map_err(|e| self.kafka_failure(src, e))?;
        let facts = Facts {
            committed: None,
            low,
            high,
        };
        match plan(facts, at, self.task.start_offset) {
            Err(Refusal::ArchiveAhead { end, high }) => Err(DumpError::Iceberg {
                task: self.task.name.to_string(),
                source: IcebergError::TableAhead {
                    table: self.tables.ident(&tp.topic).to_string(),
                    partition: tp.partition,
                    at: end,
                    high,
                },
            }),
            // Not a table's answer (no group offset is asked).
            Err(Refusal::CommittedAhead { .. }) | Ok(Plan::AsCommitted) => Ok(at.unwrap_or(low)),
            Ok(Plan::Seek { at, gap }) => {
                if let Some(g) = gap {
                    self.gaps.push(GapReport {
                        topic: tp.topic.to_string(),
                        partition: tp.partition,
                        from: g.from,
                        to: g.to,
                    });
                    let (store, dir, task, tp, fail) = (
                        self.store.clone(),
                        self.task.directory.clone(),
                        self.task.name.to_string(),
                        tp.clone(),
                        self.report_tx.clone(),
                    );
                    self.rt.spawn(async move {
                        if let Err(e) = store_gap(store.as_ref(), &dir, &task, &tp, g).await {
                            let _ = fail.send(Report::Failed(IcebergError::Store(e)));
                        }
                    });
                }
                Ok(at)
            }
        }
    }

    fn kafka_failure(&self, src: &Source, e: rdkafka::error::KafkaError) -> DumpError {
        DumpError::Kafka(src.consumer().context().watch.failure(&self.kafka, e))
    }

    /// Takes what the committer reported.
    fn take_reports(&mut self, src: &mut Source) -> Result<(), DumpError> {
        while let Ok(r) = self.reports.try_recv() {
            match r {
                Report::Failed(e) => {
                    tracing::error!(task = %self.task.name, error = %e, "the Iceberg stages failed");
                    self.fatal.get_or_insert(e);
                }
                Report::Start { tp, gen, at, cdc } => {
                    if self.held.get(&tp).is_none_or(|h| h.gen != gen) {
                        continue;
                    }
                    if let Some(start) = cdc {
                        // Before the partition's first records.
                        self.queue(ToWriter::Start {
                            tp: tp.clone(),
                            start,
                        });
                    }
                    let start = self.start_of(src, &tp, at)?;
                    tracing::info!(task = %self.task.name, topic = %tp.topic, partition = tp.partition, offset = start, from_table = at.is_some(), "partition starts");
                    if let Some(h) = self.held.get_mut(&tp) {
                        h.started = Some(start);
                    }
                    src.release(&tp, start);
                }
                Report::Table { topic, offsets } => {
                    // The group's offsets follow the table's: a report for lag monitoring.
                    let mut tpl = TopicPartitionList::new();
                    for tp in self.held.keys().filter(|tp| *tp.topic == *topic) {
                        if let Some(&o) = offsets.get(&tp.partition) {
                            let _ = tpl.add_partition_offset(
                                &tp.topic,
                                tp.partition,
                                Offset::Offset(o),
                            );
                        }
                    }
                    if tpl.count() > 0 {
                        let _ = src.commit(&tpl, CommitMode::Async);
                    }
                    self.known.insert(topic, offsets);
                }
            }
        }
        Ok(())
    }

    /// `--once`: every partition's coverage.
    fn coverage(&self) -> Vec<PartitionReport> {
        let Some(targets) = &self.targets else {
            return Vec::new();
        };
        let mut out: Vec<PartitionReport> = targets
            .iter()
            .map(|(tp, &(low, high))| {
                let (coverage, from) = self.coverage_of(tp, low, high);
                PartitionReport {
                    topic: tp.topic.to_string(),
                    partition: tp.partition,
                    from,
                    to: high,
                    coverage,
                }
            })
            .collect();
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        out
    }

    /// `--once`: whether a partition is still short of its target. Asked at every turn of the
    /// consumer, so it builds no report (that cost 18 % of a run's CPU).
    fn any_not_covered(&self) -> bool {
        self.targets.as_ref().is_some_and(|targets| {
            targets
                .iter()
                .any(|(tp, &(low, high))| self.coverage_of(tp, low, high).0 == Coverage::NotCovered)
        })
    }

    /// One partition's coverage, and where this member started it, else what the table or the
    /// log held.
    fn coverage_of(&self, tp: &Tp, low: i64, high: i64) -> (Coverage, i64) {
        let at = self
            .known
            .get(&*tp.topic)
            .and_then(|o| o.get(&tp.partition))
            .copied();
        let started = self.held.get(tp).and_then(|h| h.started);
        let coverage = if at.is_some_and(|a| a >= high) {
            if self.held.contains_key(tp) {
                Coverage::ThisRun
            } else {
                Coverage::OtherMember
            }
        } else if high <= low || started.is_some_and(|s| s >= high) {
            // Nothing to read (a start at the end needs no commit either).
            Coverage::NothingNew
        } else {
            Coverage::NotCovered
        };
        (coverage, started.or(at).unwrap_or(low))
    }

    /// `--once`: asks the tables what they hold (other members' commits included).
    fn look(&mut self) {
        if self.looking.swap(true, Ordering::Relaxed) {
            return;
        }
        let topics = self.wanted.clone().unwrap_or_default();
        let (tables, tx, looking) = (
            self.tables.clone(),
            self.report_tx.clone(),
            self.looking.clone(),
        );
        self.rt.spawn(async move {
            for t in topics {
                if let Ok((_, offsets)) = tables.offsets(&t).await {
                    let _ = tx.send(Report::Table { topic: t, offsets });
                }
            }
            looking.store(false, Ordering::Relaxed);
        });
    }

    /// The task's topics now (a regex is listed again every `topic_refresh_secs`); a `--once`
    /// run notes every partition's watermarks first.
    fn topics_now(&mut self, src: &Source) -> Result<Option<Vec<String>>, DumpError> {
        let first = self.wanted.is_none();
        if !first && (self.opts.once || Instant::now() < self.next_refresh) {
            return Ok(None);
        }
        self.next_refresh = Instant::now() + self.task.topic_refresh;
        let c = src.consumer();
        let md = match c.fetch_metadata(None, Duration::from_secs(10)) {
            Ok(md) => md,
            Err(e) if !first => {
                tracing::warn!(task = %self.task.name, error = %e, "cannot list topics; keeping the current subscription");
                return Ok(None);
            }
            Err(e) => return Err(self.kafka_failure(src, e)),
        };
        let mut wanted: Vec<String> = match self.task.topics.listed() {
            Some(l) => l,
            None => md
                .topics()
                .iter()
                .map(|t| t.name().to_string())
                .filter(|n| self.task.topics.matches(n))
                .collect(),
        };
        wanted.sort();
        if let Some((a, b)) = offsets::clash(wanted.iter().map(String::as_str)) {
            let table = self.tables.ident(&a).to_string();
            return Err(DumpError::Iceberg {
                task: self.task.name.to_string(),
                source: IcebergError::Clash(a, b, table),
            });
        }
        if self.wanted.as_ref() == Some(&wanted) {
            return Ok(None);
        }
        if self.opts.once && first {
            let mut targets = HashMap::new();
            for name in &wanted {
                let Some(t) = md
                    .topics()
                    .iter()
                    .find(|t| t.name() == name && t.error().is_none())
                else {
                    return Err(DumpError::NoTopics {
                        task: self.task.name.to_string(),
                        topics: format!("[{name:?}]"),
                    });
                };
                for p in t.partitions() {
                    let (low, high) = c
                        .fetch_watermarks(name, p.id(), Duration::from_secs(10))
                        .map_err(|e| self.kafka_failure(src, e))?;
                    targets.insert(Tp::new(name, p.id()), (low, high));
                }
            }
            if wanted.is_empty() {
                return Err(DumpError::NoTopics {
                    task: self.task.name.to_string(),
                    topics: self.task.topics.to_string(),
                });
            }
            self.targets = Some(targets);
            self.deadline = Instant::now() + self.opts.once_deadline;
        }
        self.wanted = Some(wanted.clone());
        Ok(Some(wanted))
    }
}

impl Sink for IcebergSink {
    type Error = DumpError;

    fn topics(&mut self, src: &Source) -> Result<Option<Vec<String>>, DumpError> {
        self.topics_now(src)
    }

    fn assigned(&mut self, tp: &Tp) -> Result<Admit, DumpError> {
        let target = match &self.targets {
            Some(t) => match t.get(tp) {
                Some(&(_, high)) => Some(high),
                // Created after the run started: the next run's.
                None => return Ok(Admit::Skip),
            },
            None => None,
        };
        self.gen += 1;
        self.fence.own(tp, self.gen);
        self.held.insert(
            tp.clone(),
            Held {
                gen: self.gen,
                started: None,
                reached: false,
            },
        );
        self.queue(ToWriter::Assigned {
            tp: tp.clone(),
            gen: self.gen,
        });
        Ok(Admit::Hold { target })
    }

    fn revoked(&mut self, tp: &Tp) {
        if self.held.remove(tp).is_some() {
            self.queue(ToWriter::Revoked { tp: tp.clone() });
        }
    }

    fn offer(&mut self, tp: &Tp, batch: Batch) -> Result<(), Batch> {
        if !self.held.contains_key(tp) {
            return Ok(());
        }
        let Some(w) = &self.writer else {
            return Ok(());
        };
        if !self.stash.is_empty() {
            return Err(batch);
        }
        match w.try_send(ToWriter::Batch {
            tp: tp.clone(),
            batch,
        }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(ToWriter::Batch { batch, .. })) => Err(batch),
            Err(_) => Ok(()),
        }
    }

    fn reached(&mut self, _src: &mut Source, tp: &Tp, to: i64) {
        if let Some(h) = self.held.get_mut(tp) {
            h.reached = true;
            self.cut_due = true;
            self.queue(ToWriter::Reached { tp: tp.clone(), to });
        }
    }

    fn serve(&mut self, src: &mut Source) -> Result<bool, DumpError> {
        if let Some(part) = self.ready.take() {
            part.running();
        }
        self.drain_stash();
        self.take_reports(src)?;
        if let Some(e) = &self.fatal {
            return Err(DumpError::Iceberg {
                task: self.task.name.to_string(),
                source: e.clone(),
            });
        }
        if self.stopping || self.targets.is_none() {
            return Ok(false);
        }
        // `--once`: once every partition held was read to its target, commit it now.
        if self.cut_due && self.held.values().all(|h| h.reached) {
            self.cut_due = false;
            self.queue(ToWriter::Cut);
        }
        if !self.any_not_covered() {
            return Ok(true);
        }
        if Instant::now() >= self.deadline {
            let left: Vec<String> = self
                .coverage()
                .iter()
                .filter(|p| p.coverage == Coverage::NotCovered)
                .map(|p| format!("{}-{}", p.topic, p.partition))
                .collect();
            return Err(DumpError::OnceIncomplete {
                task: self.task.name.to_string(),
                deadline_secs: self.opts.once_deadline.as_secs(),
                partitions: left.join(", "),
            });
        }
        Ok(false)
    }

    fn tick(&mut self, _src: &mut Source) -> Result<(), DumpError> {
        if !self.opts.once {
            self.snapshots.tick();
        }
        let now = Instant::now();
        if now >= self.next_cut && !self.stopping {
            self.next_cut = now + self.task.interval;
            self.queue(ToWriter::Cut);
        }
        if self.targets.is_some() && now >= self.next_look {
            self.next_look = now + ONCE_LOOK;
            self.look();
        }
        Ok(())
    }

    fn consume_error(
        &mut self,
        src: &Source,
        e: rdkafka::error::KafkaError,
    ) -> Result<(), DumpError> {
        crate::dump::consumer_error(&self.kafka, src, &self.task.name, e)
    }
}
