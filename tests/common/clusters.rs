//! Both clusters of the dev environment for the replicate tests: the local broker (PLAINTEXT)
//! and the peer (SASL SCRAM-SHA-512, password in a file `./dev` wrote), with helpers that work
//! on either: create and grow topics, produce, read everything a read_committed reader sees.

use super::{record_of, required_env, unique};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use strata::config::{Config, KafkaConfig};
use strata::format::Record;

/// The environment variable replicate configs name for the peer's password.
pub const PEER_PASSWORD_VAR: &str = "STRATA_TEST_PEER_PASSWORD";

pub fn peer_bootstrap() -> String {
    required_env("STRATA_TEST_PEER_BOOTSTRAP")
}

pub fn peer_user() -> String {
    required_env("STRATA_TEST_PEER_USER")
}

pub fn peer_password() -> String {
    let path = required_env("STRATA_TEST_PEER_PASSWORD_FILE");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read the peer password from {path}: {e}"))
        .trim()
        .to_string()
}

/// The connection lines of the peer (a `[kafka]` or `[tasks.peer]` table's body), the password
/// named by [`PEER_PASSWORD_VAR`].
pub fn peer_connection() -> String {
    format!(
        "bootstrap_servers = \"{}\"\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nusername = \"{}\"\npassword = \"${{{PEER_PASSWORD_VAR}}}\"\n",
        peer_bootstrap(),
        peer_user()
    )
}

/// A config with the peer's password filled in (as a process started with it set would see).
pub fn config_with_peer(toml: &str) -> Config {
    let pw = peer_password();
    Config::from_toml(toml, "test config", |k| {
        if k == PEER_PASSWORD_VAR {
            Some(pw.clone())
        } else {
            std::env::var(k).ok()
        }
    })
    .unwrap_or_else(|e| panic!("test config invalid: {e}\n{toml}"))
}

pub fn peer_kafka_config() -> KafkaConfig {
    config_with_peer(&format!("[kafka]\n{}", peer_connection())).kafka
}

/// Creates a topic on a cluster and waits until its partitions show in the metadata.
pub async fn create_topic_on(k: &KafkaConfig, name: &str, partitions: i32) {
    let admin = strata::kafka::Admin::new(k).expect("admin client");
    admin
        .create_topic(name, partitions, 1, &[])
        .await
        .expect("create topic");
    wait_for_partitions(&admin, name, partitions).await;
}

pub async fn wait_for_partitions(admin: &strata::kafka::Admin, name: &str, partitions: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while admin.partition_count(name).ok().flatten().unwrap_or(0) < partitions {
        assert!(
            Instant::now() < deadline,
            "topic {name} did not get {partitions} partitions"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn producer_for(k: &KafkaConfig) -> FutureProducer {
    strata::kafka::client_config(k, strata::config::ClientKind::Producer)
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .create()
        .expect("producer")
}

/// Produces records (to their partition, with key, value, headers, timestamp) to a cluster.
pub async fn produce_to(k: &KafkaConfig, records: &[Record]) {
    super::produce_with(&producer_for(k), records).await;
}

/// Everything a read_committed reader sees in a topic now (up to the end offsets, past
/// transaction markers), in offset order per partition.
pub fn read_committed(k: &KafkaConfig, topic: &str) -> Vec<Record> {
    let admin = strata::kafka::Admin::new(k).expect("admin");
    let parts = admin
        .partition_count(topic)
        .expect("metadata")
        .unwrap_or_else(|| panic!("topic {topic} does not exist"));
    let c: BaseConsumer = strata::kafka::client_config(k, strata::config::ClientKind::Consumer)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    let mut highs = Vec::new();
    for p in 0..parts {
        let (_, hi) = admin.watermarks(topic, p).expect("watermarks");
        highs.push(hi);
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let pos = c.position().expect("position");
        let done = (0..parts).all(|p| {
            let at = match pos.find_partition(topic, p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => -1,
            };
            highs[p as usize] == 0 || at >= highs[p as usize]
        });
        if done {
            return out;
        }
        assert!(Instant::now() < deadline, "reading {topic} timed out");
        if let Some(m) = c.poll(Duration::from_millis(200)) {
            out.push(record_of(&m.expect("consume")));
        }
    }
}

/// A TCP proxy a test can cut (every connection dropped, new ones refused) and restore.
pub struct TcpProxy {
    listen: String,
    upstream: String,
    tasks: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl TcpProxy {
    pub async fn start(listen: &str, upstream: &str) -> Self {
        let p = Self {
            listen: listen.to_string(),
            upstream: upstream.to_string(),
            tasks: Arc::new(Mutex::new(Vec::new())),
        };
        p.restore().await;
        p
    }

    pub fn addr(&self) -> &str {
        &self.listen
    }

    /// Drops every connection and stops listening.
    pub fn cut(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// Listens again (the port may take a moment to be free).
    pub async fn restore(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let listener = loop {
            match tokio::net::TcpListener::bind(&self.listen).await {
                Ok(l) => break l,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "cannot listen on {}: {e}",
                        self.listen
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        let (upstream, tasks) = (self.upstream.clone(), self.tasks.clone());
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let upstream = upstream.clone();
                let conn = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                tasks.lock().unwrap().push(conn);
            }
        });
        self.tasks.lock().unwrap().push(accept);
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
    }
}
