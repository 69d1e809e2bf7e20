//! What one flow (one direction of a task) shares between its controller, pipelines, workers
//! and checkpointer: the two clusters, the names, the topics to copy, the `--once` targets, the
//! offset syncs producer, the counters and the first fatal error. [`FlowSetup::prepare`] checks
//! both clusters, the stored parameters, the bookkeeping topics and that the stored positions
//! still describe the target before anything is copied.

use super::bookkeeping::{self, Refused, Reset};
use super::mm2::OffsetSync;
use super::naming::{is_cycle, never_replicated, target_topic, FlowNames};
use super::positions::{self, position_key, Positions, PARAMS_KEY};
use super::{off_thread, topics, ReplicateError, ReplicateOptions, Summary};
use crate::config::{KafkaConfig, ReplicateTask, StartOffset, TargetNaming, TopicSelector};
use crate::fatal::Fatal;
use crate::kafka::Reader;
use crate::kafka::Tp;
use crate::kafka::{client_config, servers, Admin, KafkaError};
use rdkafka::client::ClientContext;
use rdkafka::consumer::Consumer;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A source topic and what it is called on the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Route {
    pub source: String,
    pub target: String,
    pub partitions: i32,
}

pub(super) struct FlowSetup {
    pub task: Arc<ReplicateTask>,
    pub names: FlowNames,
    pub both_ways: bool,
    /// The target topics also hold records the flow did not copy (both ways, names kept or
    /// mapped): records without a position there are no sign of lost bookkeeping.
    pub shared_targets: bool,
    pub source: KafkaConfig,
    pub target: KafkaConfig,
    pub fatal: Fatal<ReplicateError>,
    pub stats: Stats,
    /// The topics to copy, with a version that changes with them (pipelines resubscribe).
    routes: Mutex<(u64, Arc<Vec<Route>>)>,
    /// Partitions that existed at this run's start: `start_offset = "latest"` applies to
    /// them; partitions and topics that appear later start at their beginning (nothing of
    /// them is skipped).
    initial: HashMap<String, i32>,
    /// `--once`: the source high watermark of every partition, noted at start.
    pub once: Option<BTreeMap<(String, i32), i64>>,
    syncs: OffsetSyncs,
}

