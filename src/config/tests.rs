use super::*;
use crate::format::{Compression, Delimiter, FormatKind};

fn env(name: &str) -> Option<String> {
    match name {
        "S3_SECRET_KEY" => Some("TOPSECRETs3key".into()),
        "S3_ACCESS_KEY" => Some("AKIAEXAMPLEKEY".into()),
        "KAFKA_PASSWORD" => Some("hunter2-kafka".into()),
        _ => None,
    }
}

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml(text, "test.toml", env)
}

fn issues(text: &str) -> Vec<Issue> {
    match load(text) {
        Err(ConfigError::Invalid { issues, .. }) => issues,
        other => panic!("expected invalid config, got {other:?}"),
    }
}

const FULL: &str = r#"
[kafka]
bootstrap_servers = ["k1:9092", "k2:9092"]
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
username = "strata"
password = "${KAFKA_PASSWORD}"
[kafka.properties]
"fetch.max.bytes" = 10485760
"ssl.endpoint.identification.algorithm" = "none"

[store]
url = "s3://archive-bucket/prod"
endpoint = "http://127.0.0.1:4566"
access_key = "${S3_ACCESS_KEY}"
secret_key = "${S3_SECRET_KEY}"

[[tasks]]
name = "cdc-orders"
topics = ["cdc.orders", "cdc.payments"]
directory = "cdc"
time_directory = "dt=yyyy-MM-dd/hr=HH"
time_zone = "Europe/Berlin"
format = "jsonl"
compression = "zstd"
dump_interval_secs = 60

[[tasks]]
name = "all_logs"
topic_regex = "logs\\..*"
record_delimiter = "|"
store_key = true
key_separator = "="
bucket = "other-bucket"
"#;

#[test]
fn full_example_parses_into_types() {
    let c = load(FULL).unwrap();
    assert_eq!(c.kafka.bootstrap_servers, vec!["k1:9092", "k2:9092"]);
    let sasl = c.kafka.sasl.as_ref().unwrap();
    assert_eq!(sasl.mechanism(), SaslMechanism::ScramSha512);
    let Sasl::Password { password, .. } = sasl else {
        panic!("{sasl:?}")
    };
    assert_eq!(password.expose(), "hunter2-kafka");
    assert_eq!(c.kafka.properties["fetch.max.bytes"], "10485760");
    assert_eq!(
        c.store.url,
        StoreUrl::S3 {
            bucket: "archive-bucket".into(),
            prefix: "prod".into()
        }
    );
    assert!(
        c.store.s3.path_style,
        "an explicit endpoint implies path-style by default"
    );
    assert_eq!(c.tasks.len(), 2);
    let t = &c.tasks[0];
    assert_eq!(t.interval, Duration::from_secs(60));
    assert_eq!(t.format.kind, FormatKind::Jsonl);
    assert_eq!(t.format.compression, Compression::Zstd);
    assert_eq!(t.time_zone, chrono_tz::Europe::Berlin);
    assert!(t.topics.matches("cdc.orders") && !t.topics.matches("cdc.other"));
    let t = &c.tasks[1];
    assert!(t.topics.matches("logs.app") && !t.topics.matches("xlogs.app"));
    assert_eq!(t.format.text.delimiter, Delimiter::Pipe);
    assert_eq!(
        t.format.text.key_separator.as_deref(),
        Some(b"=".as_slice())
    );
    assert_eq!(
        t.interval,
        Duration::from_secs(defaults::DUMP_INTERVAL_SECS)
    );
    assert_eq!(
        t.store.url,
        StoreUrl::S3 {
            bucket: "other-bucket".into(),
            prefix: "prod".into()
        }
    );
}

#[test]
fn empty_file_is_the_embedded_default() {
    let c = Config::embedded_default();
    assert_eq!(c.kafka.bootstrap_servers, vec![defaults::BOOTSTRAP]);
    assert_eq!(
        c.store.url,
        StoreUrl::File {
            root: "./strata-archive".into()
        }
    );
    assert_eq!(c.limits.max_tasks, 18);
    assert_eq!(c.limits.buffer_memory, ByteSize::mib(256));
    assert!(c.tasks.is_empty());
}

#[test]
fn ten_mistakes_are_all_reported_with_key_and_fix() {
    let text = r##"
colour = "blue"
[kafka]
security_protocol = "SASL_SSL"
bootstrap_servers = "localhost"
[store]
url = "s3://Bad_Bucket"
secret_key = "${S3_SECRET_KEY}"
[[tasks]]
name = "ab"
topics = ["t1"]
topic_regex = "x"
time_directory = "yyyy/dd"
record_delimiter = "#"
dump_interval_secs = 0
formt = "jsonl"
[[tasks]]
name = "second-task"
topic_regex = "orders(["
time_zone = "Mars/Olympus"
format = "parquet"
compression = "gzip"
"##;
    let found = issues(text);
    let want: &[(&str, &str)] = &[
        ("colour", "unknown key"),
        (
            "kafka.bootstrap_servers",
            "\"localhost\" is not \"host:port\"",
        ),
        (
            "kafka.sasl_mechanism",
            "is required with security_protocol = \"SASL_SSL\"",
        ),
        ("kafka.username", "is required"),
        ("kafka.password", "${KAFKA_PASSWORD}"),
        (
            "store.url",
            "bucket name \"Bad_Bucket\" must be 3-63 characters",
        ),
        (
            "store.access_key",
            "is missing while store.secret_key is set",
        ),
        ("tasks[0].formt", "did you mean \"format\"?"),
        (
            "tasks[0].name",
            "\"ab\" must be 4-64 characters of letters, digits, '-' or '_'",
        ),
        ("tasks[0].topics", "and topic_regex are both set"),
        (
            "tasks[0].dump_interval_secs",
            "0 is outside 1..=86400 seconds",
        ),
        ("tasks[0].time_directory", "uses \"dd\" without \"MM\""),
        ("tasks[0].record_delimiter", "\"#\" is not one of"),
        ("tasks[1].topic_regex", "is not a valid regular expression"),
        (
            "tasks[1].time_zone",
            "\"Mars/Olympus\" is not an IANA time zone",
        ),
        (
            "tasks[1].compression",
            "compression \"gzip\" does not apply to format \"parquet\"",
        ),
    ];
    for (key, fragment) in want {
        assert!(
            found
                .iter()
                .any(|i| i.key == *key && i.message.contains(fragment)),
            "missing {key}: ...{fragment}... in {found:#?}"
        );
    }
    assert_eq!(
        found.len(),
        want.len(),
        "unexpected extra issues: {found:#?}"
    );
    let rendered = load(text).unwrap_err().to_string();
    assert!(
        rendered.starts_with(&format!("test.toml has {} problems:", want.len())),
        "{rendered}"
    );
    assert!(
        !rendered.contains("TOPSECRETs3key"),
        "secret leaked: {rendered}"
    );
}

