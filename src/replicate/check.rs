//! `strata replicate-check`: connects to both clusters of every replicate task and reports, one
//! line each, what works and what does not (bootstrap reachable, credentials accepted, topics
//! and groups readable, topic creation allowed where topics would be created), without
//! starting a task.

use super::naming::never_replicated;
use super::setup::classify;
use crate::config::{Config, Direction, KafkaConfig, ReplicateTask};
use crate::kafka::Admin;
use std::fmt;
use std::net::ToSocketAddrs;
use std::time::Duration;

/// One check of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckLine {
    pub task: String,
    pub alias: String,
    pub check: &'static str,
    pub ok: bool,
    pub detail: String,
}

/// Every check of every task.
#[derive(Debug, Default)]
pub struct CheckReport {
    pub lines: Vec<CheckLine>,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.lines.iter().all(|l| l.ok)
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.lines {
            writeln!(
                f,
                "{:<6} task {} cluster {:?}: {}: {}",
                if l.ok { "ok" } else { "FAILED" },
                l.task,
                l.alias,
                l.check,
                l.detail
            )?;
        }
        Ok(())
    }
}

/// TCP reachability of each bootstrap address (pure I/O, no Kafka protocol).
fn bootstrap(k: &KafkaConfig) -> (bool, String) {
    let mut reached = Vec::new();
    let mut failed = Vec::new();
    for s in &k.bootstrap_servers {
        let addrs: Vec<_> = match s.to_socket_addrs() {
            Ok(a) => a.collect(),
            Err(e) => {
                failed.push(format!("{s} ({e})"));
                continue;
            }
        };
        let ok = addrs
            .iter()
            .any(|a| std::net::TcpStream::connect_timeout(a, Duration::from_secs(5)).is_ok());
        if ok {
            reached.push(s.clone());
        } else {
            failed.push(format!("{s} (no TCP connection within 5 s)"));
        }
    }
    if reached.is_empty() {
        (
            false,
            format!("no bootstrap server answers: {}", failed.join(", ")),
        )
    } else if failed.is_empty() {
        (true, format!("reached {}", reached.join(", ")))
    } else {
        (
            true,
            format!("reached {}; not {}", reached.join(", "), failed.join(", ")),
        )
    }
}

async fn cluster(
    task: &ReplicateTask,
    alias: &str,
    k: &KafkaConfig,
    creates_topics: bool,
    out: &mut Vec<CheckLine>,
) {
    let mut line = |check: &'static str, ok: bool, detail: String| {
        out.push(CheckLine {
            task: task.name.to_string(),
            alias: alias.to_string(),
            check,
            ok,
            detail,
        })
    };
    let (ok, detail) = bootstrap(k);
    line("bootstrap", ok, detail);
    if !ok {
        return;
    }
    let admin = match Admin::connect(k) {
        Ok(a) => a,
        Err(e) => {
            let e = classify(task.name.as_str(), alias, k, e);
            return line("authentication", false, e.to_string());
        }
    };
    let n = admin.broker_count().unwrap_or(0);
    line(
        "authentication",
        true,
        match &k.sasl {
            Some(s) => format!("logged in as {}; {n} broker(s)", s.who()),
            None => format!("no SASL ({}); {n} broker(s)", k.security_protocol.as_str()),
        },
    );
    match admin.list_topics() {
        Ok(t) => {
            let matching = t
                .iter()
                .filter(|t| task.topics.matches(t) && !never_replicated(t))
                .count();
            line(
                "authorization",
                true,
                format!(
                    "{} topic(s) visible, {matching} of them matching the task's topics",
                    t.len()
                ),
            );
        }
        Err(e) => line(
            "authorization",
            false,
            format!("cannot list topics: {e}; grant Describe on the topics"),
        ),
    }
    if let Err(e) = admin.groups() {
        line(
            "authorization",
            false,
            format!("cannot list consumer groups: {e}; grant Describe on the groups (offset sync needs it)"),
        );
    }
    if creates_topics {
        let probe = format!("strata-check-{}", uuid::Uuid::new_v4().simple());
        match admin.may_create_topic(&probe).await {
            Ok(()) => line(
                "topic creation",
                true,
                "allowed (checked with a validate-only request; nothing was created)".into(),
            ),
            Err(e) => line(
                "topic creation",
                false,
                format!("{e}; grant Create on the cluster, or create the target and internal topics beforehand"),
            ),
        }
    }
}

/// Checks both clusters of every replicate task.
pub async fn check(cfg: &Config) -> CheckReport {
    let mut report = CheckReport::default();
    for task in &cfg.replicate {
        // Topics are created on the local cluster in every direction (the target topics for
        // pull, the offset syncs for push), on the peer unless it is only read (pull).
        cluster(
            task,
            task.local_alias.as_str(),
            &cfg.kafka,
            true,
            &mut report.lines,
        )
        .await;
        cluster(
            task,
            task.peer_alias.as_str(),
            &task.peer,
            task.direction != Direction::Pull,
            &mut report.lines,
        )
        .await;
    }
    report
}
