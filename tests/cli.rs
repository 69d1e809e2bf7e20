//! The `strata` binary as users meet it: `validate`, and the errors of bad input (config,
//! unreachable store or Kafka), each with a clear message and the right exit code
//! (2 for configuration, 1 for a failure at run time).

mod common;
mod release;

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

/// `strata ARGS --config <cfg_text>` in an environment of only `vars` (and `PATH`), as a new
/// user's shell may be: no AWS variables, credentials or config files unless given.
fn strata_in(args: &[&str], cfg_text: &str, vars: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, cfg_text).unwrap();
    let out = Command::new(strata_bin())
        .args(args)
        .arg("--config")
        .arg(&path)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        // No instance metadata: a test must not wait for a service only EC2 has.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("HOME", dir.path())
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

#[test]
fn validate_says_which_region_and_that_no_credentials_were_found() {
    let s3 = "[store]\nurl = \"s3://bkt-region/p\"\n";
    let task = "[[tasks]]\nname = \"orders\"\ntopics = [\"orders\"]\n";
    // AWS_REGION names the region when store.region does not; no credentials anywhere: the
    // stored task parameters cannot be read, and the reason is said in one line.
    let (code, text) = strata_in(
        &["validate"],
        &format!("{s3}{task}"),
        &[("AWS_REGION", "eu-west-1")],
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("(region eu-west-1 (from AWS_REGION), "),
        "{text}"
    );
    for part in [
        "no AWS credentials found; strata tried store.access_key and store.secret_key (not set), AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, profile \"default\" in ",
        "web identity",
        "EC2 instance metadata (off by AWS_EC2_METADATA_DISABLED)",
    ] {
        assert!(text.contains(part), "{part:?} in:\n{text}");
    }
    for wrong in [
        "cannot reach the store",
        "check store.endpoint",
        "DispatchFailure",
        "ConnectorError",
    ] {
        assert!(!text.contains(wrong), "{wrong:?} in:\n{text}");
    }

    // The selected profile of the AWS config file.
    let dir = tempfile::tempdir().unwrap();
    let aws = dir.path().join("aws-config");
    std::fs::write(&aws, "[profile ops]\nregion = ap-southeast-2\n").unwrap();
    let profile = [
        ("AWS_CONFIG_FILE", aws.to_str().unwrap()),
        ("AWS_PROFILE", "ops"),
    ];
    let (code, text) = strata_in(&["validate"], s3, &profile);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("(region ap-southeast-2 (from profile \"ops\" of the AWS config files), "),
        "{text}"
    );

    // store.region wins; a custom endpoint without any region signs for us-east-1.
    let (_, text) = strata_in(
        &["validate"],
        &format!("{s3}region = \"sa-east-1\"\n"),
        &profile,
    );
    assert!(
        text.contains("(region sa-east-1 (store.region), "),
        "{text}"
    );
    let minio = format!("{s3}endpoint = \"http://127.0.0.1:9\"\n");
    let (code, text) = strata_in(&["validate"], &minio, &[]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("(region us-east-1 (default for a custom endpoint"),
        "{text}"
    );

    // Nowhere: a configuration error naming the key and what was tried.
    let (code, text) = strata_in(&["validate"], s3, &[]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("error: store.region is not set, and the AWS environment names no region (tried AWS_REGION, AWS_DEFAULT_REGION, profile \"default\" in "),
        "{text}"
    );
}