#[test]
fn syntax_and_type_errors_give_the_line_without_values() {
    let err = load("[kafka]\nbootstrap_servers = [\"a:1\"\n").unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }));
    assert!(err.to_string().contains("line 2"), "{err}");

    let err = load("[store]\nsecret_key = 123456789\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 2") && err.contains("invalid type: integer"),
        "{err}"
    );
    assert!(!err.contains("123456789"), "value echoed: {err}");
}

#[test]
fn at_most_twenty_topics_and_eighteen_tasks() {
    let topics: Vec<String> = (0..21).map(|i| format!("\"t{i}\"")).collect();
    let text = format!(
        "[[tasks]]\nname = \"many\"\ntopics = [{}]\n",
        topics.join(",")
    );
    let found = issues(&text);
    assert!(
        found.iter().any(
            |i| i.key == "tasks[0].topics" && i.message.contains("lists 21 topics, at most 20")
        ),
        "{found:#?}"
    );

    let mut text = String::new();
    for i in 0..19 {
        text.push_str(&format!(
            "[[tasks]]\nname = \"task{i:02}\"\ntopics = [\"t{i}\"]\n"
        ));
    }
    let found = issues(&text);
    assert!(
        found
            .iter()
            .any(|i| i.key == "tasks" && i.message.contains("19 tasks, but at most 18")),
        "{found:#?}"
    );
    let raised = format!("[limits]\nmax_tasks = 19\n{text}");
    assert_eq!(load(&raised).unwrap().tasks.len(), 19);
}

#[test]
fn overlapping_tasks_and_duplicate_names_are_refused() {
    let text = r#"
[[tasks]]
name = "first"
topics = ["a", "b"]
[[tasks]]
name = "first"
topics = ["b"]
directory = "elsewhere"
[[tasks]]
name = "third"
topics = ["a"]
"#;
    let found = issues(text);
    assert!(
        found
            .iter()
            .any(|i| i.message.contains("two tasks are named \"first\"")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|i| i.message.contains("\"first\" and \"third\" both dump a")),
        "{found:#?}"
    );
    assert_eq!(found.len(), 2, "{found:#?}");
}

#[test]
fn owned_kafka_properties_are_refused() {
    let found = issues("[kafka.properties]\n\"enable.auto.commit\" = true\n\"group.id\" = \"x\"\n");
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found[0].message.contains("managed by strata"));
}

/// The properties strata sets for dump's and replicate's guarantees (issue 33, item 4).
const GUARANTEE_PROPERTIES: &[&str] = &[
    "isolation.level",
    "transactional.id",
    "transaction.timeout.ms",
    "acks",
    "request.required.acks",
    "enable.idempotence",
];

#[test]
fn properties_that_break_dump_and_replicate_guarantees_are_refused_with_the_reason() {
    // [kafka.properties] of a file with a dump task.
    for p in GUARANTEE_PROPERTIES {
        let text = format!(
            "[kafka.properties]\n\"{p}\" = \"x\"\n[[tasks]]\nname = \"dump1\"\ntopics = [\"a\"]\n"
        );
        let found = issues(&text);
        assert_eq!(found.len(), 1, "{p}: {found:#?}");
        assert_eq!(found[0].key, format!("kafka.properties.\"{p}\""));
        assert!(found[0].message.contains("managed by strata"), "{found:#?}");
    }
    // The reason, not only the refusal.
    let found = issues("[kafka.properties]\n\"isolation.level\" = \"read_uncommitted\"\n[[tasks]]\nname = \"dump1\"\ntopics = [\"a\"]\n");
    assert!(found[0].message.contains("aborted"), "{found:#?}");
    let found = issues(&format!(
        "[kafka.properties]\n\"transactional.id\" = \"fixed\"\n{}",
        replicate("", "")
    ));
    assert!(
        has(&found, "kafka.properties.\"transactional.id\"", "fence"),
        "{found:#?}"
    );
    // A replicate task's peer properties go through the same guard.
    for p in GUARANTEE_PROPERTIES {
        let found = issues(&replicate(
            "",
            &format!("[tasks.peer.properties]\n\"{p}\" = \"x\"\n"),
        ));
        assert!(
            has(
                &found,
                &format!("tasks[0].peer.properties.\"{p}\""),
                "managed by strata"
            ),
            "{p}: {found:#?}"
        );
    }
    // Properties a test or an operator may still set on the peer: static membership, timeouts.
    let ok = replicate(
        "",
        "[tasks.peer.properties]\n\"group.instance.id\" = \"m-1\"\n\"session.timeout.ms\" = \"6000\"\n",
    );
    assert!(load(&ok).is_ok());
}