impl FlowSetup {
    /// Checks both clusters, creates the bookkeeping and target topics, compares the stored
    /// parameters, notes `--once` targets.
    pub async fn prepare(
        task: Arc<ReplicateTask>,
        local: &KafkaConfig,
        push: bool,
        both_ways: bool,
        opts: ReplicateOptions,
    ) -> Result<Self, ReplicateError> {
        let (source_alias, target_alias, source, target) = if push {
            (
                task.local_alias.clone(),
                task.peer_alias.clone(),
                local.clone(),
                task.peer.clone(),
            )
        } else {
            (
                task.peer_alias.clone(),
                task.local_alias.clone(),
                task.peer.clone(),
                local.clone(),
            )
        };
        let names = FlowNames {
            task: task.name.to_string(),
            source: source_alias.clone(),
            target: target_alias.clone(),
            local_is_source: push,
        };
        // Connecting and metadata may wait for a slow cluster: off the async threads.
        let (source_admin, target_admin) = {
            let (t, sa, ta) = (
                task.clone(),
                source_alias.to_string(),
                target_alias.to_string(),
            );
            let (s, tg) = (source.clone(), target.clone());
            off_thread(move || {
                Ok::<_, ReplicateError>((
                    Arc::new(connect(&t, &sa, &s)?),
                    Arc::new(connect(&t, &ta, &tg)?),
                ))
            })
            .await?
        };
        let positions_topic = names.positions_topic();
        let rf = task.replication_factor;
        topics::ensure_internal(&target_admin, &positions_topic, rf, &servers(&target)).await?;
        let (syncs_topic, syncs_on_source) = names.offset_syncs_topic(both_ways);
        let syncs_cluster = if syncs_on_source { &source } else { &target };
        let syncs_admin = if syncs_on_source {
            &source_admin
        } else {
            &target_admin
        };
        topics::ensure_internal(syncs_admin, &syncs_topic, rf, &servers(syncs_cluster)).await?;
        if task.group_sync.is_some() {
            topics::ensure_internal(
                &target_admin,
                &names.checkpoints_topic(),
                rf,
                &servers(&target),
            )
            .await?;
        }
        let shared_targets = both_ways && task.naming != TargetNaming::Rename;
        let routes = {
            let (t, n, tg, pt, a, ta) = (
                task.clone(),
                names.clone(),
                target.clone(),
                positions_topic.clone(),
                source_admin.clone(),
                target_admin.clone(),
            );
            let reset = opts.reset;
            off_thread(move || {
                let stored = check_params(&t, &n, &tg, &pt)?;
                let routes = discover(&t, &n, &a)?;
                // Before target topics are created: a deleted one reads as empty.
                check_bookkeeping(
                    &t,
                    &n,
                    &tg,
                    (&a, &ta),
                    &routes,
                    &stored,
                    shared_targets,
                    reset,
                )?;
                Ok::<_, ReplicateError>(routes)
            })
            .await?
        };
        if routes.is_empty() && opts.once {
            return Err(ReplicateError::NoTopics {
                task: task.name.to_string(),
                alias: source_alias.to_string(),
                topics: task.topics.to_string(),
            });
        }
        for r in &routes {
            topics::ensure_target(
                &source_admin,
                &target_admin,
                &r.source,
                &r.target,
                r.partitions,
                task.replication_factor,
            )
            .await?;
        }
        let once = if opts.once {
            let (a, rs) = (source_admin.clone(), routes.clone());
            Some(
                off_thread(move || {
                    let mut t = BTreeMap::new();
                    for r in &rs {
                        for p in 0..r.partitions {
                            let (_, high) = a.watermarks(&r.source, p)?;
                            t.insert((r.source.clone(), p), high);
                        }
                    }
                    Ok::<_, ReplicateError>(t)
                })
                .await?,
            )
        } else {
            None
        };
        let initial = routes
            .iter()
            .map(|r| (r.source.clone(), r.partitions))
            .collect();
        let flow = format!("{source_alias}->{target_alias}");
        let syncs = OffsetSyncs::new(syncs_cluster, syncs_topic, &task.name.to_string(), &flow)?;
        tracing::info!(task = %task.name, flow = %flow, topics = routes.len(), positions = %positions_topic, offset_syncs = %syncs.topic, "replication flow ready");
        Ok(Self {
            stats: Stats::new(task.name.as_str(), &flow),
            task,
            names,
            both_ways,
            shared_targets,
            source,
            target,
            fatal: Fatal::default(),
            routes: Mutex::new((0, Arc::new(routes))),
            initial,
            once,
            syncs,
        })
    }

    /// `<source>-><target>`, for logs and metrics.
    pub fn flow(&self) -> String {
        format!("{}->{}", self.names.source, self.names.target)
    }

    pub fn routes(&self) -> (u64, Arc<Vec<Route>>) {
        let g = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        (g.0, g.1.clone())
    }

    /// Replaces the topics to copy (when they changed).
    pub fn set_routes(&self, routes: Vec<Route>) {
        let mut g = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        if *g.1 != routes {
            g.0 += 1;
            g.1 = Arc::new(routes);
        }
    }

    /// A consumer of the target that reads only committed records (for the positions topic).
    pub fn positions_reader(&self) -> Result<Reader, ReplicateError> {
        let mut c = client_config(&self.target);
        c.set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("group.id", format!("{}.reader", self.names.group()));
        crate::kafka::reader(&c).map_err(|source| {
            ReplicateError::Kafka(KafkaError::Client {
                servers: servers(&self.target),
                source,
            })
        })
    }