#[test]
fn unreachable_kafka_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = format!(
        "[kafka]\nbootstrap_servers = \"127.0.0.1:9\"\n[kafka.properties]\n\"socket.connection.setup.timeout.ms\" = 2000\n[store]\nurl = \"file://{}\"\n[[tasks]]\nname = \"nokafka\"\ntopics = [\"t\"]\n",
        dir.path().display()
    );
    let started = std::time::Instant::now();
    let (out, text) = strata(&["dump", "--once"], &cfg);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("cannot reach Kafka at 127.0.0.1:9"), "{text}");
    // librdkafka repeats its errors many times a second (every client, every broker state
    // change): each kind is logged at most once per 10 s, with how many times it came.
    let mut per_kind: std::collections::HashMap<&str, usize> = Default::default();
    for line in text.lines().filter(|l| l.contains("kafka client error")) {
        let kind = line
            .split("error=")
            .nth(1)
            .and_then(|e| e.split(" reason=").next())
            .unwrap_or(line);
        *per_kind.entry(kind).or_default() += 1;
    }
    let most = 1 + started.elapsed().as_secs() as usize / 10;
    assert!(
        per_kind.values().all(|n| *n <= most),
        "more than {most} lines of one kind: {per_kind:#?}\n{text}"
    );
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
    // An Iceberg task beside it: it must be ready too, and its commits counted.
    let ice = unique("metrics-ice");
    std::fs::write(
        &cfg,
        format!(
            "{}[telemetry]\nmetrics_listen = \"127.0.0.1:{port}\"\n[[tasks]]\nname = \"{task}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"jsonl\"\n[[tasks]]\nname = \"{ice}\"\ntopics = [\"{topic}\"]\ndump_interval_secs = 1\nformat = \"iceberg\"\ndirectory = \"lake\"\n[tasks.iceberg]\ncatalog_file = \"{}\"\n",
            file_toml(&dir.path().join("archive")),
            dir.path().join("catalog.db").display()
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
    let committed = format!("strata_iceberg_commits_total{{task=\"{ice}\"}} ");
    let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    eventually(
        60,
        "the records-written counter reaches 50 and a commit",
        || {
            let (url, last) = (url.clone(), last.clone());
            let (written, committed) = (written.clone(), committed.clone());
            async move {
                // The endpoint is plain HTTP/1.1; a raw request keeps the test free of an HTTP client.
                let got = tokio::task::spawn_blocking(move || http_get(&url))
                    .await
                    .unwrap()
                    .unwrap_or_default();
                let hit = got.contains(&written) && got.contains(&committed);
                *last.lock().unwrap() = got;
                hit
            }
        },
    )
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
    // Every metric has its HELP line, and the build is named.
    for l in body.lines().filter(|l| l.starts_with("# TYPE ")) {
        let name = l.split_whitespace().nth(2).unwrap();
        assert!(
            body.contains(&format!("# HELP {name} ")),
            "{name} has no HELP:\n{body}"
        );
    }
    assert!(
        body.contains(&format!(
            "strata_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{body}"
    );
    // Alive, and ready: the task reached Kafka and its store and runs.
    let healthz = http_get(&format!("http://127.0.0.1:{port}/healthz")).unwrap();
    assert!(
        healthz.starts_with("HTTP/1.1 200") && healthz.ends_with("ok\n"),
        "{healthz}"
    );
    let readyz = http_get(&format!("http://127.0.0.1:{port}/readyz")).unwrap();
    assert!(
        readyz.starts_with("HTTP/1.1 200") && readyz.ends_with("ready\n"),
        "{readyz}"
    );
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

/// Alive but not ready while a task has not reached Kafka: /readyz says which task waits.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_is_503_until_the_tasks_reach_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("c.toml");
    // Nothing listens on port 9: the dump waits for Kafka (up to 30 s) before it fails.
    std::fs::write(
        &cfg,
        format!(
            "[kafka]\nbootstrap_servers = \"127.0.0.1:9\"\n[store]\nurl = \"file://{}\"\n[telemetry]\nmetrics_listen = \"127.0.0.1:{port}\"\n[[tasks]]\nname = \"waits\"\ntopics = [\"t\"]\n",
            dir.path().join("archive").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(strata_bin())
        .args(["dump", "--config"])
        .arg(&cfg)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let readyz = format!("http://127.0.0.1:{port}/readyz");
    let last = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    eventually(20, "/readyz answers", || {
        let (url, last) = (readyz.clone(), last.clone());
        async move {
            let got = tokio::task::spawn_blocking(move || http_get(&url))
                .await
                .unwrap()
                .unwrap_or_default();
            let hit = !got.is_empty();
            *last.lock().unwrap() = got;
            hit
        }
    })
    .await;
    let healthz = http_get(&format!("http://127.0.0.1:{port}/healthz"));
    let _ = child.kill();
    let _ = child.wait();
    let got = last.lock().unwrap().clone();
    assert!(
        got.starts_with("HTTP/1.1 503") && got.ends_with("not ready: dump task waits: starting\n"),
        "{got}"
    );
    let healthz = healthz.unwrap();
    assert!(healthz.starts_with("HTTP/1.1 200"), "{healthz}");
}

/// `STRATA_CONFIG` stands in for `--config`; the flag wins when both are given.
#[test]
fn strata_config_names_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "[store]\nurl = \"file:///tmp/x\"\n[[tasks]]\nname = \"from-env\"\ntopics = [\"t\"]\n",
    )
    .unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "nonsense = 1\n").unwrap();
    let out = Command::new(strata_bin())
        .arg("validate")
        .env("STRATA_CONFIG", &good)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("from-env: topics [t]"), "{text}");
    let out = Command::new(strata_bin())
        .args(["validate", "--config"])
        .arg(&bad)
        .env("STRATA_CONFIG", &good)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nonsense"));
}

/// With JSON logs, a command's fatal error is one JSON log line (and nothing else is printed
/// as text); human logs keep `error: ...`.
#[test]
fn fatal_errors_are_json_lines_with_json_logs() {
    let store = format!(
        "[kafka]\nbootstrap_servers = \"{}\"\n[store]\nurl = \"s3://strata-it/x\"\nendpoint = \"http://127.0.0.1:9\"\nmax_attempts = 1\naccess_key = \"a\"\nsecret_key = \"b\"\n[[tasks]]\nname = \"unreach\"\ntopics = [\"t\"]\n",
        bootstrap()
    );
    // A failure at run time (exit 1) and a configuration error (exit 2, before logging starts).
    for (cfg, code, words) in [
        (
            store.as_str(),
            1,
            "cannot reach the store at http://127.0.0.1:9",
        ),
        ("nonsense = 1\n", 2, "nonsense: unknown key"),
    ] {
        let (out, _) = strata(&["--log-format", "json", "dump", "--once"], cfg);
        assert_eq!(out.status.code(), Some(code));
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<serde_json::Value> = stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        let last = lines.last().expect("a line");
        assert_eq!(last["level"], "ERROR", "{stderr}");
        assert_eq!(last["exit_code"], code, "{stderr}");
        assert!(
            last["message"].as_str().unwrap().contains(words),
            "{stderr}"
        );
        let errors = lines.iter().filter(|l| l["level"] == "ERROR").count();
        assert_eq!(errors, 1, "the error once:\n{stderr}");
        // Human logs: as before.
        let (out, text) = strata(&["dump", "--once"], cfg);
        assert_eq!(out.status.code(), Some(code));
        assert!(text.contains("error: ") && text.contains(words), "{text}");
    }
}

/// `${file:/path}` reads a secret from a file (a mounted Kubernetes secret): the SASL password
/// of the dev broker's SASL listener, with the file's trailing newline dropped, logs in.
#[tokio::test(flavor = "multi_thread")]
async fn a_kafka_password_from_a_file_logs_in() {
    let topic = unique("file-secret");
    create_topic(&topic, 1).await;
    produce(&sample_records(&topic, 10, 1, base_ts())).await;
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("kafka-password");
    let password =
        std::fs::read_to_string(std::env::var("STRATA_TEST_KAFKA_PASSWORD_FILE").unwrap())
            .unwrap()
            .trim()
            .to_string();
    std::fs::write(&secret_file, format!("{password}\n")).unwrap();
    let cfg = format!(
        "[kafka]\nbootstrap_servers = \"{}\"\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nusername = \"{}\"\npassword = \"${{file:{}}}\"\n[store]\nurl = \"file://{}\"\n[[tasks]]\nname = \"{}\"\ntopics = [\"{topic}\"]\nformat = \"jsonl\"\n",
        std::env::var("STRATA_TEST_SASL_BOOTSTRAP").unwrap(),
        std::env::var("STRATA_TEST_KAFKA_USER").unwrap(),
        secret_file.display(),
        dir.path().join("archive").display(),
        unique("file-secret-task")
    );
    let (out, text) = strata(&["validate"], &cfg);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("<set, from file {}>", secret_file.display())),
        "{text}"
    );
    assert!(!text.contains(&password), "the password is shown:\n{text}");
    let (out, text) = strata(&["dump", "--once"], &cfg);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(": 10 records,"), "{text}");
    assert!(!text.contains(&password), "the password is shown:\n{text}");
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