/// `consumer.`, `producer.` and `admin.` keys reach only that kind of client, and go
/// through the owned-property guard like unprefixed ones, with the same reason.
#[test]
fn prefixed_properties_reach_one_client_kind_and_are_guarded() {
    let c = load(
        "[kafka.properties]\n\"fetch.wait.max.ms\" = 100\n\"consumer.fetch.wait.max.ms\" = 50\n\"consumer.fetch.min.bytes\" = 1024\n\"producer.linger.ms\" = 10\n\"admin.socket.timeout.ms\" = 9000\n",
    )
    .unwrap();
    let of = |kind| -> Vec<(String, String)> {
        c.kafka
            .properties_for(kind)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let pairs = |p: &[(&str, &str)]| -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    // The prefixed value comes after the unprefixed one, so it wins where both are set.
    assert_eq!(
        of(ClientKind::Consumer),
        pairs(&[
            ("fetch.wait.max.ms", "100"),
            ("fetch.min.bytes", "1024"),
            ("fetch.wait.max.ms", "50")
        ])
    );
    assert_eq!(
        of(ClientKind::Producer),
        pairs(&[("fetch.wait.max.ms", "100"), ("linger.ms", "10")])
    );
    assert_eq!(
        of(ClientKind::Admin),
        pairs(&[("fetch.wait.max.ms", "100"), ("socket.timeout.ms", "9000")])
    );
    let with_task = "[[tasks]]\nname = \"dump1\"\ntopics = [\"a\"]\n";
    for (prefixed, plain) in [
        ("consumer.isolation.level", "isolation.level"),
        ("producer.enable.idempotence", "enable.idempotence"),
        ("admin.bootstrap.servers", "bootstrap.servers"),
        ("consumer.group.id", "group.id"),
    ] {
        let found = issues(&format!(
            "[kafka.properties]\n\"{prefixed}\" = \"x\"\n{with_task}"
        ));
        let unprefixed = issues(&format!(
            "[kafka.properties]\n\"{plain}\" = \"x\"\n{with_task}"
        ));
        assert_eq!(found.len(), 1, "{prefixed}: {found:#?}");
        assert_eq!(found[0].key, format!("kafka.properties.\"{prefixed}\""));
        assert_eq!(found[0].message, unprefixed[0].message, "{prefixed}");
    }
    // A replicate peer's prefixed properties too.
    let found = issues(&replicate(
        "",
        "[tasks.peer.properties]\n\"producer.transactional.id\" = \"x\"\n",
    ));
    assert!(
        has(
            &found,
            "tasks[0].peer.properties.\"producer.transactional.id\"",
            "managed by strata"
        ),
        "{found:#?}"
    );
    // A prefix alone names nothing.
    let found = issues("[kafka.properties]\n\"consumer.\" = \"x\"\n");
    assert!(
        has(
            &found,
            "kafka.properties.\"consumer.\"",
            "consumer.fetch.min.bytes"
        ),
        "{found:#?}"
    );
}

#[test]
fn a_file_without_tasks_keeps_restores_own_guard_for_producer_settings() {
    // [kafka] serves restore alone here: restore ignores these with a warning, as before.
    let c = load("[kafka.properties]\n\"acks\" = \"1\"\n\"transactional.id\" = \"x\"\n").unwrap();
    assert_eq!(c.kafka.properties["acks"], "1");
    // [restore.kafka] likewise; the always-owned ones stay refused there.
    let c = load("[restore]\n[restore.kafka]\nbootstrap_servers = [\"k:9092\"]\n[restore.kafka.properties]\n\"enable.idempotence\" = false\n").unwrap();
    assert!(c.restore.is_some());
    let found =
        issues("[restore]\n[restore.kafka]\n[restore.kafka.properties]\n\"group.id\" = \"g\"\n");
    assert!(
        has(
            &found,
            "restore.kafka.properties.\"group.id\"",
            "managed by strata"
        ),
        "{found:#?}"
    );
}

#[test]
fn report_never_shows_secrets() {
    let c = load(FULL).unwrap();
    let report = render_report("test.toml", &c, None);
    for secret in ["hunter2-kafka", "TOPSECRETs3key", "AKIAEXAMPLEKEY"] {
        assert!(!report.contains(secret), "{secret} leaked:\n{report}");
    }
    assert!(
        report.contains("secret key <set, from ${S3_SECRET_KEY}>"),
        "{report}"
    );
    assert!(
        report.contains("cdc-orders: topics [cdc.orders, cdc.payments]"),
        "{report}"
    );
    let debug = format!("{c:?}");
    for secret in ["hunter2-kafka", "TOPSECRETs3key", "AKIAEXAMPLEKEY"] {
        assert!(!debug.contains(secret), "{secret} leaked in Debug");
    }
}

#[test]
fn restore_and_tier_sections_validate() {
    let c = load(
        r#"
[restore]
directory = "cdc"
topics = ["cdc.orders"]
from = "2026-11-29T00:00:00Z"
to = "2026-11-30T00:00:00Z"
target_prefix = "restored."
partitioning = "key-hash"
[restore.kafka]
bootstrap_servers = "other:9092"
[tier]
chunk_size = "1MiB"
compression = "zstd"
"#,
    )
    .unwrap();
    let report = render_report("t.toml", &c, None);
    let r = c.restore.unwrap();
    assert_eq!(r.naming.target("cdc.orders"), "restored.cdc.orders");
    // No replication_factor: created topics (and the exactly-once progress topic) take the
    // broker's default.replication.factor, never an unreplicated topic on a real cluster.
    assert_eq!(r.replication_factor, None);
    assert_eq!(r.topic_replication(), -1);
    assert!(
        report.contains("new topics with replication factor the broker's default"),
        "{report}"
    );
    assert_eq!(r.partitioning, Partitioning::KeyHash);
    assert_eq!(r.kafka.bootstrap_servers, vec!["other:9092"]);
    assert_eq!(c.kafka.bootstrap_servers, vec![defaults::BOOTSTRAP]);
    assert_eq!(c.tier.chunk_size, ByteSize::mib(1));
    assert!(c.tier.compress_chunks);

    let r = load("[restore]\nreplication_factor = 3\n")
        .unwrap()
        .restore
        .unwrap();
    assert_eq!(r.topic_replication(), 3);
    for bad in ["0", "-1"] {
        let found = issues(&format!("[restore]\nreplication_factor = {bad}\n"));
        assert!(
            found
                .iter()
                .any(|i| i.key == "restore.replication_factor"
                    && i.message.contains("broker's default")),
            "{bad}: {found:#?}"
        );
    }

    let found = issues("[restore]\nfrom = \"yesterday\"\n[tier]\nlisten = \"0.0.0.0:9190\"\n");
    assert!(found.iter().any(|i| i.key == "restore.from"), "{found:#?}");
    assert!(
        found
            .iter()
            .any(|i| i.key == "tier.listen" && i.message.contains("loopback")),
        "{found:#?}"
    );
}

#[test]
fn tier_access_settings_validate() {
    let c = load(
        r#"
[tier]
listen = "0.0.0.0:9190"
tls_cert_file = "/etc/strata/tier.pem"
tls_key_file = "/etc/strata/tier.key"
secret_file = "/etc/strata/tier.secret"
log_dirs = ["/var/lib/kafka/data", "/data2/kafka"]
socket_dir = "/run/strata-tier"
handoff = false
max_requests = 8
"#,
    )
    .unwrap();
    let t = &c.tier;
    assert_eq!(
        t.tls.as_ref().unwrap().key_file,
        PathBuf::from("/etc/strata/tier.key")
    );
    assert_eq!(
        t.secret_file,
        Some(PathBuf::from("/etc/strata/tier.secret"))
    );
    assert_eq!(t.log_dirs.len(), 2);
    assert_eq!(t.socket_dir, Some(PathBuf::from("/run/strata-tier")));
    assert_eq!(t.max_requests, 8);
    assert!(!t.handoff);
    let report = super::render_report("f.toml", &c, None);
    assert!(
        report.contains("/run/strata-tier/tier.sock (cache file handoff off)"),
        "{report}"
    );

    let found = issues(
        "[tier]\ntls_cert_file = \"/c.pem\"\nlog_dirs = \"relative/dir\"\nsocket_dir = \"run\"\nmax_requests = 0\n",
    );
    for key in [
        "tier.tls_key_file",
        "tier.log_dirs",
        "tier.socket_dir",
        "tier.max_requests",
    ] {
        assert!(found.iter().any(|i| i.key == key), "{key}: {found:#?}");
    }
}

#[test]
fn tier_cache_dir_is_resolved_and_normalised() {
    let cwd = std::env::current_dir().unwrap();
    let c = load("[tier]\ncache_dir = \"cache/./chunks/\"\n").unwrap();
    assert_eq!(c.tier.cache_dir, Some(cwd.join("cache/chunks")));
    let report = super::render_report("f.toml", &c, None);
    assert!(
        report.contains(&format!("in {}", cwd.join("cache/chunks").display())),
        "the report names the resolved directory: {report}"
    );
    // Compared as text: `Path`'s own comparison skips `.` components and trailing slashes,
    // the bridge's does not.
    let c = load("[tier]\ncache_dir = \"/var/cache/./strata\"\n").unwrap();
    let dir = c.tier.cache_dir.unwrap();
    assert_eq!(dir.to_str(), Some("/var/cache/strata"));
    let found = issues("[tier]\ncache_dir = \"/var/cache/strata/../other\"\n");
    assert!(
        found
            .iter()
            .any(|i| i.key == "tier.cache_dir" && i.message.contains("\"..\"")),
        "{found:#?}"
    );
}

#[test]
fn known_key_lists_match_the_raw_structs() {
    use super::validate::*;
    let tables: &[(&str, &[&str])] = &[
        ("kafka", KAFKA_KEYS),
        ("store", STORE_KEYS),
        ("limits", LIMITS_KEYS),
        ("telemetry", TELEMETRY_KEYS),
        ("tier", TIER_KEYS),
    ];
    for (table, keys) in tables {
        let body: String = keys.iter().map(|k| format!("{k} = 1\n")).collect();
        // Values have the wrong types on purpose: a type error proves serde knows the key,
        // while an "unknown key" issue would prove the list wrong.
        let err = load(&format!("[{table}]\n{body}")).unwrap_err().to_string();
        assert!(!err.contains("unknown key"), "{table}: {err}");
    }
}

#[test]
fn text_only_and_regex_only_keys_are_refused_elsewhere() {
    let found = issues("[[tasks]]\nname = \"js-task\"\ntopics = [\"a\"]\nformat = \"jsonl\"\nstore_key = true\ntopic_refresh_secs = 5\n");
    assert!(
        found.iter().any(|i| i
            .message
            .contains("store_key and key_separator apply to format = \"text\" only")),
        "{found:#?}"
    );
    assert!(
        found
            .iter()
            .any(|i| i.key == "tasks[0].topic_refresh_secs"
                && i.message.contains("topic_regex only")),
        "{found:#?}"
    );
    assert_eq!(found.len(), 2, "{found:#?}");
}

#[test]
fn regex_is_shown_as_written() {
    let c = load("[[tasks]]\nname = \"rx-task\"\ntopic_regex = \"audit\\\\..+\"\n").unwrap();
    assert_eq!(c.tasks[0].topics.to_string(), "/audit\\..+/");
    assert!(c.tasks[0].topics.matches("audit.x") && !c.tasks[0].topics.matches("xaudit.x"));
}

#[test]
fn example_toml_lists_every_key_and_the_refused_properties() {
    use super::validate::*;
    use std::collections::{BTreeMap, BTreeSet};
    const EXAMPLE: &str = include_str!("../../config/example.toml");
    const MARKER: &str = "# refused-properties:";

    // Sections and their `key =` lines, commented out or not: "# [restore]" opens a section
    // like "[restore]" does. Every [[tasks]] adds to one "tasks" section.
    let mut sections: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current = String::new();
    let mut refused = None;
    for line in EXAMPLE.lines() {
        if let Some(list) = line.strip_prefix(MARKER) {
            assert!(refused.is_none(), "two {MARKER:?} lines in example.toml");
            refused = Some(list.to_string());
            continue;
        }
        let text = line.trim_start_matches('#').trim();
        let header = text
            .strip_prefix("[[")
            .and_then(|t| t.strip_suffix("]]"))
            .or_else(|| text.strip_prefix('[').and_then(|t| t.strip_suffix(']')));
        if let Some(name) = header.filter(|n| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
        }) {
            current = name.to_string();
            sections.entry(current.clone()).or_default();
            continue;
        }
        if let Some((key, _)) = text.split_once(" = ") {
            let is_key = !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            if is_key && !current.is_empty() {
                sections
                    .entry(current.clone())
                    .or_default()
                    .insert(key.to_string());
            }
        }
    }

    let task_keys = task_keys();
    let tables: &[(&str, &[&str])] = &[
        ("kafka", KAFKA_KEYS),
        ("store", STORE_KEYS),
        ("limits", LIMITS_KEYS),
        ("telemetry", TELEMETRY_KEYS),
        ("tasks", &task_keys),
        ("tasks.cdc", CDC_KEYS),
        ("tasks.iceberg", ICEBERG_KEYS),
        ("restore", RESTORE_KEYS),
        ("tier", TIER_KEYS),
    ];
    let mut problems = Vec::new();
    for top in TOP_KEYS {
        if !sections.contains_key(*top) {
            problems.push(format!("no [{top}] section"));
        }
    }
    for (table, keys) in tables {
        let found = sections.get(*table).cloned().unwrap_or_default();
        for key in *keys {
            // A key whose value is a table ([kafka.properties], [restore.kafka]) has a header.
            if !found.contains(*key) && !sections.contains_key(&format!("{table}.{key}")) {
                problems.push(format!("{table}.{key}: no `{key} =` line in [{table}]"));
            }
        }
        for key in &found {
            if !keys.contains(&key.as_str()) {
                problems.push(format!("{table}.{key}: not a key strata knows"));
            }
        }
    }
    // [restore.kafka] takes the keys of [kafka].
    for key in sections.get("restore.kafka").into_iter().flatten() {
        if !KAFKA_KEYS.contains(&key.as_str()) {
            problems.push(format!("restore.kafka.{key}: not a key strata knows"));
        }
    }
    assert!(
        problems.is_empty(),
        "config/example.toml:\n  {}",
        problems.join("\n  ")
    );

    let written: Vec<&str> = refused
        .as_deref()
        .unwrap_or_else(|| panic!("config/example.toml has no {MARKER:?} line"))
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    let written_set: BTreeSet<&str> = written.iter().copied().collect();
    assert_eq!(
        written.len(),
        written_set.len(),
        "a property is listed twice"
    );
    let owned: BTreeSet<&str> = OWNED_PROPERTIES.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        written_set, owned,
        "the {MARKER:?} line of config/example.toml differs from the properties strata refuses"
    );
}

