//! A dump task's cluster state snapshots (`crate::state`): at the start and the successful end
//! of a `--once` run and every `state_interval_secs` of a continuous one, the task's topics
//! (partitions, replicas, their own configs, watermarks) and the committed offsets of the groups
//! that read them, in batched calls: one metadata, one DescribeConfigs and two ListOffsets
//! requests, and one offset fetch per group, all in flight at once on one client (librdkafka
//! takes one group per call). Rights the principal lacks are named, not fatal, unless the task
//! requires the state.

use super::Tp;
use crate::config::{ClientKind, KafkaConfig, TaskTopics};
use crate::kafka::{servers, KafkaError};
use crate::state::{GroupState, Occasion, Snapshot, TopicState, VERSION};
use rdkafka::admin::{AdminClient, AdminOptions, ConfigSource, ResourceSpecifier};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// Timeout of each call.
const CALL: Duration = Duration::from_secs(30);

/// Which consumer groups a snapshot records.
#[derive(Debug, Clone)]
pub struct GroupFilter {
    /// `groups_regex` when set: groups whose whole name matches.
    pub regex: Option<regex::Regex>,
    /// strata's own groups (this file's dump tasks), left out unless the regex names them.
    pub own: Vec<String>,
}

impl GroupFilter {
    /// Whether a group's offsets belong in the snapshot (pure).
    pub fn wants(&self, group: &str) -> bool {
        match &self.regex {
            Some(r) => r.is_match(group),
            None => !self.own.iter().any(|o| o == group) && !strata_internal(group),
        }
    }
}

/// Groups strata itself uses besides a dump task's own: replication pipelines (`strata.<id>`)
/// and `--once` probes (`<task>.strata-once-probe`).
fn strata_internal(group: &str) -> bool {
    group.starts_with("strata.") || group.ends_with(".strata-once-probe")
}

/// The partitions of `topics` in metadata order, and each topic's replica count.
type Layout = BTreeMap<String, (i32, i32)>;

/// Takes a snapshot of the topics `selector` picks (blocking: Kafka calls).
pub fn capture(
    k: &KafkaConfig,
    task: &str,
    selector: &TaskTopics,
    groups: &GroupFilter,
    occasion: Occasion,
) -> Result<Snapshot, KafkaError> {
    let captured_at = chrono::Utc::now();
    let reader = crate::kafka::reader(
        crate::kafka::client_config(k, ClientKind::Consumer)
            .set("isolation.level", "read_committed"),
    )
    .map_err(|source| KafkaError::Client {
        servers: servers(k),
        source,
    })?;
    let unreachable = |e: rdkafka::error::KafkaError| KafkaError::Unreachable {
        servers: servers(k),
        detail: e.to_string(),
    };
    let tm = std::time::Instant::now();
    let md = reader.fetch_metadata(None, CALL).map_err(unreachable)?;
    tracing::debug!(
        metadata_ms = tm.elapsed().as_millis() as u64,
        "snapshot metadata"
    );
    let mut layout = Layout::new();
    for t in md.topics().iter().filter(|t| selector.matches(t.name())) {
        let replicas = t
            .partitions()
            .first()
            .map_or(0, |p| p.replicas().len() as i32);
        layout.insert(
            t.name().to_string(),
            (t.partitions().len() as i32, replicas),
        );
    }
    let mut missing = Vec::new();
    let t0 = std::time::Instant::now();
    let configs = topic_configs(k, &layout, &mut missing)?;
    let t1 = std::time::Instant::now();
    let watermarks = watermarks(&reader, &layout).map_err(unreachable)?;
    let t2 = std::time::Instant::now();
    let group_states = group_offsets(&reader, &layout, groups, &mut missing)?;
    tracing::debug!(
        configs_ms = (t1 - t0).as_millis() as u64,
        watermarks_ms = (t2 - t1).as_millis() as u64,
        groups_ms = t2.elapsed().as_millis() as u64,
        "snapshot timings"
    );
    let topics = layout
        .iter()
        .map(|(name, (partitions, replicas))| TopicState {
            name: name.clone(),
            id: None,
            partitions: *partitions,
            replication_factor: *replicas,
            configs: configs.get(name).cloned().unwrap_or_default(),
            watermarks: (0..*partitions)
                .map(|p| {
                    watermarks
                        .get(&Tp::new(name, p))
                        .copied()
                        .unwrap_or((-1, -1))
                })
                .collect(),
        })
        .collect();
    Ok(Snapshot {
        version: VERSION,
        task: task.to_string(),
        captured_at,
        occasion,
        topics,
        groups: group_states,
        missing,
    })
}

