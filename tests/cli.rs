//! The `strata` binary as users meet it: `validate`, and the errors of bad input (config,
//! unreachable store or Kafka), each with a clear message and the right exit code
//! (2 for configuration, 1 for a failure at run time).

mod common;

use common::*;
use std::process::{Command, Output};

fn strata(args: &[&str], cfg_text: &str) -> (Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, cfg_text).unwrap();
    let mut cmd = Command::new(strata_bin());
    cmd.args(args)
        .arg("--config")
        .arg(&path)
        .env("S3_SECRET_KEY", "SeCrEt-do-not-print")
        .env("S3_ACCESS_KEY", "AKIA-do-not-print");
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn validate_prints_meaning_without_secrets() {
    let (out, text) = strata(
        &["validate"],
        "[store]\nurl = \"s3://bkt-one/p\"\naccess_key = \"${S3_ACCESS_KEY}\"\nsecret_key = \"${S3_SECRET_KEY}\"\n[[tasks]]\nname = \"orders\"\ntopics = [\"orders\"]\n",
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("valid") && text.contains("orders: topics [orders]"),
        "{text}"
    );
    assert!(
        !text.contains("SeCrEt-do-not-print") && !text.contains("AKIA-do-not-print"),
        "secret printed:\n{text}"
    );
}

#[test]
fn the_example_config_validates() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/example.toml");
    if !path.exists() {
        panic!("config/example.toml is missing");
    }
    let out = Command::new(strata_bin())
        .args(["validate", "--config"])
        .arg(&path)
        .env("S3_ACCESS_KEY", "a")
        .env("S3_SECRET_KEY", "b")
        .env("KAFKA_PASSWORD", "c")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn configuration_mistakes_exit_2_naming_the_key() {
    let topics: Vec<String> = (0..21).map(|i| format!("\"t{i}\"")).collect();
    let cases = [
        ("[kafka\nbootstrap_servers = 1", "line 1"),
        (
            "[[tasks]]\nname = \"orders\"\ntopics = [\"a\"]\nformt = \"jsonl\"\n",
            "tasks[0].formt: unknown key; did you mean \"format\"?",
        ),
        (
            &format!(
                "[[tasks]]\nname = \"many\"\ntopics = [{}]\n",
                topics.join(",")
            ) as &str,
            "tasks[0].topics: lists 21 topics, at most 20",
        ),
        (
            "[[tasks]]\nname = \"regex\"\ntopic_regex = \"orders([\"\n",
            "tasks[0].topic_regex: \"orders([\" is not a valid regular expression",
        ),
        (
            "[store]\nsecret_key = \"${NOT_SET_ANYWHERE}\"\naccess_key = \"x\"\n",
            "store.secret_key: environment variable NOT_SET_ANYWHERE is not set",
        ),
    ];
    for (cfg, want) in cases {
        for cmd in ["validate", "dump"] {
            let (out, text) = strata(&[cmd], cfg);
            assert_eq!(out.status.code(), Some(2), "{cmd}: {text}");
            assert!(text.contains(want), "{cmd}: expected {want:?} in:\n{text}");
        }
    }
}

#[test]
fn unreachable_store_fails_before_consuming() {
    let cfg = format!(
        "[kafka]\nbootstrap_servers = \"{}\"\n[store]\nurl = \"s3://strata-it/x\"\nendpoint = \"http://127.0.0.1:9\"\nmax_attempts = 1\naccess_key = \"${{S3_ACCESS_KEY}}\"\nsecret_key = \"${{S3_SECRET_KEY}}\"\n[[tasks]]\nname = \"unreach\"\ntopics = [\"t\"]\n",
        bootstrap()
    );
    let (out, text) = strata(&["dump", "--once"], &cfg);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("cannot reach the store at http://127.0.0.1:9"),
        "{text}"
    );
    assert!(!text.contains("SeCrEt-do-not-print"), "{text}");
}

#[test]
fn missing_bucket_fails_naming_it() {
    let cfg = format!(
        "[kafka]\nbootstrap_servers = \"{}\"\n[store]\nurl = \"s3://strata-missing-bucket/x\"\nendpoint = \"{}\"\naccess_key = \"test\"\nsecret_key = \"test\"\n[[tasks]]\nname = \"nobucket\"\ntopics = [\"t\"]\n",
        bootstrap(),
        s3_endpoint()
    );
    let (out, text) = strata(&["dump", "--once"], &cfg);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("bucket \"strata-missing-bucket\" does not exist; create it or set store.create_bucket = true"), "{text}");
}

#[test]
fn unreachable_kafka_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "[kafka]\nbootstrap_servers = \"127.0.0.1:9\"\n[kafka.properties]\n\"socket.connection.setup.timeout.ms\" = 2000\n[store]\nurl = \"file://{}\"\n[[tasks]]\nname = \"nokafka\"\ntopics = [\"t\"]\n",
        dir.path().display()
    );
    let (out, text) = strata(&["dump", "--once"], &cfg);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("cannot reach Kafka at 127.0.0.1:9"), "{text}");
}

/// A free port on loopback for a listener the child process opens.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_endpoint_and_json_logs_of_a_running_dump() {
    let topic = unique("metrics");
    create_topic(&topic, 2).await;
    produce(&sample_records(&topic, 50, 2, base_ts())).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("c.toml");
    let task = unique("metrics-task");
    std::fs::write(
        &cfg,
        format!(
            "{}[telemetry]\nmetrics_listen = \"127.0.0.1:{port}\"\n[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"jsonl\"\n",
            file_toml(&dir.path().join("archive"))
        ),
    )
    .unwrap();
    let log = dir.path().join("dump.log");
    let mut child = Command::new(strata_bin())
        .args(["--log-format", "json", "dump", "--config"])
        .arg(&cfg)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let written = format!("strata_dump_records_written_total{{task=\"{task}\"}} 50");
    let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    eventually(60, "the records-written counter reaches 50", || {
        let (url, written, last) = (url.clone(), written.clone(), last.clone());
        async move {
            // The endpoint is plain HTTP/1.1; a raw request keeps the test free of an HTTP client.
            let got = tokio::task::spawn_blocking(move || http_get(&url))
                .await
                .unwrap()
                .unwrap_or_default();
            let hit = got.contains(&written);
            *last.lock().unwrap() = got;
            hit
        }
    })
    .await;
    let body = last.lock().unwrap().clone();
    for name in [
        "strata_dump_objects_written_total",
        "strata_dump_bytes_written_total",
        "strata_dump_upload_seconds_bucket",
        "strata_dump_buffered_bytes",
    ] {
        assert!(body.contains(name), "{name} missing from /metrics:\n{body}");
    }
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    assert!(child.wait().unwrap().success(), "graceful stop exits 0");
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"));
        assert!(
            v.get("level").is_some() && v.get("timestamp").is_some(),
            "{l}"
        );
    }
    assert!(
        lines.iter().any(|l| l.contains("\"stored\"")),
        "no stored event in:\n{text}"
    );
}

fn http_get(url: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let rest = url.trim_start_matches("http://");
    let (addr, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut s = std::net::TcpStream::connect(addr)?;
    write!(
        s,
        "GET /{path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn tier_secret_writes_a_private_secret_once() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tier.secret");
    let run = || {
        Command::new(strata_bin())
            .arg("tier-secret")
            .arg(&path)
            .output()
            .unwrap()
    };
    let out = run();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let secret = std::fs::read_to_string(&path).unwrap();
    assert_eq!(secret.trim().len(), 64, "32 bytes in hex");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains(secret.trim()),
        "the secret is not printed"
    );
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let again = run();
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("never overwritten"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), secret, "kept");
}
