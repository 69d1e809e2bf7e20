//! Consumer group offset sync of a flow (MirrorMaker 2's checkpoint connector): every interval,
//! the committed offsets of the source's groups are translated through the flow's offset syncs
//! into target offsets that never skip a record, written as checkpoints on the target, and
//! committed to the same group on the target while that group has no active member there.

use super::mm2::{Checkpoint, OffsetSync, SyncStore};
use super::setup::FlowSetup;
use crate::config::{GroupSync, KafkaConfig};
use crate::kafka::Reader;
use crate::kafka::{client_config, Admin};
use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Groups never synced: strata's own and those MirrorMaker 2 leaves out by default.
pub(super) fn excluded(group: &str) -> bool {
    group.starts_with("strata.")
        || group.starts_with("console-consumer-")
        || group.starts_with("connect-")
        || group.starts_with("__")
}

/// MirrorMaker 2's rule for a new checkpoint: none before, the group went back on the source,
/// or the translated offset moved forward (pure).
pub(super) fn is_newer(previous: Option<&Checkpoint>, upstream: i64, downstream: i64) -> bool {
    match previous {
        None => true,
        Some(p) => upstream < p.upstream || downstream > p.downstream,
    }
}

/// Key of the checkpoints already written: group, target topic, partition.
type CheckpointKey = (String, String, i32);

/// Reads a single-partition topic from where `c` is to its current end, handing each record
/// to `f`; `false` when it could not (the next round tries again).
fn read_to_end(c: &Reader, topic: &str, mut f: impl FnMut(&[u8], &[u8])) -> bool {
    let Ok((_, high)) = c.fetch_watermarks(topic, 0, Duration::from_secs(10)) else {
        return false;
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let pos =
            c.position()
                .ok()
                .and_then(|l| match l.find_partition(topic, 0).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => Some(o),
                    _ => None,
                });
        if pos.is_some_and(|p| p >= high) || high == 0 {
            return true;
        }
        if let Some(Ok(m)) = c.poll(Duration::from_millis(200)) {
            if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                f(k, v);
            }
            if m.offset() + 1 >= high {
                return true;
            }
        }
    }
    false
}

fn reader(k: &KafkaConfig, topic: &str) -> Option<Reader> {
    let mut cc = client_config(k);
    cc.set("enable.auto.commit", "false")
        .set("group.id", "strata.checkpoint-reader")
        .set("isolation.level", "read_committed");
    let c = crate::kafka::reader(&cc).ok()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning).ok()?;
    c.assign(&tpl).ok()?;
    Some(c)
}

struct Checkpointer<'a> {
    setup: &'a FlowSetup,
    sync: &'a GroupSync,
    syncs: SyncStore,
    syncs_reader: Reader,
    written: HashMap<CheckpointKey, Checkpoint>,
    producer: ThreadedProducer<crate::kafka::Watch>,
    source: Admin,
    target: Admin,
}

/// Runs until `stop`, then once more when `last` is set by then; failures are logged and
/// retried at the next interval (a checkpoint is an aid for consumers switching clusters,
/// never worth stopping the copy for).
pub(super) fn run(setup: &FlowSetup, sync: &GroupSync, stop: &AtomicBool, last: &AtomicBool) {
    let mut last_ok = Instant::now();
    let mut cp = None;
    let mut next_round = Instant::now() + sync.interval.min(Duration::from_secs(5));
    while !stop.load(Ordering::Relaxed) && !setup.fatal.is_set() {
        std::thread::sleep(Duration::from_millis(200));
        setup.stats.checkpoint_age(last_ok.elapsed().as_secs_f64());
        if Instant::now() < next_round {
            continue;
        }
        next_round = Instant::now() + sync.interval;
        if cp.is_none() {
            cp = Checkpointer::new(setup, sync);
        }
        let Some(c) = cp.as_mut() else {
            setup.stats.error("checkpoint");
            tracing::warn!(task = %setup.task.name, flow = %setup.flow(), "cannot start the group offset sync (clusters unreachable?); retrying");
            continue;
        };
        match c.round() {
            Ok(n) => {
                last_ok = Instant::now();
                tracing::debug!(task = %setup.task.name, flow = %setup.flow(), checkpoints = n, "group offsets synced");
            }
            Err(e) => {
                setup.stats.error("checkpoint");
                tracing::warn!(task = %setup.task.name, flow = %setup.flow(), error = %e, "group offset sync failed; retrying at the next interval");
            }
        }
    }
    if !last.load(Ordering::Relaxed) || setup.fatal.is_set() {
        return;
    }
    let done = cp
        .or_else(|| Checkpointer::new(setup, sync))
        .ok_or_else(|| "clusters unreachable".to_string())
        .and_then(|mut c| c.round());
    match done {
        Ok(n) => {
            tracing::info!(task = %setup.task.name, flow = %setup.flow(), checkpoints = n, "group offsets synced through the last offset syncs")
        }
        Err(e) => {
            setup.stats.error("checkpoint");
            tracing::warn!(task = %setup.task.name, flow = %setup.flow(), error = %e, "the last group offset sync failed; a later run (or MirrorMaker 2's tools on the offset syncs) can repeat it");
        }
    }
}

