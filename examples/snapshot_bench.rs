//! Benchmark of a cluster state snapshot (bench/state.sh runs it): makes a cluster of many topics
//! and consumer groups on the dev broker (once; reused), then times `dump::snapshot::capture` over
//! all of them. Not a test: it measures.
//!
//!   cargo run --release --example snapshot_bench -- [TOPICS=1000] [PARTITIONS=10] [GROUPS=200] [ROUNDS=3]

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::time::{Duration, Instant};
use strata::config::Config;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .try_init();
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(d)
    };
    let (topics, partitions, groups, rounds) = (arg(1, 1000), arg(2, 10), arg(3, 200), arg(4, 3));
    let boot = std::env::var("STRATA_TEST_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let prefix = format!("snapbench-t{topics}-p{partitions}-");
    let names: Vec<String> = (0..topics).map(|i| format!("{prefix}{i:05}")).collect();
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &boot)
        .create()
        .expect("admin client");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &boot)
        .create()
        .expect("consumer");
    let md = consumer
        .fetch_metadata(None, Duration::from_secs(30))
        .expect("metadata");
    let have = md
        .topics()
        .iter()
        .filter(|t| t.name().starts_with(&prefix))
        .count();
    if have < topics {
        let t0 = Instant::now();
        for chunk in names.chunks(200) {
            let new: Vec<NewTopic<'_>> = chunk
                .iter()
                .map(|n| NewTopic::new(n, partitions as i32, TopicReplication::Fixed(1)))
                .collect();
            let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(120)));
            let _ = admin
                .create_topics(new.iter(), &opts)
                .await
                .expect("create topics");
        }
        eprintln!(
            "created {topics} topics x {partitions} partitions in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        // Each group commits offsets on ten topics' partitions.
        let t0 = Instant::now();
        for g in 0..groups {
            let c: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", &boot)
                .set("group.id", format!("{prefix}group-{g:04}"))
                .create()
                .expect("group client");
            let mut tpl = TopicPartitionList::new();
            for k in 0..10 {
                let t = &names[(g * 10 + k) % topics];
                for p in 0..partitions as i32 {
                    tpl.add_partition_offset(t, p, Offset::Offset(0)).unwrap();
                }
            }
            c.commit(&tpl, CommitMode::Sync).expect("commit");
        }
        eprintln!(
            "committed offsets of {groups} groups in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
    }
    let cfg = Config::from_toml(
        &format!("[kafka]\nbootstrap_servers = \"{boot}\"\n[[tasks]]\nname = \"snapbench\"\ntopic_regex = '{prefix}.*'\n"),
        "bench",
        |_| None,
    )
    .expect("config");
    let task = &cfg.tasks[0];
    let filter = strata::dump::snapshot::GroupFilter {
        regex: None,
        own: vec!["snapbench".into()],
    };
    let mut times = Vec::new();
    for r in 0..rounds {
        let t0 = Instant::now();
        let s = strata::dump::snapshot::capture(
            &cfg.kafka,
            "snapbench",
            &task.topics,
            &filter,
            strata::state::Occasion::Start,
        )
        .expect("capture");
        let took = t0.elapsed().as_secs_f64();
        let parts: usize = s.topics.iter().map(|t| t.watermarks.len()).sum();
        let bench_groups = s
            .groups
            .iter()
            .filter(|g| g.group.starts_with(&prefix))
            .count();
        let json = serde_json::to_vec(&s).unwrap().len();
        eprintln!(
            "round {r}: {:.2} s, {} topics, {parts} partitions, {bench_groups} groups, {} KiB of JSON",
            took,
            s.topics.len(),
            json / 1024
        );
        times.push(took);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "| {topics} topics x {partitions} partitions, {groups} groups | median {:.2} s | min {:.2} s | max {:.2} s |",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
}
