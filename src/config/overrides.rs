//! Command-line flags of `strata restore`, merged into the raw `[restore]` table before
//! validation, so flags and file go through one validation path. A problem with a value that
//! came from a flag is reported under the flag's name (`--from: ...`), not the TOML key.

use super::raw::{RawConfig, RawKafka, RawRestore, RawStore, StringList};
use super::{validate, Config, ConfigError, Issue};
use std::path::Path;

/// What the restore flags set; `None`/`false` leaves the file's value alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RestoreOverrides {
    /// `s3://bucket/prefix` or `file:///path`: replaces `store.url` (and `restore.bucket`).
    pub source: Option<String>,
    pub directory: Option<String>,
    pub topics: Option<Vec<String>>,
    pub topic_regex: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub target_prefix: Option<String>,
    /// `SOURCE=TARGET` pairs, added to `restore.topic_map`.
    pub topic_map: Vec<String>,
    pub partitioning: Option<String>,
    /// The target cluster's bootstrap servers.
    pub bootstrap_servers: Option<String>,
    pub rate_limit_mib_per_sec: Option<f64>,
    pub checkpoint: Option<String>,
    pub skip_corrupt: bool,
    pub exactly_once: bool,
}

impl RestoreOverrides {
    /// Writes the flags into `raw` (creating `[restore]` when missing). Returns the TOML key
    /// each flag set, paired with the flag's name, and problems found before validation.
    fn apply(&self, raw: &mut RawConfig) -> (Vec<(String, &'static str)>, Vec<Issue>) {
        let mut set = Vec::new();
        let mut issues = Vec::new();
        let r: &mut RawRestore = raw.restore.get_or_insert_with(RawRestore::default);
        if let Some(s) = &self.source {
            raw.store.get_or_insert_with(RawStore::default).url = Some(s.clone());
            // The URL names the bucket; a [restore] bucket from the file would contradict it.
            r.bucket = None;
            set.push(("store.url".to_string(), "--source"));
            set.push(("restore.bucket".to_string(), "--source"));
        }
        let mut put = |slot: &mut Option<String>, v: &Option<String>, key: &str, flag| {
            if let Some(v) = v {
                *slot = Some(v.clone());
                set.push((key.to_string(), flag));
            }
        };
        put(
            &mut r.directory,
            &self.directory,
            "restore.directory",
            "--directory",
        );
        put(&mut r.from, &self.from, "restore.from", "--from");
        put(&mut r.to, &self.to, "restore.to", "--to");
        put(
            &mut r.target_prefix,
            &self.target_prefix,
            "restore.target_prefix",
            "--target-prefix",
        );
        put(
            &mut r.partitioning,
            &self.partitioning,
            "restore.partitioning",
            "--partitioning",
        );
        put(
            &mut r.checkpoint,
            &self.checkpoint,
            "restore.checkpoint",
            "--checkpoint",
        );
        if let Some(t) = &self.topics {
            r.topics = Some(t.clone());
            r.topic_regex = None;
            set.push(("restore.topics".to_string(), "--topics"));
        }
        if let Some(re) = &self.topic_regex {
            r.topic_regex = Some(re.clone());
            r.topics = None;
            set.push(("restore.topic_regex".to_string(), "--topic-regex"));
        }
        for pair in &self.topic_map {
            match pair.split_once('=') {
                Some((src, dst)) if !src.is_empty() && !dst.is_empty() => {
                    r.topic_map.insert(src.to_string(), dst.to_string());
                    set.push((format!("restore.topic_map.\"{src}\""), "--topic-map"));
                }
                _ => issues.push(Issue {
                    key: "--topic-map".into(),
                    message: format!("{pair:?} is not SOURCE=TARGET (e.g. orders=orders.replay)"),
                }),
            }
        }
        if let Some(rate) = self.rate_limit_mib_per_sec {
            r.rate_limit_mib_per_sec = Some(rate);
            set.push((
                "restore.rate_limit_mib_per_sec".to_string(),
                "--rate-limit-mib-per-sec",
            ));
        }
        if self.skip_corrupt {
            r.skip_corrupt = Some(true);
        }
        if self.exactly_once {
            r.exactly_once = Some(true);
        }
        if let Some(servers) = &self.bootstrap_servers {
            let list = Some(StringList::One(servers.clone()));
            // The target is [restore.kafka] when the file has one, else [kafka].
            match r.kafka.as_mut() {
                Some(k) => {
                    k.bootstrap_servers = list;
                    set.push((
                        "restore.kafka.bootstrap_servers".into(),
                        "--bootstrap-servers",
                    ));
                }
                None => {
                    raw.kafka
                        .get_or_insert_with(RawKafka::default)
                        .bootstrap_servers = list;
                    set.push(("kafka.bootstrap_servers".into(), "--bootstrap-servers"));
                }
            }
        }
        (set, issues)
    }
}

impl Config {
    /// The configuration of `strata restore`: the file (or the embedded default when `path` is
    /// `None`) with the flags applied, validated once. A `[restore]` table is implied.
    pub fn load_for_restore(
        path: Option<&Path>,
        overrides: &RestoreOverrides,
    ) -> Result<Self, ConfigError> {
        let (text, origin) = match path {
            Some(p) => (
                std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                    path: p.to_path_buf(),
                    source,
                })?,
                p.display().to_string(),
            ),
            None => (String::new(), "<embedded default + flags>".to_string()),
        };
        Self::restore_from_toml(&text, &origin, overrides, |k| std::env::var(k).ok())
    }

    /// [`Self::load_for_restore`] on TOML text; `env` resolves `${VAR}`.
    pub fn restore_from_toml(
        text: &str,
        origin: &str,
        overrides: &RestoreOverrides,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut raw = validate::parse(text, origin)?;
        let (set, mut early) = overrides.apply(&mut raw);
        let result = validate::validate(raw, &env);
        let mut issues = match result {
            Ok(cfg) if early.is_empty() => return Ok(cfg),
            Ok(_) => Vec::new(),
            Err(issues) => issues,
        };
        for issue in &mut issues {
            if let Some((_, flag)) = set.iter().find(|(key, _)| *key == issue.key) {
                issue.key = (*flag).to_string();
            }
        }
        early.append(&mut issues);
        Err(ConfigError::Invalid {
            path: origin.to_string(),
            issues: early,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Partitioning, StoreUrl, TopicSelector};

    fn restore(text: &str, o: &RestoreOverrides) -> Result<Config, ConfigError> {
        Config::restore_from_toml(text, "t.toml", o, |_| None)
    }

    fn issues(text: &str, o: &RestoreOverrides) -> Vec<Issue> {
        match restore(text, o) {
            Err(ConfigError::Invalid { issues, .. }) => issues,
            other => panic!("expected issues, got {other:?}"),
        }
    }

    #[test]
    fn flags_override_the_file() {
        let file = r#"
[store]
url = "s3://from-file/p"
[restore]
bucket = "other-bucket"
directory = "file-dir"
topic_regex = "cdc\\..*"
from = "2026-01-01T00:00:00Z"
target_prefix = "file."
"#;
        let o = RestoreOverrides {
            source: Some("file:///tmp/archive".into()),
            directory: Some("flag-dir".into()),
            topics: Some(vec!["a".into(), "b".into()]),
            to: Some("2026-02-01T00:00:00Z".into()),
            target_prefix: Some("restored.".into()),
            topic_map: vec!["a=a.replay".into()],
            partitioning: Some("key-hash".into()),
            skip_corrupt: true,
            exactly_once: true,
            checkpoint: Some("/tmp/cp.json".into()),
            ..Default::default()
        };
        let c = restore(file, &o).unwrap();
        let r = c.restore.unwrap();
        assert_eq!(
            r.store.url,
            StoreUrl::File {
                root: "/tmp/archive".into()
            }
        );
        assert_eq!(r.directory.as_str(), "flag-dir");
        assert_eq!(
            r.topics,
            Some(TopicSelector::List(vec!["a".into(), "b".into()]))
        );
        assert!(r.from.is_some(), "the file's from stays");
        assert!(r.to.is_some());
        assert_eq!(r.naming.target("a"), "a.replay");
        assert_eq!(r.naming.target("b"), "restored.b");
        assert_eq!(r.partitioning, Partitioning::KeyHash);
        assert!(r.skip_corrupt && r.exactly_once);
        assert_eq!(r.checkpoint.as_deref(), Some(Path::new("/tmp/cp.json")));
    }

    #[test]
    fn no_file_means_embedded_defaults_and_an_implied_restore_table() {
        let c = restore("", &RestoreOverrides::default()).unwrap();
        let r = c.restore.unwrap();
        assert_eq!(
            r.store.url,
            StoreUrl::File {
                root: "./strata-archive".into()
            }
        );
        assert_eq!(r.kafka.bootstrap_servers, vec!["127.0.0.1:9092"]);
        assert!(r.topics.is_none());
    }

    #[test]
    fn flag_errors_name_the_flag_and_file_errors_the_key() {
        let o = RestoreOverrides {
            source: Some("ftp://x".into()),
            from: Some("yesterday".into()),
            topic_regex: Some("(".into()),
            topic_map: vec!["nonsense".into()],
            ..Default::default()
        };
        let found = issues("[restore]\ntime_zone = \"Mars/Base\"\n", &o);
        let keys: Vec<&str> = found.iter().map(|i| i.key.as_str()).collect();
        for k in [
            "--source",
            "--from",
            "--topic-regex",
            "--topic-map",
            "restore.time_zone",
        ] {
            assert!(keys.contains(&k), "{k} missing in {found:#?}");
        }
    }

    #[test]
    fn a_topic_flag_replaces_the_files_regex_and_vice_versa() {
        let o = RestoreOverrides {
            topic_regex: Some("x.*".into()),
            ..Default::default()
        };
        let r = restore("[restore]\ntopics = [\"a\"]\n", &o)
            .unwrap()
            .restore
            .unwrap();
        assert!(matches!(r.topics, Some(TopicSelector::Regex(_))));
    }

    #[test]
    fn bootstrap_flag_targets_restore_kafka_when_present() {
        let o = RestoreOverrides {
            bootstrap_servers: Some("flag:9092".into()),
            ..Default::default()
        };
        let c = restore(
            "[kafka]\nbootstrap_servers = \"src:9092\"\n[restore.kafka]\nbootstrap_servers = \"dst:9092\"\n",
            &o,
        )
        .unwrap();
        assert_eq!(
            c.restore.unwrap().kafka.bootstrap_servers,
            vec!["flag:9092"]
        );
        let c = restore("", &o).unwrap();
        assert_eq!(
            c.restore.unwrap().kafka.bootstrap_servers,
            vec!["flag:9092"]
        );
        let bad = RestoreOverrides {
            bootstrap_servers: Some("no-port".into()),
            ..Default::default()
        };
        let found = issues("", &bad);
        assert_eq!(found[0].key, "--bootstrap-servers", "{found:#?}");
    }
}