impl<'a> Checkpointer<'a> {
    fn new(setup: &'a FlowSetup, sync: &'a GroupSync) -> Option<Self> {
        let (syncs_topic, on_source) = setup.names.offset_syncs_topic(setup.both_ways);
        let syncs_cluster = if on_source {
            &setup.source
        } else {
            &setup.target
        };
        let syncs_reader = reader(syncs_cluster, &syncs_topic)?;
        // What was written before (by this task's earlier runs): MirrorMaker 2's rule only
        // writes a checkpoint that moves on from it.
        let mut written = HashMap::new();
        let topic = setup.names.checkpoints_topic();
        let cps = reader(&setup.target, &topic)?;
        if !read_to_end(&cps, &topic, |k, v| {
            if let Ok(c) = Checkpoint::parse(k, v) {
                written.insert((c.group.clone(), c.topic.clone(), c.partition), c);
            }
        }) {
            return None;
        }
        let producer = client_config(&setup.target)
            .set("acks", "all")
            .create_with_context(crate::kafka::Watch::default())
            .ok()?;
        Some(Self {
            setup,
            sync,
            syncs: SyncStore::default(),
            syncs_reader,
            written,
            producer,
            source: Admin::new(&setup.source).ok()?,
            target: Admin::new(&setup.target).ok()?,
        })
    }