    /// Where a partition with no stored position starts.
    pub fn start_offset(&self, tp: &Tp) -> Result<i64, ReplicateError> {
        let c = crate::kafka::reader(&client_config(&self.source)).map_err(|source| {
            ReplicateError::Kafka(KafkaError::Client {
                servers: servers(&self.source),
                source,
            })
        })?;
        let (low, high) = c
            .fetch_watermarks(&tp.topic, tp.partition, Duration::from_secs(30))
            .map_err(|e| {
                ReplicateError::Kafka(KafkaError::Unreachable {
                    servers: servers(&self.source),
                    detail: e.to_string(),
                })
            })?;
        let existed = self
            .initial
            .get(&*tp.topic)
            .is_some_and(|&n| tp.partition < n);
        Ok(match self.task.start_offset {
            StartOffset::Latest if existed => high,
            _ => low,
        })
    }

    /// Records where a source record landed on the target (after its transaction committed).
    pub fn offset_sync(&self, topic: &str, partition: i32, upstream: i64, downstream: i64) {
        self.syncs.send(&OffsetSync {
            topic: topic.to_string(),
            partition,
            upstream,
            downstream,
        });
    }

    pub fn summary(&self) -> Summary {
        Summary {
            task: self.task.name.to_string(),
            flow: self.flow(),
            records: self.stats.records.load(Ordering::Relaxed),
            bytes: self.stats.bytes.load(Ordering::Relaxed),
            transactions: self.stats.transactions.load(Ordering::Relaxed),
        }
    }

    pub fn flush_syncs(&self) {
        let _ = self.syncs.producer.flush(Duration::from_secs(10));
    }
}

/// Connects to one cluster of a task: reachable, and the credentials accepted.
pub(super) fn connect(
    task: &ReplicateTask,
    alias: &str,
    k: &KafkaConfig,
) -> Result<Admin, ReplicateError> {
    Admin::connect(k).map_err(|e| classify(task.name.as_str(), alias, k, e))
}

/// A cluster's failure in the terms of a task: a refused login names the alias and the user,
/// an unreachable cluster the alias; TLS and ACL refusals keep their own messages.
pub(super) fn classify(task: &str, alias: &str, k: &KafkaConfig, e: KafkaError) -> ReplicateError {
    match e {
        KafkaError::LoginRefused { detail, .. } => ReplicateError::Authentication {
            task: task.to_string(),
            alias: alias.to_string(),
            servers: servers(k),
            who: k
                .sasl
                .as_ref()
                .map_or_else(|| "a client without SASL settings".to_string(), |s| s.who()),
            mechanism: k.sasl.as_ref().map(crate::config::Sasl::mechanism),
            detail,
        },
        KafkaError::Unreachable { detail, .. } => ReplicateError::Unreachable {
            task: task.to_string(),
            alias: alias.to_string(),
            servers: servers(k),
            detail,
        },
        other => ReplicateError::Kafka(other),
    }
}

/// The source topics a task copies now, each with its target name (pure over the topic list).
pub(super) fn select(
    selector: &TopicSelector,
    naming: &TargetNaming,
    names: &FlowNames,
    listed: &[(String, i32)],
) -> Vec<Route> {
    let mut out: Vec<Route> = listed
        .iter()
        .filter(|(t, _)| selector.matches(t) && !never_replicated(t))
        // A topic that came from the target (its name says so) does not go back.
        .filter(|(t, _)| !(*naming == TargetNaming::Rename && is_cycle(t, &names.target)))
        .map(|(t, n)| Route {
            source: t.clone(),
            target: target_topic(naming, &names.source, t),
            partitions: *n,
        })
        .collect();
    out.sort_by(|a, b| a.source.cmp(&b.source));
    out
}

/// Lists the source topics the task copies now.
pub(super) fn discover(
    task: &ReplicateTask,
    names: &FlowNames,
    source: &Admin,
) -> Result<Vec<Route>, ReplicateError> {
    let mut listed = Vec::new();
    for t in source.list_topics()? {
        if !task.topics.matches(&t) || never_replicated(&t) {
            continue;
        }
        if let Some(n) = source.partition_count(&t)? {
            listed.push((t, n));
        }
    }
    Ok(select(&task.topics, &task.naming, names, &listed))
}

