//! Topic administration and offsets: create topics, list them, read partition counts and
//! watermarks. Used by dump (regex subscriptions, `--once`), restore (target topics) and tests.

use super::{client_config, servers, KafkaError, Watch, ADMIN_TIMEOUT};
use crate::config::{ClientKind, KafkaConfig};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Admin and metadata calls against one cluster.
pub struct Admin {
    admin: AdminClient<Watch>,
    meta: BaseConsumer<Watch>,
    /// Shared by both clients: a refused login or TLS handshake ends calls early.
    watch: Watch,
    kafka: KafkaConfig,
    /// Both clients' settings, for their AWS_MSK_IAM token.
    settings: ClientConfig,
    /// When the token both clients have was signed (AWS_MSK_IAM).
    token_signed: Mutex<Option<SystemTime>>,
}

impl Admin {
    pub fn new(k: &KafkaConfig) -> Result<Self, KafkaError> {
        let cfg = client_config(k, ClientKind::Admin);
        let err = |source| KafkaError::Client {
            servers: servers(k),
            source,
        };
        let watch = Watch::default();
        let admin = Self {
            admin: cfg.create_with_context(watch.clone()).map_err(err)?,
            meta: cfg.create_with_context(watch.clone()).map_err(err)?,
            watch,
            kafka: k.clone(),
            settings: cfg,
            token_signed: Mutex::new(None),
        };
        admin
            .keep_token()
            .map_err(|e| err(rdkafka::error::KafkaError::ClientCreation(e.to_string())))?;
        Ok(admin)
    }

    /// Hands both clients the current AWS_MSK_IAM token when it is new: nothing serves the
    /// admin client's event queue, where librdkafka asks for one (see [`super::msk_iam::prime`]).
    fn keep_token(&self) -> Result<(), super::msk_iam::MskIamError> {
        let Some(t) = super::msk_iam::token_of(&self.settings)? else {
            return Ok(());
        };
        let mut signed = self.token_signed.lock().unwrap_or_else(|e| e.into_inner());
        if *signed != Some(t.signed_at) {
            super::msk_iam::set(self.admin.inner(), &t)?;
            super::msk_iam::set(self.meta.client(), &t)?;
            *signed = Some(t.signed_at);
        }
        Ok(())
    }

    /// [`Self::keep_token`] before a call; a failure is logged, the call then fails as a
    /// refused login.
    fn fresh(&self) -> &Self {
        if let Err(e) = self.keep_token() {
            tracing::warn!(servers = %super::servers(&self.kafka), error = %e, "no AWS_MSK_IAM token for the admin client");
        }
        self
    }

    /// [`Self::new`], then a metadata request: the cluster answers and accepts this client's
    /// login and certificates, or the error says which of them it refused.
    pub fn connect(k: &KafkaConfig) -> Result<Self, KafkaError> {
        let admin = Self::new(k)?;
        admin.metadata(None)?;
        Ok(admin)
    }

    /// The error of a failed call: the cluster's refusal when there was one, else unreachable.
    fn unreachable(&self, e: impl std::fmt::Display) -> KafkaError {
        self.serve_events();
        self.watch.failure(&self.kafka, e)
    }