    /// One sync of every group: returns how many checkpoints were written. The groups'
    /// positions are read first and pinned, so the syncs read next that they need are kept.
    fn round(&mut self) -> Result<usize, String> {
        let (syncs_topic, _) = self.setup.names.offset_syncs_topic(self.setup.both_ways);
        let (_, routes) = self.setup.routes();
        let groups: Vec<String> = self
            .source
            .groups()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(g, _, _)| g)
            .filter(|g| !excluded(g) && self.sync.groups.is_match(g))
            .collect();
        let target_groups: HashMap<String, (String, usize)> = self
            .target
            .groups()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(g, state, members)| (g, (state, members)))
            .collect();
        let mut positions = Vec::new();
        for group in groups {
            let mut tpl = TopicPartitionList::new();
            for r in routes.iter() {
                for p in 0..r.partitions {
                    tpl.add_partition(&r.source, p);
                }
            }
            if tpl.count() == 0 {
                continue;
            }
            positions.push((group.clone(), committed(&self.setup.source, &group, tpl)?));
        }
        let mut pins: HashMap<(String, i32), Vec<i64>> = HashMap::new();
        for (_, committed) in &positions {
            for e in committed.elements() {
                if let Offset::Offset(up) = e.offset() {
                    pins.entry((e.topic().to_string(), e.partition()))
                        .or_default()
                        .push(up);
                }
            }
        }
        self.syncs.pin(pins);
        let store = &mut self.syncs;
        if !read_to_end(&self.syncs_reader, &syncs_topic, |k, v| {
            if let Ok(s) = OffsetSync::parse(k, v) {
                store.add(&s);
            }
        }) {
            return Err(format!("cannot read the offset syncs topic {syncs_topic}"));
        }
        let mut written = 0;
        for (group, committed) in positions {
            let mut translated = Vec::new();
            for e in committed.elements() {
                let Offset::Offset(up) = e.offset() else {
                    continue;
                };
                let Some(route) = routes.iter().find(|r| r.source == e.topic()) else {
                    continue;
                };
                let Some(down) = self.syncs.translate(e.topic(), e.partition(), up) else {
                    continue;
                };
                if down < 0 {
                    continue;
                }
                let key = (group.clone(), route.target.clone(), e.partition());
                if is_newer(self.written.get(&key), up, down) {
                    let c = Checkpoint {
                        group: group.clone(),
                        topic: route.target.clone(),
                        partition: e.partition(),
                        upstream: up,
                        downstream: down,
                        metadata: e.metadata().to_string(),
                    };
                    let (k, v) = (c.key(), c.value());
                    let topic = self.setup.names.checkpoints_topic();
                    let rec = BaseRecord::<[u8], [u8]>::to(&topic)
                        .partition(0)
                        .key(&k)
                        .payload(&v);
                    self.producer.send(rec).map_err(|(e, _)| e.to_string())?;
                    self.written.insert(key, c);
                    written += 1;
                }
                translated.push((route.target.clone(), e.partition(), down));
            }
            // Only a group nobody consumes on the target may have its offsets moved.
            let idle = target_groups.get(&group).is_none_or(|(state, members)| {
                *members == 0 && state.eq_ignore_ascii_case("empty")
            });
            if idle && !translated.is_empty() {
                self.commit_target(&group, &translated)?;
            }
        }
        self.producer
            .flush(Duration::from_secs(30))
            .map_err(|e| format!("writing checkpoints: {e}"))?;
        Ok(written)
    }

    /// Commits translated offsets to the target group, only forward.
    fn commit_target(&self, group: &str, translated: &[(String, i32, i64)]) -> Result<(), String> {
        let mut tpl = TopicPartitionList::new();
        for (t, p, _) in translated {
            tpl.add_partition(t, *p);
        }
        let current = committed(&self.setup.target, group, tpl)?;
        let mut forward = TopicPartitionList::new();
        for (t, p, down) in translated {
            let now = current
                .find_partition(t, *p)
                .and_then(|e| match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                });
            if now.is_none_or(|o| *down > o) {
                let _ = forward.add_partition_offset(t, *p, Offset::Offset(*down));
            }
        }
        if forward.count() == 0 {
            return Ok(());
        }
        let c = group_client(&self.setup.target, group)?;
        c.commit(&forward, CommitMode::Sync).map_err(|e| {
            format!("committing translated offsets of group {group:?} on the target: {e} (a consumer of the group may have started there)")
        })
    }
}

fn group_client(k: &KafkaConfig, group: &str) -> Result<Reader, String> {
    let mut cc = client_config(k);
    cc.set("group.id", group).set("enable.auto.commit", "false");
    crate::kafka::reader(&cc).map_err(|e| e.to_string())
}

/// A group's committed offsets for the partitions of `tpl`, without joining the group.
fn committed(
    k: &KafkaConfig,
    group: &str,
    tpl: TopicPartitionList,
) -> Result<TopicPartitionList, String> {
    let c = group_client(k, group)?;
    crate::kafka::committed_offsets(&c, &tpl, Duration::from_secs(10))
        .map_err(|e| format!("reading the offsets of group {group:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strata_and_tool_groups_are_left_out() {
        for g in ["strata.t.a-b", "console-consumer-123", "connect-x", "__x"] {
            assert!(excluded(g), "{g}");
        }
        for g in ["orders-app", "strata", "my-connect-x"] {
            assert!(!excluded(g), "{g}");
        }
    }

    #[test]
    fn checkpoints_move_forward_or_follow_a_rewind() {
        let prev = Checkpoint {
            group: "g".into(),
            topic: "t".into(),
            partition: 0,
            upstream: 100,
            downstream: 90,
            metadata: String::new(),
        };
        assert!(is_newer(None, 0, 0));
        assert!(!is_newer(Some(&prev), 100, 90));
        assert!(!is_newer(Some(&prev), 120, 90));
        assert!(is_newer(Some(&prev), 120, 91));
        // The group was reset back on the source.
        assert!(is_newer(Some(&prev), 50, 40));
    }
}