// ------------------------------------------------------------------------------------------
// Replicate tasks.

fn replicate(extra: &str, peer_extra: &str) -> String {
    format!(
        "[[tasks]]\ntype = \"replicate\"\nname = \"mirror\"\nlocal_alias = \"local\"\ntopics = [\"orders\"]\n{extra}\n[tasks.peer]\nalias = \"east\"\nbootstrap_servers = [\"peer:9094\"]\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nusername = \"strata\"\npassword = \"${{KAFKA_PASSWORD}}\"\n{peer_extra}"
    )
}

fn has(found: &[Issue], key: &str, words: &str) -> bool {
    found
        .iter()
        .any(|i| i.key == key && i.message.contains(words))
}

#[test]
fn a_replicate_task_parses_with_mirrormaker_defaults() {
    let cfg = load(&replicate("", "")).unwrap();
    assert!(cfg.tasks.is_empty());
    let t = &cfg.replicate[0];
    assert_eq!(t.name.as_str(), "mirror");
    assert_eq!(t.direction, Direction::Pull);
    assert_eq!(
        (t.local_alias.as_str(), t.peer_alias.as_str()),
        ("local", "east")
    );
    assert_eq!(t.pipelines, 2);
    assert_eq!(t.naming, TargetNaming::Identity);
    assert!(t.exactly_once && !t.source_header && t.group_sync.is_none());
    assert_eq!(t.start_offset, StartOffset::Earliest);
    assert_eq!(t.compression, ProduceCompression::None);
    assert_eq!(t.peer.bootstrap_servers, vec!["peer:9094".to_string()]);
    // The peer password is a secret: never in the config's debug output.
    assert!(!format!("{cfg:?}").contains("hunter2-kafka"));
}

