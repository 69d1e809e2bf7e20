//! A flow's controller: starts its pipelines (and checkpointer), keeps the topic list and the
//! target topics up to date (new topics, grown partitions), decides when a `--once` run is
//! done (the target's positions cover every noted watermark), and stops everything in order.

use super::setup::{discover, FlowSetup};
use super::{
    checkpoint, off_thread, pipeline, positions, topics, ReplicateError, ReplicateOptions,
};
use crate::kafka::Admin;
use crate::telemetry::readiness::Part;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the controller looks at its flags and `--once` coverage.
const TICK: Duration = Duration::from_secs(1);

/// The partitions a `--once` run has not covered yet (pure): noted watermark above the
/// position the target stores.
pub(super) fn uncovered(
    targets: &BTreeMap<(String, i32), i64>,
    stored: &positions::Positions,
) -> Vec<(String, i32, i64, Option<i64>)> {
    targets
        .iter()
        .filter_map(|((t, p), &to)| {
            let at = stored.next(t, *p);
            // An empty partition (nothing below its watermark) needs no position.
            let covered = at.is_some_and(|n| n >= to) || (at.is_none() && to == 0);
            (!covered).then(|| (t.clone(), *p, to, at))
        })
        .collect()
}

/// Runs a flow: its pipelines, its checkpointer, and the watch; `part` is told when all run.
pub(super) async fn run(
    setup: Arc<FlowSetup>,
    opts: ReplicateOptions,
    stop: Arc<AtomicBool>,
    part: &Part,
) -> Result<(), ReplicateError> {
    let flow_stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for i in 0..setup.task.pipelines {
        let (s, st) = (setup.clone(), flow_stop.clone());
        let t = std::thread::Builder::new()
            .name(format!("repl-pipe-{i}"))
            .spawn(move || {
                if let Err(e) = pipeline::pipeline(s.clone(), i, st) {
                    s.fatal.set(e);
                }
            })
            .map_err(|e| ReplicateError::Setup(format!("cannot start a pipeline thread: {e}")))?;
        threads.push(t);
    }
    // The checkpointer stops after the pipelines: a `--once` run that covered everything
    // syncs the groups once more, through the last offset syncs (a migration's final step).
    let (cp_stop, last_round) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let mut checkpointer = None;
    if let Some(sync) = setup.task.group_sync.clone() {
        let (s, st, last) = (setup.clone(), cp_stop.clone(), last_round.clone());
        let t = std::thread::Builder::new()
            .name("repl-checkpoint".into())
            .spawn(move || checkpoint::run(&s, &sync, &st, &last))
            .map_err(|e| ReplicateError::Setup(format!("cannot start the checkpointer: {e}")))?;
        checkpointer = Some(t);
    }
    let once = setup.once.is_some();
    let result = watch(&setup, opts, &stop, part).await;
    flow_stop.store(true, Ordering::Relaxed);
    let (s, covered) = (setup.clone(), result.is_ok());
    let joined = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
        s.flush_syncs();
        if once && covered && !s.fatal.is_set() && !stop.load(Ordering::Relaxed) {
            last_round.store(true, Ordering::Relaxed);
        }
        cp_stop.store(true, Ordering::Relaxed);
        if let Some(t) = checkpointer {
            let _ = t.join();
        }
    })
    .await;
    if let Err(e) = joined {
        return Err(ReplicateError::Setup(format!(
            "stopping the flow's threads failed: {e}"
        )));
    }
    if let Some(e) = setup.fatal.take() {
        return Err(e);
    }
    result
}