/// A JVM given a dev log4j2 config without `-Dstrata.logs.dir` (a broker started by hand) wrote
/// its log into a directory literally named `${sys:strata.logs.dir}`, and one was committed: every
/// `${sys:...}` lookup of those configs has a default, except the JVM's own properties.
#[test]
fn dev_log4j_configs_never_name_a_directory_after_a_missing_property() {
    let devenv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("devenv");
    let mut checked = 0;
    let mut problems = Vec::new();
    for dir in std::fs::read_dir(&devenv).unwrap() {
        let dir = dir.unwrap().path();
        for file in std::fs::read_dir(&dir).into_iter().flatten() {
            let path = file.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if !(name.contains("log4j2") && name.ends_with(".properties")) {
                continue;
            }
            checked += 1;
            let text = std::fs::read_to_string(&path).unwrap();
            for (at, _) in text.match_indices("${sys:") {
                let rest = &text[at + "${sys:".len()..];
                let end = rest.find(['}', ':']).unwrap_or(rest.len());
                let property = &rest[..end];
                if !property.starts_with("java.") && !rest[end..].starts_with(":-") {
                    problems.push(format!("{}: ${{sys:{property}}}", path.display()));
                }
            }
        }
    }
    assert!(
        checked >= 3,
        "the dev log4j2 configs were not found under {devenv:?}"
    );
    assert!(
        problems.is_empty(),
        "lookups without a default:\n  {}",
        problems.join("\n  ")
    );
}