#[test]
fn replicate_options_parse_into_types() {
    let cfg = load(&replicate(
        "direction = \"both\"\nrename_topics = true\ntasks = 4\nexactly_once = false\ncompression = \"zstd\"\nstart_offset = \"latest\"\nsync_group_offsets = true\ngroups_regex = \"app-.*\"\nsync_group_offsets_interval_secs = 30\nreplication_factor = 3\n",
        "",
    ))
    .unwrap();
    let t = &cfg.replicate[0];
    assert_eq!(t.direction, Direction::Both);
    assert_eq!(t.naming, TargetNaming::Rename);
    assert_eq!(t.pipelines, 4);
    assert!(!t.exactly_once);
    assert_eq!(t.compression, ProduceCompression::Zstd);
    assert_eq!(t.start_offset, StartOffset::Latest);
    assert_eq!(t.replication_factor, Some(3));
    let g = t.group_sync.as_ref().unwrap();
    assert_eq!(g.interval, Duration::from_secs(30));
    assert!(g.groups.is_match("app-1") && !g.groups.is_match("other-app-1"));
}

#[test]
fn aliases_are_short_names_and_differ() {
    for bad in ["", "a.b", "with space", "abcdefghijklmnopqrstu"] {
        let found =
            issues(&replicate("", "").replace("alias = \"east\"", &format!("alias = {bad:?}")));
        assert!(
            found.iter().any(|i| i.key == "tasks[0].peer.alias"),
            "{bad:?}: {found:?}"
        );
    }
    assert!(load(&replicate("", "").replace("\"east\"", "\"East_2-b\"")).is_ok());
    let found = issues(&replicate("", "").replace("\"east\"", "\"local\""));
    assert!(
        has(&found, "tasks[0].peer.alias", "different aliases"),
        "{found:?}"
    );
    let found = issues(&replicate("", "").replace("local_alias = \"local\"\n", ""));
    assert!(
        has(&found, "tasks[0].local_alias", "is missing"),
        "{found:?}"
    );
}

#[test]
fn both_ways_needs_rename_or_the_source_header() {
    let found = issues(&replicate("direction = \"both\"\n", ""));
    assert!(
        has(&found, "tasks[0].direction", "back and forth"),
        "{found:?}"
    );
    assert!(load(&replicate(
        "direction = \"both\"\nsource_header = true\n",
        ""
    ))
    .is_ok());
    assert!(load(&replicate(
        "direction = \"both\"\nrename_topics = true\n",
        ""
    ))
    .is_ok());
    let found = issues(&replicate("direction = \"sideways\"\n", ""));
    assert!(has(&found, "tasks[0].direction", "\"pull\""), "{found:?}");
}

#[test]
fn a_topic_map_is_bounded_valid_and_not_with_rename() {
    let found = issues(&replicate(
        "rename_topics = true\n[tasks.topic_map]\norders = \"orders-copy\"\n",
        "",
    ));
    assert!(has(&found, "tasks[0].topic_map", "both set"), "{found:?}");
    let many: String = (0..21).map(|i| format!("t{i} = \"c{i}\"\n")).collect();
    let found = issues(&replicate(&format!("[tasks.topic_map]\n{many}"), ""));
    assert!(has(&found, "tasks[0].topic_map", "at most 20"), "{found:?}");
    let found = issues(&replicate(
        "[tasks.topic_map]\norders = \"bad name!\"\n",
        "",
    ));
    assert!(
        has(&found, "tasks[0].topic_map", "not a valid Kafka topic name"),
        "{found:?}"
    );
    let cfg = load(&replicate(
        "[tasks.topic_map]\norders = \"orders-copy\"\n",
        "",
    ))
    .unwrap();
    assert!(
        matches!(&cfg.replicate[0].naming, TargetNaming::Map(m) if m.get("orders").map(String::as_str) == Some("orders-copy"))
    );
}

#[test]
fn replicate_topics_are_bounded_and_never_internal() {
    for internal in ["__consumer_offsets", "mm2-offset-syncs.east.internal"] {
        let found = issues(&replicate("", "").replace("[\"orders\"]", &format!("[{internal:?}]")));
        assert!(
            has(&found, "tasks[0].topics", "never replicated"),
            "{internal}: {found:?}"
        );
    }
    let list: Vec<String> = (0..21).map(|i| format!("\"t{i}\"")).collect();
    let found =
        issues(&replicate("", "").replace("[\"orders\"]", &format!("[{}]", list.join(","))));
    assert!(has(&found, "tasks[0].topics", "at most 20"), "{found:?}");
    let found = issues(&replicate("topic_regex = \"ord.*\"\n", ""));
    assert!(has(&found, "tasks[0].topics", "both set"), "{found:?}");
}

#[test]
fn replicate_numbers_are_bounded() {
    for (line, key) in [
        ("tasks = 0\n", "tasks[0].tasks"),
        ("tasks = 65\n", "tasks[0].tasks"),
        ("replication_factor = 0\n", "tasks[0].replication_factor"),
        ("topic_refresh_secs = 0\n", "tasks[0].topic_refresh_secs"),
        (
            "sync_group_offsets = true\nsync_group_offsets_interval_secs = 0\n",
            "tasks[0].sync_group_offsets_interval_secs",
        ),
        ("compression = \"brotli\"\n", "tasks[0].compression"),
        ("start_offset = \"middle\"\n", "tasks[0].start_offset"),
        (
            "sync_group_offsets = true\ngroups_regex = \"(\"\n",
            "tasks[0].groups_regex",
        ),
        ("groups_regex = \"app-.*\"\n", "tasks[0].groups_regex"),
    ] {
        let found = issues(&replicate(line, ""));
        assert!(found.iter().any(|i| i.key == key), "{line}: {found:?}");
    }
}

#[test]
fn task_types_keep_their_own_keys() {
    let found = issues(&replicate("format = \"jsonl\"\n", ""));
    assert!(
        has(&found, "tasks[0].format", "type = \"dump\""),
        "{found:?}"
    );
    let found = issues("[[tasks]]\nname = \"dumper\"\ntopics = [\"a\"]\ndirection = \"pull\"\n");
    assert!(
        has(&found, "tasks[0].direction", "type = \"replicate\""),
        "{found:?}"
    );
}

#[test]
fn the_peer_cluster_is_validated_like_the_local_one() {
    let found = issues(&replicate("", "").replace(
        "[tasks.peer]\nalias = \"east\"\nbootstrap_servers = [\"peer:9094\"]\n",
        "[tasks.peer]\nalias = \"east\"\n",
    ));
    assert!(
        has(&found, "tasks[0].peer.bootstrap_servers", "is missing"),
        "{found:?}"
    );
    let found = issues(&replicate("", "").replace("${KAFKA_PASSWORD}", "${PEER_PASSWORD}"));
    assert!(
        found
            .iter()
            .any(|i| i.key == "tasks[0].peer.password" && i.message.contains("PEER_PASSWORD")),
        "{found:?}"
    );
    let found = issues(&replicate("", "").replace("SCRAM-SHA-512", "GSSAPI"));
    assert!(
        found
            .iter()
            .any(|i| i.key == "tasks[0].peer.sasl_mechanism"),
        "{found:?}"
    );
    let found = issues(&replicate("", "").replace("[tasks.peer]", "[tasks.not_peer]"));
    assert!(
        found.iter().any(|i| i.key.starts_with("tasks[0]")),
        "{found:?}"
    );
}