/// The parameters a task keeps for its life, as stored in its positions topic.
pub(super) fn params_json(task: &ReplicateTask, names: &FlowNames) -> String {
    let naming = match &task.naming {
        TargetNaming::Identity => serde_json::json!("identity"),
        TargetNaming::Rename => serde_json::json!("rename"),
        TargetNaming::Map(m) => serde_json::json!({ "map": m }),
    };
    serde_json::json!({
        "source_alias": names.source.as_str(),
        "target_alias": names.target.as_str(),
        "direction": task.direction.as_str(),
        "topics": task.topics.to_string(),
        "target_naming": naming,
        "source_header": task.source_header,
        "exactly_once": task.exactly_once,
        "start_offset": task.start_offset.as_str(),
        "compression": task.compression.as_str(),
        "replication_factor": task.replication_factor,
    })
    .to_string()
}

/// The parameter names whose values differ between two stored parameter sets (pure).
pub(super) fn params_diff(stored: &str, now: &str) -> Vec<String> {
    let (Ok(a), Ok(b)) = (
        serde_json::from_str::<serde_json::Value>(stored),
        serde_json::from_str::<serde_json::Value>(now),
    ) else {
        return vec!["(the stored parameters are unreadable)".into()];
    };
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return vec!["(the stored parameters are unreadable)".into()];
    };
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            format!(
                "{k} (stored {}, now {})",
                a.get(k).map_or("unset".into(), |v| v.to_string()),
                b.get(k).map_or("unset".into(), |v| v.to_string())
            )
        })
        .collect()
}

/// A read_committed reader of the flow's target (positions, and whether a partition holds
/// records).
fn target_reader(target: &KafkaConfig, names: &FlowNames) -> Result<Reader, KafkaError> {
    let mut rc = client_config(target);
    rc.set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("group.id", format!("{}.reader", names.group()));
    crate::kafka::reader(&rc).map_err(|source| KafkaError::Client {
        servers: servers(target),
        source,
    })
}

/// Refuses a start whose parameters differ from the stored ones; stores them at first start.
/// Returns what the positions topic holds.
fn check_params(
    task: &ReplicateTask,
    names: &FlowNames,
    target: &KafkaConfig,
    topic: &str,
) -> Result<Positions, ReplicateError> {
    let reader = target_reader(target, names)?;
    let stored = positions::read(&reader, topic)?;
    let now = params_json(task, names);
    match &stored.params {
        Some(s) => {
            let diff = params_diff(s, &now);
            if !diff.is_empty() {
                return Err(ReplicateError::ParamsChanged {
                    task: task.name.to_string(),
                    flow: format!("{}->{}", names.source, names.target),
                    fields: diff.join(", "),
                });
            }
        }
        None => positions::store(target, topic, &[(PARAMS_KEY.to_string(), now.into_bytes())])
            .map_err(|e| match e {
                KafkaError::Unreachable { servers, detail } => KafkaError::Unreachable {
                    servers,
                    detail: format!("storing the task parameters: {detail}"),
                },
                e => e,
            })?,
    }
    Ok(stored)
}

/// How long the start reads a target partition to tell whether it holds records.
const SETUP_READ: Duration = Duration::from_secs(5);