/// The markdown files whose links are checked: the README, docs/, and the READMEs of bench/ and
/// the bridge.
fn doc_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = ["README.md", "bench/README.md", "bridge/kafka-rsm/README.md"]
        .iter()
        .map(std::path::PathBuf::from)
        .collect();
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

#[test]
fn doc_links_resolve_inside_the_repository() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = doc_files(root);
    assert!(files.len() > 4, "docs/ has manuals: {files:?}");
    let problems = markdown::check_links(root, &files);
    assert!(
        problems.is_empty(),
        "broken links in the docs:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn doc_link_check_finds_broken_links() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(dir.path().join("outside.md"), "# Outside\n").unwrap();
    std::os::unix::fs::symlink(dir.path(), root.join("docs/up")).unwrap();
    std::fs::write(
        root.join("docs/a.md"),
        "# A manual\n\n## Set-up, step 2 (`strata tier`)\n\n## Set-up, step 2 (`strata tier`)\n\n```sh\n# not a heading\n[in code](nowhere.md)\n```\n",
    )
    .unwrap();
    std::fs::write(
        root.join("README.md"),
        "[ok](docs/a.md) [ok](docs/a.md#set-up-step-2-strata-tier) [ok](docs/a.md#set-up-step-2-strata-tier-1) \
         [ok](#readme) [ok](<docs/a.md> \"title\") [web](https://example.com/x) `[code](gone.md)`\n\
         # Readme\n\
         [missing](docs/b.md) [anchor](docs/a.md#setup) [code-heading](docs/a.md#not-a-heading) \
         [escape](../outside.md) [absolute](/etc/passwd) [file](file:///etc/passwd) [self](#nothing) \
         [symlink](docs/up/outside.md)\n\
         [ref]: docs/c.md\n",
    )
    .unwrap();
    let files = ["README.md", "docs/a.md"].map(std::path::PathBuf::from);
    let problems = markdown::check_links(&root, &files);
    let bad = [
        "docs/b.md",
        "docs/a.md#setup",
        "docs/a.md#not-a-heading",
        "../outside.md",
        "/etc/passwd",
        "file:///etc/passwd",
        "#nothing",
        "docs/up/outside.md",
        "docs/c.md",
    ];
    assert_eq!(problems.len(), bad.len(), "{problems:#?}");
    for (p, b) in problems.iter().zip(bad) {
        assert!(p.contains(&format!("({b})")), "{p} should be about {b}");
    }
}