#[test]
fn replicate_and_dump_tasks_share_names_and_the_task_limit() {
    let dump = "[[tasks]]\nname = \"mirror\"\ntopics = [\"a\"]\n";
    let found = issues(&format!("{dump}{}", replicate("", "")));
    assert!(
        has(&found, "tasks", "two tasks are named \"mirror\""),
        "{found:?}"
    );
    let many: String = (0..18)
        .map(|i| format!("[[tasks]]\nname = \"d{i}\"\ntopics = [\"a\"]\n"))
        .collect();
    let found = issues(&format!("{many}{}", replicate("", "")));
    assert!(
        found
            .iter()
            .any(|i| i.key == "tasks" && i.message.contains("at most 18")),
        "{found:?}"
    );
}

#[test]
fn cdc_options_parse_into_types_and_refuse_what_cannot_work() {
    let base = "[[tasks]]\nname = \"cdc-t\"\ntopics = [\"c\"]\n";
    let c = load(&format!(
        "{base}format = \"parquet\"\n[tasks.cdc]\ntime_zone = \"Europe/Berlin\"\nrepeat_window = 5\non_malformed = \"fail\"\ntypes = {{ \"shop.orders\" = {{ id = \"bigint\", amount = \"decimal(12,2)\" }} }}\n"
    ))
    .unwrap();
    let cdc = c.tasks[0].cdc.clone().unwrap();
    assert_eq!(cdc.time_zone, chrono_tz::Europe::Berlin);
    assert_eq!(
        (cdc.repeat_window, cdc.on_malformed),
        (5, OnMalformed::Fail)
    );
    assert_eq!(
        cdc.types["shop.orders"]["amount"],
        crate::cdc::ColumnType::Decimal {
            precision: 12,
            scale: 2
        }
    );
    let keys = |toml: &str| -> Vec<String> {
        issues(&format!("{base}{toml}"))
            .into_iter()
            .map(|i| format!("{}: {}", i.key, i.message))
            .collect()
    };
    let k = keys("format = \"jsonl\"\n[tasks.cdc]\n");
    assert!(
        k[0].starts_with("tasks[0].cdc: CDC tables are written as Parquet"),
        "{k:?}"
    );
    let k = keys("format = \"parquet\"\ntime_source = \"dump\"\n[tasks.cdc]\n");
    assert!(k[0].starts_with("tasks[0].time_source:"), "{k:?}");
    let k = keys("format = \"parquet\"\n[tasks.cdc]\non_malformed = \"drop\"\nwindow = 3\ntypes = { t = { a = \"float\" } }\n");
    assert_eq!(k.len(), 3, "{k:?}");
    assert!(
        k.iter().any(|m| m.starts_with("tasks[0].cdc.window:")),
        "{k:?}"
    );
    assert!(
        k.iter()
            .any(|m| m.starts_with("tasks[0].cdc.on_malformed:")),
        "{k:?}"
    );
    assert!(
        k.iter()
            .any(|m| m.starts_with("tasks[0].cdc.types.t.a: unknown column type \"float\"")),
        "{k:?}"
    );
}

#[test]
fn a_replicate_tasks_unknown_keys_get_a_did_you_mean() {
    let found = issues(&replicate("directon = \"push\"\n", "alais = \"west\"\n"));
    assert!(
        has(
            &found,
            "tasks[0].directon",
            "unknown key; did you mean \"direction\"?"
        ),
        "{found:#?}"
    );
    assert!(
        has(
            &found,
            "tasks[0].peer.alais",
            "unknown key; did you mean \"alias\"?"
        ),
        "{found:#?}"
    );
    assert_eq!(found.len(), 2, "{found:#?}");
}

#[test]
fn an_unknown_task_type_is_reported_alone() {
    let found = issues(&replicate("", "").replace("type = \"replicate\"", "type = \"mirror\""));
    assert_eq!(
        found,
        vec![Issue {
            key: "tasks[0].type".into(),
            message: "\"mirror\" is not a task type; use \"dump\" or \"replicate\"".into(),
        }]
    );
}

#[test]
fn type_errors_in_tasks_give_the_line() {
    for (text, line) in [
        (
            "[[tasks]]\nname = \"dumper\"\ntopics = [\"a\"]\ndump_interval_secs = \"soon\"\n",
            "line 4",
        ),
        (
            "[[tasks]]\nname = \"dumper\"\ntopics = [\"a\"]\ntype = 7\n",
            "line 4",
        ),
        (&replicate("tasks = \"two\"\n", "") as &str, "line 6"),
    ] {
        let err = load(text).unwrap_err().to_string();
        assert!(
            err.contains(line) && err.contains("invalid type"),
            "{line}: {err}"
        );
    }
}

#[test]
fn every_declared_key_is_read_by_its_struct() {
    use super::raw::{RawPeer, TASK_TYPES};
    use super::validate::*;
    // No key takes both a date and a number: each key alone with one of them must fail to
    // parse. A key its struct does not read (a serde rename) would land among the unknown
    // keys, be taken as known (it is listed), and pass with either.
    let peer_keys = [RawPeer::KEYS, KAFKA_KEYS].concat();
    let mut tables: Vec<(String, &[&str])> = vec![
        (String::new(), TOP_KEYS),
        ("[kafka]\n".into(), KAFKA_KEYS),
        ("[store]\n".into(), STORE_KEYS),
        ("[limits]\n".into(), LIMITS_KEYS),
        ("[telemetry]\n".into(), TELEMETRY_KEYS),
        ("[restore]\n".into(), RESTORE_KEYS),
        ("[restore.kafka]\n".into(), KAFKA_KEYS),
        ("[tier]\n".into(), TIER_KEYS),
        ("[[tasks]]\n[tasks.cdc]\n".into(), CDC_KEYS),
        ("[[tasks]]\n[tasks.iceberg]\n".into(), ICEBERG_KEYS),
        (
            "[[tasks]]\ntype = \"replicate\"\n[tasks.peer]\n".into(),
            &peer_keys,
        ),
        ("[[tasks]]\n".into(), &["type"]),
    ];
    for (kind, keys) in TASK_TYPES {
        tables.push((format!("[[tasks]]\ntype = \"{kind}\"\n"), keys));
    }
    for (header, keys) in &tables {
        assert!(!keys.is_empty(), "{header}");
        for key in *keys {
            let refused = ["1979-05-27T07:32:00Z", "1"].map(|value| {
                let text = format!("{header}{key} = {value}\n");
                matches!(load(&text), Err(ConfigError::Syntax { .. }))
            });
            assert!(refused.contains(&true), "{header}{key}: read nowhere");
        }
    }
}

