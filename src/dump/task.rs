//! A dump task on its own thread: shares out its buffer budget, starts its writer threads, puts
//! the Kafka source (`kafka::source`) under its sink (`sink.rs`), and runs the orderly shutdown
//! that lets every stage store and commit what it holds. Before consuming, it removes what a
//! crash of an earlier run left behind.

use super::budget::ByteBudget;
use super::index::{self, Seal};
use super::once::Targets;
use super::sequencer::UploadContext;
use super::sink::DumpSink;
use super::snapshot::{Policy, Snapshots};
use super::writer::{self, WriterContext};
use super::{DumpError, DumpOptions, Fatal, Metrics, Summary};
use crate::config::{DumpTask, KafkaConfig};
use crate::kafka::source::{self, offset_of, LagOf, Settings, Source};
use crate::kafka::Reader;
use crate::state::Occasion;
use crate::store::{ErrorKind, ObjectStore};
use rdkafka::TopicPartitionList;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A clean stop gives the store this long to take what is buffered...
pub(super) const STOP_GRACE: Duration = Duration::from_secs(60);
/// ... and a `--once` run this long.
pub(super) const ONCE_STOP_GRACE: Duration = Duration::from_secs(300);

/// Everything a task needs to run.
pub(crate) struct TaskSetup<'a> {
    pub kafka: &'a KafkaConfig,
    pub task: DumpTask,
    pub store: Arc<dyn ObjectStore>,
    pub rt: tokio::runtime::Handle,
    pub memory: usize,
    pub leftover_age: Duration,
    pub opts: DumpOptions,
    pub stop: Arc<AtomicBool>,
    /// How the task takes its cluster state snapshots.
    pub snapshots: Policy,
    /// The task's part of `/readyz`: running once the source serves the sink.
    pub ready: crate::telemetry::readiness::Part,
}

/// How much of the buffer budget librdkafka's prefetch queue may use.
const QUEUE_SHARE: usize = 8;

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
    let queue = memory / QUEUE_SHARE;
    let in_flight = (memory / 8).max(2 * part_size);
    let queued = memory / 16;
    let free_pages = if tables { memory / 4 } else { memory / 8 };
    let batches_per_writer = (queued / source::BATCH_BYTES / writers).max(2);
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
    #[cfg(feature = "iceberg")]
    if s.task.iceberg.is_some() {
        // Its own sink: the table's commits replace the sequencers, the index and the seals.
        return crate::iceberg::run_task(s);
    }
    let task = Arc::new(s.task);
    let name = task.name.to_string();
    let writers =
        writer_threads(std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get));
    let part_size = s.store.part_size();
    let sh = shares(s.memory, part_size, writers, task.cdc.is_some());
    let mut src = Source::new(
        s.kafka,
        &Settings {
            group: task.name.to_string(),
            client_id: None,
            task: task.name.to_string(),
            flow: None,
            lag: LagOf::Committed,
            tuning: {
                let mut t = source::fetch_budget(sh.queue);
                // Uploads happen between polls; leave room for a slow store before the group
                // decides this member is dead.
                t.push(("max.poll.interval.ms", "600000".into()));
                t
            },
            partition_eof: false,
            linger: None,
            on_revoke: None,
        },
    )?;
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
    let snapshots = Snapshots::new(
        s.kafka.clone(),
        task.clone(),
        s.store.clone(),
        s.rt.clone(),
        s.snapshots.clone(),
    );
    snapshots.take_now(Occasion::Start)?;
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
    let mut sink = DumpSink::new(
        task.clone(),
        s.kafka.clone(),
        s.rt,
        snapshots,
        group,
        senders,
        control_rx,
        ucx.clone(),
        s.opts,
        metrics.clone(),
        in_flight.clone(),
        buffered,
    );
    sink.ready = Some(s.ready);
    let outcome = src.run(&mut sink, &s.stop);
    let report = sink.targets.as_ref().map(Targets::report);
    sink.shut_down(&mut src);
    let snapshots = sink.into_snapshots();
    // Dropping the consumer leaves the group and can block; this is the task's own thread.
    drop(src);
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
    if s.opts.once {
        snapshots.take_now(Occasion::End)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_shared_out_between_the_stages() {
        let s = shares(256 << 20, 8 << 20, 1, false);
        assert_eq!(s.queue, 32 << 20);
        assert_eq!(s.in_flight, 32 << 20);
        assert_eq!(s.batches_per_writer, 64);
        let used =
            s.queue + s.in_flight + s.batches_per_writer * source::BATCH_BYTES + s.open_per_writer;
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