/// Judges every partition of the routes against the stored positions (see `bookkeeping`):
/// refuses the start, or with `--reset` records fresh positions for the refused partitions.
/// `admins`: the source's and the target's.
#[allow(clippy::too_many_arguments)]
fn check_bookkeeping(
    task: &ReplicateTask,
    names: &FlowNames,
    target: &KafkaConfig,
    admins: (&Admin, &Admin),
    routes: &[Route],
    stored: &Positions,
    shared_targets: bool,
    reset: Option<Reset>,
) -> Result<(), ReplicateError> {
    let (source_admin, target_admin) = admins;
    let reader = target_reader(target, names)?;
    let mut refused = Vec::new();
    for r in routes {
        let count = target_admin.partition_count(&r.target)?.unwrap_or(0);
        for p in 0..r.partitions {
            let (low, high) = if p < count {
                target_admin.watermarks(&r.target, p)?
            } else {
                (0, 0)
            };
            // Undecided (an open transaction of a killed worker): the partition's worker judges
            // again once it has fenced that transaction.
            let finding =
                bookkeeping::judge(stored.get(&r.source, p), low, high, shared_targets, || {
                    bookkeeping::holds_committed(&reader, &r.target, p, high, SETUP_READ)
                        .map(|held| held.unwrap_or(false))
                })?;
            if let Some(finding) = finding {
                refused.push(Refused {
                    source: r.source.clone(),
                    partition: p,
                    target: r.target.clone(),
                    low,
                    high,
                    finding,
                });
            }
        }
    }
    let flow = format!("{}->{}", names.source, names.target);
    let refuse = |detail: String| ReplicateError::Bookkeeping {
        task: task.name.to_string(),
        flow: flow.clone(),
        detail,
    };
    if refused.is_empty() {
        if let Some(mode) = reset {
            tracing::info!(task = %task.name, flow = %flow, reset = mode.as_str(), "--reset: the stored positions describe the target; nothing to reset");
        }
        return Ok(());
    }
    let Some(mode) = reset else {
        return Err(refuse(bookkeeping::refusal(
            &names.positions_topic(),
            &refused,
        )));
    };
    // Every refused partition must take the reset before any position is written.
    let mut fresh = Vec::new();
    for r in &refused {
        let source = source_admin.watermarks(&r.source, r.partition)?;
        let empty = r.high <= r.low
            || !bookkeeping::holds_committed(&reader, &r.target, r.partition, r.high, SETUP_READ)?
                .ok_or_else(|| bookkeeping::undecided(&r.target, r.partition, SETUP_READ))?;
        fresh.push(bookkeeping::reset_position(r, mode, source, empty).map_err(refuse)?);
    }
    let records: Vec<(String, Vec<u8>)> = refused
        .iter()
        .zip(&fresh)
        .map(|(r, p)| (position_key(&r.source, r.partition), p.to_json()))
        .collect();
    positions::store(target, &names.positions_topic(), &records)?;
    for (r, p) in refused.iter().zip(&fresh) {
        tracing::warn!(task = %task.name, flow = %flow, reset = mode.as_str(), topic = %r.source, partition = r.partition, target = %r.target, next = p.next, finding = ?r.finding, "--reset: recorded a fresh position for this partition");
    }
    Ok(())
}

/// Delivery reports of the offset syncs producer: failures are counted and logged, never
/// fatal (a missing sync only makes translation coarser).
struct SyncReports {
    task: String,
    flow: String,
}

impl ClientContext for SyncReports {
    crate::kafka::msk_iam::oauth_token_hook!();
}

impl ProducerContext for SyncReports {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = r {
            metrics::counter!("strata_replicate_errors_total", "task" => self.task.clone(), "flow" => self.flow.clone(), "kind" => "offset_sync").increment(1);
            tracing::warn!(task = %self.task, flow = %self.flow, error = %e, "an offset sync was not stored; translation stays at the previous one");
        }
    }
}

/// MirrorMaker 2's offset syncs topic of a flow and its producer.
struct OffsetSyncs {
    topic: String,
    producer: ThreadedProducer<SyncReports>,
}

impl OffsetSyncs {
    fn new(k: &KafkaConfig, topic: String, task: &str, flow: &str) -> Result<Self, ReplicateError> {
        // Idempotent: a retried batch must not land after later syncs (a sync below the newest
        // reads as a rewind of the source and voids the history before it).
        let producer = client_config(k)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "20")
            .create_with_context(SyncReports {
                task: task.to_string(),
                flow: flow.to_string(),
            })
            .map_err(|source| KafkaError::Client {
                servers: servers(k),
                source,
            })?;
        Ok(Self { topic, producer })
    }

    fn send(&self, s: &OffsetSync) {
        let (key, value) = (s.key(), s.value());
        let r = BaseRecord::<[u8], [u8], ()>::with_opaque_to(&self.topic, ())
            .partition(0)
            .key(&key)
            .payload(&value);
        if let Err((e, _)) = self.producer.send(r) {
            tracing::warn!(topic = %self.topic, error = %e, "an offset sync could not be queued");
        }
    }
}