#[test]
fn a_dump_tasks_state_snapshots_are_configured_and_checked() {
    let c = load("[[tasks]]\nname = \"nightly\"\ntopics = [\"t\"]\n").unwrap();
    let s = &c.tasks[0].state;
    assert_eq!(s.mode, StateMode::BestEffort);
    assert_eq!(
        s.interval,
        Duration::from_secs(defaults::STATE_INTERVAL_SECS)
    );
    assert!(s.groups.is_none());
    let c = load(
        "[[tasks]]\nname = \"nightly\"\ntopics = [\"t\"]\nstate = \"required\"\nstate_interval_secs = 120\ngroups_regex = 'app-.*'\n",
    )
    .unwrap();
    let s = &c.tasks[0].state;
    assert_eq!(
        (s.mode, s.interval),
        (StateMode::Required, Duration::from_secs(120))
    );
    let r = s.groups.as_ref().unwrap();
    assert!(
        r.is_match("app-1") && !r.is_match("my-app-1"),
        "whole names"
    );
    let found = issues(
        "[[tasks]]\nname = \"nightly\"\ntopics = [\"t\"]\nstate = \"sometimes\"\nstate_interval_secs = 5\ngroups_regex = '('\n",
    );
    let keys: Vec<&str> = found.iter().map(|i| i.key.as_str()).collect();
    for key in ["tasks[0].state", "tasks[0].state_interval_secs"] {
        assert!(keys.contains(&key), "{key}: {found:#?}");
    }
}

#[test]
fn secrets_come_from_files_named_in_the_report_by_path_only() {
    let dir = tempfile::tempdir().unwrap();
    let pw = dir.path().join("kafka-password");
    std::fs::write(&pw, "from-a-file-pw\n").unwrap();
    let text = format!(
        "[kafka]\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"PLAIN\"\nusername = \"strata\"\npassword = \"${{file:{}}}\"\n",
        pw.display()
    );
    let c = load(&text).unwrap();
    let Some(Sasl::Password { password, .. }) = c.kafka.sasl.as_ref() else {
        panic!("a password login: {:?}", c.kafka.sasl);
    };
    assert_eq!(password.expose(), "from-a-file-pw");
    let report = render_report("test.toml", &c, None);
    assert!(
        report.contains(&format!("password <set, from file {}>", pw.display())),
        "{report}"
    );
    assert!(!report.contains("from-a-file-pw"), "{report}");
    assert!(!format!("{c:?}").contains("from-a-file-pw"));

    // A file that cannot be read: an issue naming the key and the path, not the content.
    let missing = dir.path().join("nope");
    let found = issues(&format!(
        "[store]\naccess_key = \"${{S3_ACCESS_KEY}}\"\nsecret_key = \"${{file:{}}}\"\n",
        missing.display()
    ));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].key, "store.secret_key");
    assert!(
        found[0].message.contains(&missing.display().to_string()),
        "{found:#?}"
    );
}

#[test]
fn exclude_topics_leave_out_what_topics_or_topic_regex_select() {
    let c = load(
        "[[tasks]]\nname = \"orders-but-tmp\"\ntopic_regex = 'orders\\..+'\nexclude_topics = ['.*\\.tmp', 'orders\\.test-.*']\n",
    )
    .unwrap();
    let t = &c.tasks[0].topics;
    assert!(t.matches("orders.eu"));
    for out in ["orders.eu.tmp", "orders.test-1", "payments.eu"] {
        assert!(!t.matches(out), "{out}");
    }
    // Whole names: an exclusion matching part of a name leaves it in.
    assert!(t.matches("orders.tmpfiles"));
    assert_eq!(t.listed(), None);
    assert_eq!(
        t.to_string(),
        "/orders\\..+/ except /.*\\.tmp/, /orders\\.test-.*/"
    );
    let report = render_report("test.toml", &c, None);
    assert!(
        report
            .contains("orders-but-tmp: topics /orders\\..+/ except /.*\\.tmp/, /orders\\.test-.*/"),
        "{report}"
    );

    // A list minus its exclusions.
    let c = load("[[tasks]]\nname = \"listed\"\ntopics = [\"a\", \"a.tmp\", \"b\"]\nexclude_topics = ['.*\\.tmp']\n").unwrap();
    assert_eq!(
        c.tasks[0].topics.listed(),
        Some(vec!["a".to_string(), "b".to_string()])
    );

    // Replicate tasks take them too.
    let c = load(&replicate("exclude_topics = ['.*\\.tmp']", "")).unwrap();
    assert!(c.replicate[0].topics.matches("orders"));
    assert_eq!(c.replicate[0].topics.exclude.len(), 1);
    let report = render_report("test.toml", &c, None);
    assert!(
        report.contains("mirror (replicate pull, local \"local\", peer \"east\" at peer:9094 (SASL_PLAINTEXT)): topics [orders] except /.*\\.tmp/"),
        "{report}"
    );
}

#[test]
fn exclude_topics_that_leave_nothing_or_do_not_compile_are_refused() {
    let found = issues(
        "[[tasks]]\nname = \"nothing\"\ntopics = [\"a.tmp\", \"b.tmp\"]\nexclude_topics = ['.*\\.tmp']\n",
    );
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        has(
            &found,
            "tasks[0].exclude_topics",
            "leaves out every topic of topics (a.tmp, b.tmp)"
        ),
        "{found:#?}"
    );
    let found = issues(&replicate("exclude_topics = ['orders']", ""));
    assert!(
        has(&found, "tasks[0].exclude_topics", "leaves out every topic"),
        "{found:#?}"
    );
    let found =
        issues("[[tasks]]\nname = \"badre\"\ntopic_regex = 'a.*'\nexclude_topics = ['ok', 'x(']\n");
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        has(
            &found,
            "tasks[0].exclude_topics",
            "\"x(\" is not a valid regular expression"
        ),
        "{found:#?}"
    );
    // Two tasks writing the same place overlap only on topics both still read.
    let apart = "[[tasks]]\nname = \"one-a\"\ntopics = [\"a\", \"b\"]\nexclude_topics = ['b']\n[[tasks]]\nname = \"two-b\"\ntopics = [\"a\", \"b\"]\nexclude_topics = ['a']\n";
    assert!(load(apart).is_ok());
}