/// Just enough markdown for link checking, std only: fenced code blocks, code spans, ATX
/// headings with GitHub's anchors, inline links and reference definitions.
mod markdown {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Component, Path, PathBuf};

    /// Lines outside fenced code blocks, with their numbers (from 1).
    fn prose(text: &str) -> Vec<(usize, &str)> {
        let mut fence: Option<(char, usize)> = None;
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            let marker = t.chars().next().filter(|c| *c == '`' || *c == '~');
            let run = marker.map_or(0, |m| t.chars().take_while(|c| *c == m).count());
            match (fence, marker) {
                (None, Some(m)) if run >= 3 => fence = Some((m, run)),
                (Some((m, n)), Some(c)) if c == m && run >= n && t[run..].trim().is_empty() => {
                    fence = None
                }
                (None, _) => out.push((i + 1, line)),
                _ => {}
            }
        }
        out
    }

    /// The line with the contents of code spans blanked out (backticks kept).
    fn without_code_spans(line: &str) -> String {
        let chars: Vec<char> = line.chars().collect();
        let mut out = String::new();
        let mut i = 0;
        while i < chars.len() {
            if chars[i] != '`' {
                out.push(chars[i]);
                i += 1;
                continue;
            }
            let n = chars[i..].iter().take_while(|c| **c == '`').count();
            let close = (i + n..chars.len()).find(|&j| {
                chars[j..].iter().take_while(|c| **c == '`').count() == n
                    && (j == 0 || chars[j - 1] != '`')
            });
            match close {
                Some(j) => {
                    out.extend(std::iter::repeat_n('`', n));
                    out.extend(std::iter::repeat_n('x', j - i - n));
                    out.extend(std::iter::repeat_n('`', n));
                    i = j + n;
                }
                None => {
                    out.extend(&chars[i..i + n]);
                    i += n;
                }
            }
        }
        out
    }

    /// GitHub's anchor of a heading: lowercase, drop punctuation except '-' and '_', spaces
    /// to '-'.
    pub fn slug(heading: &str) -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    }

    /// The anchors of a markdown file's headings; repeated headings get "-1", "-2" ... as on
    /// GitHub.
    pub fn anchors(text: &str) -> BTreeSet<String> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut out = BTreeSet::new();
        for (_, line) in prose(text) {
            let indent = line.len() - line.trim_start_matches(' ').len();
            let t = line.trim_start_matches(' ');
            let level = t.chars().take_while(|c| *c == '#').count();
            if indent > 3 || !(1..=6).contains(&level) {
                continue;
            }
            let rest = &t[level..];
            if !(rest.is_empty() || rest.starts_with(' ')) {
                continue;
            }
            let base = slug(rest.trim().trim_end_matches('#'));
            let n = seen.entry(base.clone()).or_insert(0);
            out.insert(if *n == 0 {
                base.clone()
            } else {
                format!("{base}-{n}")
            });
            *n += 1;
        }
        out
    }

    /// Link targets of one line: inline links and images `[text](target "title")` and
    /// reference definitions `[label]: target`.
    fn targets(line: &str) -> Vec<String> {
        let line = without_code_spans(line);
        let mut out = Vec::new();
        let t = line.trim_start();
        if t.starts_with('[') && line.len() - t.len() <= 3 {
            if let Some((label, rest)) = t[1..].split_once("]:") {
                if !label.is_empty() && !label.contains(']') {
                    if let Some(target) = rest.split_whitespace().next() {
                        out.push(target.trim_matches(['<', '>']).to_string());
                    }
                    return out;
                }
            }
        }
        let mut from = 0;
        while let Some(at) = line[from..].find("](") {
            let start = from + at + 2;
            let mut depth = 0usize;
            let mut end = line.len();
            for (j, c) in line[start..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = start + j;
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let inner = line[start..end].trim();
            let target = match inner.strip_prefix('<') {
                Some(r) => r.split('>').next().unwrap_or_default(),
                None => inner.split_whitespace().next().unwrap_or_default(),
            };
            out.push(target.to_string());
            from = end.min(line.len());
        }
        out
    }

    fn percent_decoded(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let hex = (b[i] == b'%' && i + 2 < b.len())
                .then(|| std::str::from_utf8(&b[i + 1..i + 3]).ok())
                .flatten()
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(v) => {
                    out.push(v);
                    i += 3;
                }
                None => {
                    out.push(b[i]);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Where `target`, linked from `file`, points: a path relative to the repository root, or
    /// why it points nowhere in the repository.
    fn resolve(file: &Path, target: &str) -> Result<PathBuf, &'static str> {
        let scheme = target
            .split_once(':')
            .is_some_and(|(s, _)| !s.is_empty() && !s.contains('/') && !s.contains('#'));
        if scheme {
            return Err("points outside the repository (a URL)");
        }
        if target.starts_with('/') {
            return Err("is an absolute path; link relative to the file");
        }
        let mut parts: Vec<std::ffi::OsString> = Vec::new();
        let base = file.parent().unwrap_or(Path::new(""));
        for c in base.join(percent_decoded(target)).components() {
            match c {
                Component::Normal(p) => parts.push(p.to_os_string()),
                Component::CurDir => {}
                Component::ParentDir => {
                    if parts.pop().is_none() {
                        return Err("escapes the repository");
                    }
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err("is an absolute path; link relative to the file")
                }
            }
        }
        Ok(parts.iter().collect())
    }

    /// Every broken link of `files` (paths relative to `root`), as "file:line: (target) why".
    pub fn check_links(root: &Path, files: &[PathBuf]) -> Vec<String> {
        let real_root = root.canonicalize().unwrap();
        let mut anchor_cache: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
        let mut problems = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(root.join(file))
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            for (n, line) in prose(&text) {
                for target in targets(line) {
                    if target.starts_with("http://")
                        || target.starts_with("https://")
                        || target.starts_with("mailto:")
                    {
                        continue;
                    }
                    let (path, anchor) = match target.split_once('#') {
                        Some((p, a)) => (p, Some(a)),
                        None => (target.as_str(), None),
                    };
                    let mut report = |why: &str| {
                        problems.push(format!("{}:{n}: ({target}) {why}", file.display()))
                    };
                    let rel = if path.is_empty() {
                        file.clone()
                    } else {
                        match resolve(file, path) {
                            Ok(rel) => rel,
                            Err(why) => {
                                report(why);
                                continue;
                            }
                        }
                    };
                    let full = root.join(&rel);
                    match full.canonicalize() {
                        Err(_) => {
                            report(&format!("names {}, which does not exist", rel.display()));
                            continue;
                        }
                        Ok(real) if !real.starts_with(&real_root) => {
                            report("leads outside the repository (through a link)");
                            continue;
                        }
                        Ok(_) => {}
                    }
                    let Some(anchor) = anchor else { continue };
                    if !(full.is_file() && rel.extension().is_some_and(|e| e == "md")) {
                        continue;
                    }
                    let anchors = anchor_cache.entry(rel.clone()).or_insert_with(|| {
                        anchors(&std::fs::read_to_string(&full).unwrap_or_default())
                    });
                    if !anchors.contains(&percent_decoded(anchor)) {
                        report(&format!(
                            "{} has no heading with the anchor #{anchor}",
                            rel.display()
                        ));
                    }
                }
            }
        }
        problems
    }
}