/// Each topic's own settings (not the broker's defaults or broker-wide ones), sensitive ones
/// left out: one DescribeConfigs request for all.
fn topic_configs(
    k: &KafkaConfig,
    layout: &Layout,
    missing: &mut Vec<String>,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, KafkaError> {
    let mut out = BTreeMap::new();
    if layout.is_empty() {
        return Ok(out);
    }
    let settings = crate::kafka::client_config(k, ClientKind::Admin);
    let client_err = |source| KafkaError::Client {
        servers: servers(k),
        source,
    };
    let admin: AdminClient<crate::kafka::Watch> = settings
        .create_with_context(crate::kafka::Watch::default())
        .map_err(client_err)?;
    crate::kafka::msk_iam::prime(admin.inner(), &settings)
        .map_err(|e| client_err(rdkafka::error::KafkaError::ClientCreation(e.to_string())))?;
    let specs: Vec<ResourceSpecifier<'_>> = layout
        .keys()
        .map(|t| ResourceSpecifier::Topic(t.as_str()))
        .collect();
    let opts = AdminOptions::new().request_timeout(Some(CALL));
    let described = futures::executor::block_on(admin.describe_configs(specs.iter(), &opts))
        .map_err(|e| KafkaError::Unreachable {
            servers: servers(k),
            detail: format!("describing topic configs: {e}"),
        })?;
    for (topic, r) in layout.keys().zip(described) {
        match r {
            // rust-rdkafka 0.39 drops DescribeConfigs' per-resource errors and answers an
            // empty list instead; a topic Kafka may describe always has entries (its defaults
            // included), so an empty one is a refusal (TOPIC_AUTHORIZATION_FAILED).
            Ok(resource) if resource.entries.is_empty() => missing.push(format!(
                "the configs of topic {topic:?} (Kafka sent none: not authorized): allow DescribeConfigs on the topic (kafka-acls --add --allow-principal User:NAME --operation DescribeConfigs --topic {topic})"
            )),
            Ok(resource) => {
                let own: BTreeMap<String, String> = resource
                    .entries
                    .into_iter()
                    .filter(|e| e.source == ConfigSource::DynamicTopic && !e.is_sensitive)
                    .filter_map(|e| e.value.map(|v| (e.name, v)))
                    .collect();
                out.insert(topic.clone(), own);
            }
            Err(code) => missing.push(format!(
                "the configs of topic {topic:?} ({code}): allow DescribeConfigs on the topic"
            )),
        }
    }
    Ok(out)
}

/// The earliest retained offset and the last stable offset (what a read_committed reader
/// reaches) of every partition: two batched ListOffsets requests.
fn watermarks(
    reader: &crate::kafka::Reader,
    layout: &Layout,
) -> Result<BTreeMap<Tp, (i64, i64)>, rdkafka::error::KafkaError> {
    let ask = |at: Offset| {
        let mut tpl = TopicPartitionList::new();
        for (t, (partitions, _)) in layout {
            for p in 0..*partitions {
                let _ = tpl.add_partition_offset(t, p, at);
            }
        }
        reader.offsets_for_times(tpl, CALL)
    };
    let mut out = BTreeMap::new();
    if layout.is_empty() {
        return Ok(out);
    }
    let (low, high) = (ask(Offset::Beginning)?, ask(Offset::End)?);
    for e in low.elements() {
        let tp = Tp::new(e.topic(), e.partition());
        let lo = match e.offset() {
            Offset::Offset(o) => o,
            _ => -1,
        };
        let hi = match high
            .find_partition(e.topic(), e.partition())
            .map(|h| h.offset())
        {
            Some(Offset::Offset(o)) => o,
            _ => -1,
        };
        out.insert(tp, (lo, hi));
    }
    Ok(out)
}

/// The committed offsets of the groups the filter wants, on the snapshot's partitions; groups
/// with none there are left out. The group list is one request; the offsets one request per
/// group, all in flight at once on one client.
fn group_offsets(
    reader: &crate::kafka::Reader,
    layout: &Layout,
    filter: &GroupFilter,
    missing: &mut Vec<String>,
) -> Result<Vec<GroupState>, KafkaError> {
    if layout.is_empty() {
        return Ok(Vec::new());
    }
    // Without Describe on the cluster, Kafka's group list leaves out, without a word, every
    // group the principal may not describe itself.
    match crate::kafka::group_offsets::may_describe_cluster(reader, CALL) {
        Ok(Some(false)) => missing.push(
            "the list of every consumer group (Kafka lists only the groups this principal may describe): allow Describe on the cluster (kafka-acls --add --allow-principal User:NAME --operation Describe --cluster), or Describe on each group to record".into(),
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!(error = %e, "the principal's rights on the cluster are unknown"),
    }
    let groups: Vec<String> = match reader.fetch_group_list(None, CALL) {
        Ok(list) => list
            .groups()
            .iter()
            .map(|g| g.name().to_string())
            .filter(|g| filter.wants(g))
            .collect(),
        Err(e) => {
            missing.push(format!(
                "the consumer groups ({e}): allow Describe on the groups (kafka-acls --add --operation Describe --group '*')"
            ));
            return Ok(Vec::new());
        }
    };
    let mut out = Vec::new();
    for (group, r) in crate::kafka::group_offsets::list(reader, &groups, CALL) {
        match r {
            Ok(list) => {
                let mut offsets: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
                for ((topic, partition), offset) in list {
                    if layout.contains_key(&topic) {
                        offsets.entry(topic).or_default().insert(partition, offset);
                    }
                }
                if !offsets.is_empty() {
                    out.push(GroupState { group, offsets });
                }
            }
            Err(e) => missing.push(format!(
                "the offsets of group {group:?} ({e}): allow Describe on the group"
            )),
        }
    }
    Ok(out)
}

/// How a task takes its snapshots.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub groups: GroupFilter,
    /// `Required`: a snapshot that cannot be taken whole (a right missing, Kafka unreachable)
    /// fails the task instead of a warning; `Off`: none is taken.
    pub mode: crate::config::StateMode,
    /// Between snapshots of a continuous dump.
    pub interval: std::time::Duration,
}

/// A task's snapshots: one now (start, end of a run), and in the background when the interval
/// is due.
pub(crate) struct Snapshots {
    kafka: KafkaConfig,
    task: std::sync::Arc<crate::config::DumpTask>,
    store: std::sync::Arc<dyn crate::store::ObjectStore>,
    rt: tokio::runtime::Handle,
    policy: Policy,
    next: std::time::Instant,
    running: Option<tokio::task::JoinHandle<()>>,
    /// Shortcomings already warned about (each is said once per run).
    warned: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
}

impl Snapshots {
    pub fn new(
        kafka: KafkaConfig,
        task: std::sync::Arc<crate::config::DumpTask>,
        store: std::sync::Arc<dyn crate::store::ObjectStore>,
        rt: tokio::runtime::Handle,
        policy: Policy,
    ) -> Self {
        let next = std::time::Instant::now() + policy.interval;
        Self {
            kafka,
            task,
            store,
            rt,
            policy,
            next,
            running: None,
            warned: Default::default(),
        }
    }

    /// Takes a snapshot and waits for it to be stored (the start or the end of a run, on the
    /// task's own thread outside its stages). `Err` only when the state is required.
    pub fn take_now(&self, occasion: Occasion) -> Result<(), super::DumpError> {
        if self.policy.mode == crate::config::StateMode::Off {
            return Ok(());
        }
        let job = self.job(occasion);
        self.rt.block_on(job)
    }

    /// A continuous dump's snapshot, started in the background when it is due (never two at
    /// once). A required one that fails is returned by the next call.
    pub fn tick(&mut self) {
        if std::time::Instant::now() < self.next
            || self.running.as_ref().is_some_and(|h| !h.is_finished())
        {
            return;
        }
        self.next = std::time::Instant::now() + self.policy.interval;
        let job = self.job(Occasion::Interval);
        self.running = Some(self.rt.spawn(async move {
            // A required snapshot's failure was logged; the task goes on archiving records.
            let _ = job.await;
        }));
    }

    fn job(
        &self,
        occasion: Occasion,
    ) -> impl std::future::Future<Output = Result<(), super::DumpError>> + 'static {
        let (kafka, task, store, policy, warned) = (
            self.kafka.clone(),
            self.task.clone(),
            self.store.clone(),
            self.policy.clone(),
            self.warned.clone(),
        );
        async move {
            let name = task.name.to_string();
            let (k, t, p) = (kafka.clone(), task.clone(), policy.clone());
            let taken = tokio::task::spawn_blocking(move || {
                capture(&k, t.name.as_str(), &t.topics, &p.groups, occasion)
            })
            .await
            .map_err(|e| super::DumpError::Worker {
                task: name.clone(),
                detail: format!("taking a state snapshot: {e}"),
            })?;
            let failed = |detail: String| {
                if policy.mode == crate::config::StateMode::Required {
                    tracing::error!(task = %name, %detail, "the cluster state snapshot (state = \"required\") failed");
                    Err(super::DumpError::State {
                        task: name.clone(),
                        detail: detail.clone(),
                    })
                } else {
                    tracing::warn!(task = %name, %detail, "no cluster state snapshot this time (the records are archived all the same); set state = \"required\" to make this an error");
                    Ok(())
                }
            };
            let snapshot = match taken {
                Ok(s) => s,
                Err(e) => return failed(e.to_string()),
            };
            for m in &snapshot.missing {
                let first = warned
                    .lock()
                    .map(|mut w| w.insert(m.clone()))
                    .unwrap_or(true);
                if first {
                    tracing::warn!(task = %name, missing = %m, "the cluster state snapshot lacks something this principal may not read");
                }
            }
            if policy.mode == crate::config::StateMode::Required && !snapshot.missing.is_empty() {
                return failed(format!("it could not read {}", snapshot.missing.join("; ")));
            }
            if snapshot.topics.is_empty() && snapshot.groups.is_empty() {
                // None of the task's topics exists (yet): nothing a recovery could use.
                tracing::debug!(task = %name, "no topic or group to record: no cluster state snapshot");
                return Ok(());
            }
            match crate::state::store(store.as_ref(), &task.directory, &snapshot).await {
                Ok(key) => {
                    tracing::info!(task = %name, snapshot = %store.location(&key), topics = snapshot.topics.len(), groups = snapshot.groups.len(), "cluster state snapshot written");
                    Ok(())
                }
                Err(e) => failed(format!("storing it: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_every_one_but_strata_s_own_unless_a_regex_says() {
        let f = GroupFilter {
            regex: None,
            own: vec!["nightly".into()],
        };
        assert!(f.wants("billing"));
        assert!(!f.wants("nightly"));
        assert!(!f.wants("strata.a-b-pull"));
        assert!(!f.wants("nightly.strata-once-probe"));
        let f = GroupFilter {
            regex: Some(regex::Regex::new("^(?:app-.*|nightly)$").unwrap()),
            own: vec!["nightly".into()],
        };
        assert!(f.wants("app-1"));
        assert!(f.wants("nightly"), "a regex may name strata's own");
        assert!(!f.wants("billing"));
    }
}
