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