    /// Serves the metadata client's queued events for up to 100 ms, so that [`Watch`] sees the
    /// refusals librdkafka reports there. A zero-timeout poll serves one event only, and each
    /// failed connection queues log lines beside its error: one event per step fell behind and
    /// a refused handshake could read as an unreachable cluster after [`ADMIN_TIMEOUT`]. (The
    /// admin client's own queue is never served by rdkafka; this client sees the same errors.)
    fn serve_events(&self) {
        let until = Instant::now() + Duration::from_millis(100);
        while self.watch.refusal().is_none() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let _ = self.meta.poll(left);
        }
    }

    /// Cluster metadata (one topic's, or all), asked in 1 s steps for the first 5 s (when
    /// librdkafka reports a refused login or handshake: the wait ends then instead of after
    /// [`ADMIN_TIMEOUT`]), then in growing steps up to 8 s, so that a large cluster's slow answer
    /// still fits one.
    fn metadata(&self, topic: Option<&str>) -> Result<Metadata, KafkaError> {
        let started = Instant::now();
        let deadline = started + ADMIN_TIMEOUT;
        let mut next = Duration::from_secs(1);
        loop {
            let step = deadline.saturating_duration_since(Instant::now()).min(next);
            if started.elapsed() >= Duration::from_secs(5) {
                next = (next * 2).min(Duration::from_secs(8));
            }
            self.serve_events();
            match self.fresh().meta.fetch_metadata(topic, step) {
                Ok(md) => return Ok(md),
                Err(e) if self.watch.refusal().is_some() || Instant::now() >= deadline => {
                    return Err(self.unreachable(e))
                }
                Err(_) => {}
            }
        }
    }

    /// Creates a topic; an existing topic is fine (its settings are left alone).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication: i32,
        configs: &[(&str, &str)],
    ) -> Result<(), KafkaError> {
        let mut t = NewTopic::new(name, partitions, TopicReplication::Fixed(replication));
        for (k, v) in configs {
            t = t.set(k, v);
        }
        let opts = AdminOptions::new()
            .operation_timeout(Some(ADMIN_TIMEOUT))
            .request_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .fresh()
            .admin
            .create_topics([&t], &opts)
            .await
            .map_err(|e| self.unreachable(e))?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) if super::refusal::is_authorization(code) => {
                    return Err(KafkaError::not_authorized(
                        &self.kafka,
                        format!("{code} (creating topic {topic:?})"),
                    ))
                }
                Err((topic, code)) => {
                    return Err(KafkaError::Topic { topic, detail: format!("cannot create it: {code}; check the partition count, replication factor and ACLs") })
                }
            }
        }
        Ok(())
    }

    /// Whether this client may create `name` (the broker validates the request and creates
    /// nothing): `Err` carries the broker's reason.
    pub async fn may_create_topic(&self, name: &str) -> Result<(), KafkaError> {
        let t = NewTopic::new(name, 1, TopicReplication::Fixed(-1));
        let opts = AdminOptions::new()
            .validate_only(true)
            .request_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .fresh()
            .admin
            .create_topics([&t], &opts)
            .await
            .map_err(|e| self.unreachable(e))?;
        for r in results {
            if let Err((topic, code)) = r {
                return Err(KafkaError::Topic {
                    topic,
                    detail: format!("creating it would fail: {code}"),
                });
            }
        }
        Ok(())
    }

    /// Deletes topics; missing topics are fine.
    pub async fn delete_topics(&self, names: &[&str]) -> Result<(), KafkaError> {
        let opts = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .fresh()
            .admin
            .delete_topics(names, &opts)
            .await
            .map_err(|e| self.unreachable(e))?;
        for r in results {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
                Err((topic, code)) => {
                    return Err(KafkaError::Topic {
                        topic,
                        detail: format!("cannot delete it: {code}"),
                    })
                }
            }
        }
        Ok(())
    }

    /// All topic names the cluster reports (internal ones included; callers filter).
    pub fn list_topics(&self) -> Result<Vec<String>, KafkaError> {
        let md = self.metadata(None)?;
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.error().is_none())
            .map(|t| t.name().to_string())
            .collect())
    }

    /// Number of partitions, or `None` when the topic does not exist.
    pub fn partition_count(&self, topic: &str) -> Result<Option<i32>, KafkaError> {
        let md = self.metadata(Some(topic))?;
        Ok(md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
            .map(|t| t.partitions().len() as i32))
    }

    /// The brokers the cluster reports.
    pub fn broker_count(&self) -> Result<usize, KafkaError> {
        let md = self.metadata(None)?;
        Ok(md.brokers().len())
    }

    /// A topic's configuration entries that are set (not the broker's defaults), by name.
    pub async fn topic_configs(
        &self,
        topic: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, KafkaError> {
        use rdkafka::admin::ResourceSpecifier;
        let opts = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .fresh()
            .admin
            .describe_configs([&ResourceSpecifier::Topic(topic)], &opts)
            .await
            .map_err(|e| self.unreachable(e))?;
        let mut out = std::collections::BTreeMap::new();
        for r in results {
            let resource = r.map_err(|code| KafkaError::Topic {
                topic: topic.to_string(),
                detail: format!(
                    "cannot read its configuration: {code}; check the ACLs (DescribeConfigs)"
                ),
            })?;
            for e in resource.entries {
                if let (false, Some(v)) = (e.is_default, e.value) {
                    out.insert(e.name, v);
                }
            }
        }
        Ok(out)
    }

    /// One configuration entry of a topic, whatever its source (the effective value).
    pub async fn topic_config(
        &self,
        topic: &str,
        name: &str,
    ) -> Result<Option<String>, KafkaError> {
        use rdkafka::admin::ResourceSpecifier;
        let opts = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .fresh()
            .admin
            .describe_configs([&ResourceSpecifier::Topic(topic)], &opts)
            .await
            .map_err(|e| self.unreachable(e))?;
        for r in results {
            let resource = r.map_err(|code| KafkaError::Topic {
                topic: topic.to_string(),
                detail: format!("cannot read its configuration: {code}"),
            })?;
            if let Some(e) = resource.entries.into_iter().find(|e| e.name == name) {
                return Ok(e.value);
            }
        }
        Ok(None)
    }

    /// Grows a topic to `total` partitions.
    pub async fn add_partitions(&self, topic: &str, total: usize) -> Result<(), KafkaError> {
        use rdkafka::admin::NewPartitions;
        let opts = AdminOptions::new()
            .operation_timeout(Some(ADMIN_TIMEOUT))
            .request_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .fresh()
            .admin
            .create_partitions([&NewPartitions::new(topic, total)], &opts)
            .await
            .map_err(|e| self.unreachable(e))?;
        for r in results {
            if let Err((topic, code)) = r {
                return Err(KafkaError::Topic {
                    topic,
                    detail: format!(
                        "cannot add partitions (to {total}): {code}; check the ACLs (Alter)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// Consumer groups: name, state and how many members are active.
    pub fn groups(&self) -> Result<Vec<(String, String, usize)>, KafkaError> {
        let list = self
            .fresh()
            .meta
            .fetch_group_list(None, ADMIN_TIMEOUT)
            .map_err(|e| self.unreachable(e))?;
        Ok(list
            .groups()
            .iter()
            .map(|g| {
                (
                    g.name().to_string(),
                    g.state().to_string(),
                    g.members().len(),
                )
            })
            .collect())
    }

    /// Active members of one consumer group (0 when it is empty or does not exist).
    pub fn group_members(&self, group: &str) -> Result<usize, KafkaError> {
        let list = self
            .meta
            .fetch_group_list(Some(group), ADMIN_TIMEOUT)
            .map_err(|e| self.unreachable(e))?;
        Ok(list
            .groups()
            .iter()
            .filter(|g| g.name() == group)
            .map(|g| g.members().len())
            .sum())
    }

    /// `(low, high)` watermarks of one partition.
    pub fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64), KafkaError> {
        self.fresh()
            .meta
            .fetch_watermarks(topic, partition, ADMIN_TIMEOUT)
            .map_err(|e| KafkaError::Topic {
                topic: topic.to_string(),
                detail: format!("watermarks of partition {partition}: {e}"),
            })
    }
}