/// Listening TCP sockets (`/proc/net/tcp` and `tcp6`, state 0A) on `port`: their local
/// addresses, decoded.
fn listeners_on(port: u16) -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    for (file, v6) in [("/proc/net/tcp", false), ("/proc/net/tcp6", true)] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state)) = (cols.get(1), cols.get(3)) else {
                continue;
            };
            let Some((addr, p)) = local.split_once(':') else {
                continue;
            };
            if *state != "0A" || u16::from_str_radix(p, 16).ok() != Some(port) {
                continue;
            }
            // The kernel prints each 32-bit word of the address in host byte order.
            let words: Vec<u32> = (0..addr.len() / 8)
                .map(|i| u32::from_str_radix(&addr[i * 8..i * 8 + 8], 16).unwrap())
                .collect();
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
            out.push(if v6 {
                let b: [u8; 16] = bytes.try_into().unwrap();
                std::net::IpAddr::V6(b.into())
            } else {
                let b: [u8; 4] = bytes.try_into().unwrap();
                std::net::IpAddr::V4(b.into())
            });
        }
    }
    out
}

fn is_loopback(a: &std::net::IpAddr) -> bool {
    match a {
        std::net::IpAddr::V4(v4) => v4.is_loopback(),
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[test]
fn dev_services_listen_on_loopback_only() {
    let port = |addr: &str| -> u16 {
        let hostport = addr.trim_start_matches("http://");
        hostport
            .rsplit_once(':')
            .unwrap()
            .1
            .trim_end_matches('/')
            .parse()
            .unwrap()
    };
    let mut ports = vec![
        ("LocalStack S3", port(&s3_endpoint())),
        ("Kafka", port(&bootstrap())),
    ];
    for (what, var) in [
        ("Kafka SASL_PLAINTEXT", "STRATA_TEST_SASL_BOOTSTRAP"),
        ("Kafka SSL", "STRATA_TEST_SSL_BOOTSTRAP"),
        ("Kafka SASL_SSL", "STRATA_TEST_SASL_SSL_BOOTSTRAP"),
        ("peer Kafka", "STRATA_TEST_PEER_BOOTSTRAP"),
    ] {
        ports.push((
            what,
            port(
                &std::env::var(var)
                    .unwrap_or_else(|_| panic!("{var} is not set: run with ./dev test")),
            ),
        ));
    }
    for (what, p) in ports {
        let found = listeners_on(p);
        assert!(!found.is_empty(), "{what}: nothing listens on port {p}");
        assert!(
            found.iter().all(is_loopback),
            "{what} on port {p} listens beyond loopback: {found:?}"
        );
    }
    // The decoder itself: 0.0.0.0 is not loopback, ::ffff:127.0.0.1 is.
    assert!(!is_loopback(&"0.0.0.0".parse().unwrap()));
    assert!(is_loopback(&"::ffff:127.0.0.1".parse().unwrap()));
}

/// The README's first command runs `devenv/demo.sh` (after `./dev demo` installed its parts):
/// it must keep working, whatever strata logs. Run here with the binary under test and the
/// tools virtualenv's Python (it has DuckDB), on a few records.
#[test]
fn the_demo_script_runs_end_to_end() {
    let root = env!("CARGO_MANIFEST_DIR");
    let python = std::env::var("STRATA_TEST_PYTHON")
        .unwrap_or_else(|_| panic!("STRATA_TEST_PYTHON is not set: use ./dev test"));
    let out = Command::new("bash")
        .arg(format!("{root}/devenv/demo.sh"))
        .current_dir(root)
        .env("STRATA_DEMO_BIN", strata_bin())
        .env("STRATA_DEMO_PYTHON", python)
        .env("STRATA_DEMO_RECORDS", "300")
        .env("STRATA_TEST_BOOTSTRAP", bootstrap())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("this run: 6 objects (3 jsonl with 300 records, 3 text.gz with 300 records) for 300 produced"),
        "{text}"
    );
    assert!(
        text.contains("payments by method"),
        "the DuckDB queries ran: {text}"
    );
}