/// The keys of each SASL login kind: required ones named, another kind's refused, GSSAPI
/// refused with the reason, secrets never in messages.
#[test]
fn sasl_logins_of_each_kind_are_checked() {
    let oauth = issues(
        "[kafka]\nsecurity_protocol = \"SASL_SSL\"\nsasl_mechanism = \"oauthbearer\"\noauth_token_endpoint = \"https://u:p@idp/token\"\npassword = \"pw-123\"\noauth_scope = \" \"\noauth_extensions = { \"bad-name\" = \"x\", auth = \"y\", ok = \"a,b\" }\n",
    );
    let want: &[(&str, &str)] = &[
        ("kafka.password", "is only for sasl_mechanism PLAIN"),
        ("kafka.oauth_token_endpoint", "holds user info"),
        (
            "kafka.oauth_client_id",
            "is required with sasl_mechanism = \"OAUTHBEARER\"",
        ),
        ("kafka.oauth_client_secret", "${KAFKA_OAUTH_CLIENT_SECRET}"),
        ("kafka.oauth_scope", "is empty"),
        ("kafka.oauth_extensions.bad-name", "letters only"),
        ("kafka.oauth_extensions.auth", "reserved"),
        ("kafka.oauth_extensions.ok", "comma"),
    ];
    for (key, fragment) in want {
        assert!(
            oauth
                .iter()
                .any(|i| i.key == *key && i.message.contains(fragment)),
            "missing {key}: ...{fragment}... in {oauth:#?}"
        );
    }
    assert!(!format!("{oauth:?}").contains("pw-123"));

    let msk = issues(
        "[kafka]\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"AWS_MSK_IAM\"\naws_region = \"EU West\"\naws_role_arn = \"kafka-archiver\"\noauth_client_id = \"x\"\n",
    );
    for (key, fragment) in [
        ("kafka.security_protocol", "needs \"SASL_SSL\""),
        ("kafka.aws_region", "is not an AWS region name"),
        ("kafka.aws_role_arn", "is not an IAM role ARN"),
        (
            "kafka.oauth_client_id",
            "is only for sasl_mechanism OAUTHBEARER",
        ),
    ] {
        assert!(
            msk.iter()
                .any(|i| i.key == key && i.message.contains(fragment)),
            "missing {key}: ...{fragment}... in {msk:#?}"
        );
    }

    let gss =
        issues("[kafka]\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"GSSAPI\"\n");
    assert!(
        gss.iter().any(|i| i.key == "kafka.sasl_mechanism"
            && i.message.contains("GSSAPI (Kerberos) is not supported")),
        "{gss:#?}"
    );
    let plain = issues("[kafka]\nsecurity_protocol = \"PLAINTEXT\"\noauth_client_id = \"x\"\naws_region = \"eu-west-1\"\n");
    for key in ["kafka.oauth_client_id", "kafka.aws_region"] {
        assert!(
            plain
                .iter()
                .any(|i| i.key == key && i.message.contains("use SASL_PLAINTEXT or SASL_SSL")),
            "{plain:#?}"
        );
    }

    let c = load(
        "[kafka]\nsecurity_protocol = \"SASL_SSL\"\nsasl_mechanism = \"OAUTHBEARER\"\noauth_token_endpoint = \"https://idp/token\"\noauth_client_id = \"strata\"\noauth_client_secret = \"${KAFKA_PASSWORD}\"\n",
    )
    .unwrap();
    assert_eq!(
        c.kafka.sasl.as_ref().unwrap().mechanism(),
        SaslMechanism::OAuthBearer
    );
    let report = report::render_report("t", &c, None);
    assert!(
        report.contains("as client \"strata\" of https://idp/token, client secret <set, from ${KAFKA_PASSWORD}>"),
        "{report}"
    );
    assert!(!report.contains("hunter2-kafka"), "{report}");
}

#[test]
fn iceberg_tasks_validate() {
    let head = "[store]\nurl = \"s3://bkt/p\"\n[[tasks]]\nname = \"lake\"\ntopics = [\"t\"]\ndirectory = \"lake\"\n";
    let c = load(&format!(
        "{head}format = \"iceberg\"\ncompression = \"zstd\"\n[tasks.iceberg]\ncatalog_file = \"/var/lib/strata/c.db\"\n"
    ))
    .unwrap();
    let t = &c.tasks[0];
    assert_eq!(t.format.kind, FormatKind::Parquet, "data files are Parquet");
    assert_eq!(t.format.compression, Compression::Zstd);
    let i = t.iceberg.as_ref().unwrap();
    assert_eq!(
        i.catalog,
        IcebergCatalog::Sql {
            file: "/var/lib/strata/c.db".into()
        }
    );
    assert_eq!(
        (i.catalog_name.as_str(), i.namespace.as_str()),
        ("strata", "kafka")
    );
    assert_eq!(i.warehouse, None);
    let report = render_report("test.toml", &c, None);
    assert!(
        report.contains("Iceberg tables kafka.<topic> (embedded SQL catalog /var/lib/strata/c.db"),
        "{report}"
    );
    assert!(report.contains("warehouse s3://bkt/p/lake"), "{report}");

    // A REST catalog's token is a secret: never shown.
    let c = load(&format!(
        "{head}format = \"iceberg\"\n[tasks.iceberg]\ncatalog = \"rest\"\nuri = \"https://cat.example\"\ntoken = \"${{S3_SECRET_KEY}}\"\nwarehouse = \"s3://bkt/p/w\"\n"
    ))
    .unwrap();
    let report = render_report("test.toml", &c, None);
    assert!(!report.contains("TOPSECRETs3key") && !format!("{c:?}").contains("TOPSECRETs3key"));
    assert!(
        report.contains("token <set, from ${S3_SECRET_KEY}>"),
        "{report}"
    );

    let keys = |text: &str| -> Vec<String> {
        issues(&format!("{head}{text}"))
            .into_iter()
            .map(|i| format!("{}: {}", i.key, i.message))
            .collect()
    };
    let k = keys("format = \"iceberg\"\n");
    assert!(
        k[0].starts_with("tasks[0].iceberg.catalog_file: is required"),
        "{k:?}"
    );
    let k = keys("format = \"iceberg\"\n[tasks.iceberg]\ncatalog_file = \"rel.db\"\n");
    assert!(k[0].contains("not an absolute path"), "{k:?}");
    let k = keys("format = \"parquet\"\n[tasks.iceberg]\ncatalog_file = \"/c.db\"\n");
    assert!(
        k[0].contains("applies to format = \"iceberg\" tasks"),
        "{k:?}"
    );
    let k = keys("format = \"iceberg\"\ntime_directory = \"yyyy\"\n[tasks.iceberg]\ncatalog = \"rest\"\nuri = \"ftp://x\"\ncatalog_file = \"/c.db\"\nwarehouse = \"s3://other/w\"\nnamespace = \"a.b\"\n");
    let all = k.join("\n");
    for want in [
        "tasks[0].time_directory: does not apply",
        "tasks[0].iceberg.catalog_file: applies to catalog = \"sql\" only",
        "tasks[0].iceberg.uri: must start with http:// or https://",
        "tasks[0].iceberg.warehouse: must lie inside the task's store (s3://bkt/p)",
        "tasks[0].iceberg.namespace: \"a.b\" must be",
    ] {
        assert!(all.contains(want), "{want:?} in\n{all}");
    }
    // A CDC task writes a table per source table.
    let c = load(&format!(
        "{head}format = \"iceberg\"\n[tasks.iceberg]\ncatalog_file = \"/c.db\"\n[tasks.cdc]\n"
    ))
    .unwrap();
    assert!(c.tasks[0].cdc.is_some() && c.tasks[0].iceberg.is_some());
    let k =
        keys("format = \"iceberg\"\n[tasks.iceberg]\ncatalog_file = \"/c.db\"\ncatalog_fil = 1\n");
    assert!(k[0].contains("did you mean \"catalog_file\""), "{k:?}");
}