/// Runs until a stop, a fatal error, or (`--once`) full coverage.
async fn watch(
    setup: &Arc<FlowSetup>,
    opts: ReplicateOptions,
    stop: &AtomicBool,
    part: &Part,
) -> Result<(), ReplicateError> {
    let source = Arc::new(Admin::new(&setup.source)?);
    let target = Arc::new(Admin::new(&setup.target)?);
    // Both clusters were reached in the flow's setup, and its threads run.
    part.running();
    let started = Instant::now();
    let mut next_refresh = Instant::now() + setup.task.topic_refresh;
    let mut last_records = 0u64;
    let mut last_progress = Instant::now();
    loop {
        tokio::time::sleep(TICK).await;
        if stop.load(Ordering::Relaxed) || setup.fatal.is_set() {
            return Ok(());
        }
        if let Some(targets) = &setup.once {
            let s = setup.clone();
            let read = tokio::task::spawn_blocking(move || {
                let reader = s.positions_reader()?;
                positions::read(&reader, &s.names.positions_topic()).map_err(ReplicateError::from)
            })
            .await
            .map_err(|e| ReplicateError::Setup(format!("reading positions failed: {e}")))?;
            match read {
                Ok(stored) => {
                    let left = uncovered(targets, &stored);
                    if left.is_empty() {
                        tracing::info!(task = %setup.task.name, flow = %setup.flow(), partitions = targets.len(), "--once: every partition is copied up to the watermark noted at start");
                        return Ok(());
                    }
                    if started.elapsed() >= opts.once_deadline {
                        let partitions = left
                            .iter()
                            .take(20)
                            .map(|(t, p, to, at)| match at {
                                Some(n) => format!("{t}[{p}] at {n} of {to}"),
                                None => format!("{t}[{p}] not started (up to {to})"),
                            })
                            .collect::<Vec<_>>()
                            .join(", ");
                        return Err(ReplicateError::OnceIncomplete {
                            task: setup.task.name.to_string(),
                            deadline_secs: opts.once_deadline.as_secs(),
                            partitions,
                        });
                    }
                }
                Err(e) => {
                    tracing::warn!(task = %setup.task.name, flow = %setup.flow(), error = %e, "cannot read the positions to check --once coverage; retrying");
                }
            }
        } else if Instant::now() >= next_refresh {
            next_refresh = Instant::now() + setup.task.topic_refresh;
            if let Err(e) = refresh(setup, &source, &target).await {
                setup.stats.error("topics");
                tracing::warn!(task = %setup.task.name, flow = %setup.flow(), error = %e, "cannot refresh the topics to copy; keeping the current ones");
            }
        }
        let records = setup.stats.records.load(Ordering::Relaxed);
        if records != last_records {
            last_records = records;
            last_progress = Instant::now();
        } else if last_progress.elapsed() >= Duration::from_secs(300) {
            last_progress = Instant::now();
            tracing::info!(task = %setup.task.name, flow = %setup.flow(), "no record copied in the last 5 minutes (the source is quiet, or see the warnings above)");
        }
    }
}

/// New topics matching the task, and partitions added to known ones, reach the target.
async fn refresh(
    setup: &Arc<FlowSetup>,
    source: &Arc<Admin>,
    target: &Arc<Admin>,
) -> Result<(), ReplicateError> {
    let (s, a) = (setup.clone(), source.clone());
    let routes = off_thread(move || discover(&s.task, &s.names, &a)).await?;
    let (_, now) = setup.routes();
    for r in &routes {
        let known = now.iter().find(|k| k.source == r.source);
        if known.is_some_and(|k| k.partitions == r.partitions) {
            continue;
        }
        topics::ensure_target(
            source,
            target,
            &r.source,
            &r.target,
            r.partitions,
            setup.task.replication_factor,
        )
        .await?;
        tracing::info!(task = %setup.task.name, flow = %setup.flow(), topic = %r.source, target = %r.target, partitions = r.partitions, "replicating a new topic (or its new partitions)");
    }
    setup.set_routes(routes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_is_done_when_every_watermark_is_covered() {
        let targets = BTreeMap::from([
            (("a".to_string(), 0), 10),
            (("a".to_string(), 1), 0),
            (("b".to_string(), 0), 5),
        ]);
        let mut stored = positions::Positions::default();
        let left = uncovered(&targets, &stored);
        assert_eq!(
            left,
            [
                ("a".to_string(), 0, 10, None),
                ("b".to_string(), 0, 5, None)
            ]
        );
        stored.by_partition.insert(("a".into(), 0), 10);
        stored.by_partition.insert(("b".into(), 0), 4);
        assert_eq!(
            uncovered(&targets, &stored),
            [("b".to_string(), 0, 5, Some(4))]
        );
        stored.by_partition.insert(("b".into(), 0), 7);
        assert!(uncovered(&targets, &stored).is_empty());
    }
}