/// Counters of a flow: totals for the summary, per-topic metrics for Prometheus.
pub(super) struct Stats {
    task: String,
    flow: String,
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub transactions: AtomicU64,
}

impl Stats {
    fn new(task: &str, flow: &str) -> Self {
        Self {
            task: task.to_string(),
            flow: flow.to_string(),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
        }
    }

    /// A committed transaction of `records` records.
    pub fn add(&self, topic: &str, records: u64, bytes: u64) {
        self.records.fetch_add(records, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.transactions.fetch_add(1, Ordering::Relaxed);
        let labels = [
            ("task", self.task.clone()),
            ("flow", self.flow.clone()),
            ("topic", topic.to_string()),
        ];
        metrics::counter!("strata_replicate_records_total", &labels).increment(records);
        metrics::counter!("strata_replicate_bytes_total", &labels).increment(bytes);
    }

    /// How late the target is for a partition: the age of the last record copied (0 when
    /// nothing waits). Records behind are `strata_replicate_lag_records`, from the source
    /// consumer's statistics.
    pub fn lag_seconds(&self, tp: &Tp, seconds: f64) {
        let labels = [
            ("task", self.task.clone()),
            ("flow", self.flow.clone()),
            ("topic", tp.topic.to_string()),
            ("partition", tp.partition.to_string()),
        ];
        metrics::gauge!("strata_replicate_lag_seconds", &labels).set(seconds);
    }

    pub fn error(&self, kind: &'static str) {
        metrics::counter!("strata_replicate_errors_total", "task" => self.task.clone(), "flow" => self.flow.clone(), "kind" => kind).increment(1);
    }

    pub fn checkpoint_age(&self, seconds: f64) {
        metrics::gauge!("strata_replicate_checkpoint_age_seconds", "task" => self.task.clone(), "flow" => self.flow.clone()).set(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Alias;

    fn names() -> FlowNames {
        FlowNames {
            task: "mirror".into(),
            source: Alias::parse("east").unwrap(),
            target: Alias::parse("west").unwrap(),
            local_is_source: false,
        }
    }

    #[test]
    fn selection_skips_internal_and_returning_topics() {
        let listed = vec![
            ("orders".to_string(), 3),
            ("__consumer_offsets".to_string(), 50),
            ("mm2-offset-syncs.west.internal".to_string(), 1),
            ("west.orders".to_string(), 3),
            ("clicks".to_string(), 1),
        ];
        let all = TopicSelector::Regex(regex::Regex::new("^(?:.*)$").unwrap());
        let got = select(&all, &TargetNaming::Rename, &names(), &listed);
        let pairs: Vec<(&str, &str)> = got
            .iter()
            .map(|r| (r.source.as_str(), r.target.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [("clicks", "east.clicks"), ("orders", "east.orders")]
        );
        // Without renaming, a prefixed name is just a name.
        let got = select(&all, &TargetNaming::Identity, &names(), &listed);
        assert_eq!(got.len(), 3);
        assert!(got
            .iter()
            .any(|r| r.source == "west.orders" && r.target == "west.orders"));
        let list = TopicSelector::List(vec!["orders".into()]);
        let got = select(&list, &TargetNaming::Identity, &names(), &listed);
        assert_eq!(
            got,
            [Route {
                source: "orders".into(),
                target: "orders".into(),
                partitions: 3
            }]
        );
    }

    #[test]
    fn changed_parameters_are_named() {
        let a = r#"{"direction":"pull","compression":"none","source_header":false}"#;
        let b = r#"{"direction":"pull","compression":"zstd","source_header":false}"#;
        assert!(params_diff(a, a).is_empty());
        assert_eq!(
            params_diff(a, b),
            [r#"compression (stored "none", now "zstd")"#]
        );
        let c = r#"{"direction":"pull","compression":"none","source_header":false,"new":1}"#;
        assert_eq!(params_diff(a, c), ["new (stored unset, now 1)"]);
        assert_eq!(params_diff("garbage", a).len(), 1);
    }
}
