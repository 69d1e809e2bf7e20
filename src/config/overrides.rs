//! Command-line flags of `strata restore`, merged into the raw `[restore]` table before
//! validation, so flags and file go through one validation path. A problem with a value that
//! came from a flag is reported under the flag's name (`--from: ...`), not the TOML key.

use super::raw::{RawConfig, RawDumpTask, RawKafka, RawRestore, RawStore, RawTask, StringList};
use super::{validate, Config, ConfigError, Issue};
use std::path::Path;

/// What the restore flags set; `None`/`false` leaves the file's value alone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RestoreOverrides {
    /// A dump task of the same file whose bucket, directory, time layout and text options the
    /// restore takes (over `[restore]`'s; the other flags still win).
    pub task: Option<String>,
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
        let location_flag = self.source.is_some() || self.directory.is_some();
        if let Err(issue) = adopt_dump_task(raw, self.task.as_deref(), location_flag) {
            issues.push(issue);
        }
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

/// Where a dump task put its archive and how it laid it out, copied into `[restore]`: from
/// the task named by `--task` (its values win), or from the only dump task of a file that has
/// one (filling what `[restore]` leaves unset), so the config that dumped also restores.
fn adopt_dump_task(
    raw: &mut RawConfig,
    name: Option<&str>,
    location_flag: bool,
) -> Result<(), Issue> {
    let dumps: Vec<&RawDumpTask> = raw.tasks.iter().filter_map(RawTask::as_dump).collect();
    let (task, force) = match name {
        Some(n) => match dumps.iter().find(|t| t.name.as_deref() == Some(n)) {
            Some(t) => (*t, true),
            None => {
                let names: Vec<&str> = dumps.iter().filter_map(|t| t.name.as_deref()).collect();
                return Err(Issue {
                    key: "--task".into(),
                    message: format!(
                        "{n:?} is not a dump task of this file; its dump tasks are: {}",
                        if names.is_empty() {
                            "none".to_string()
                        } else {
                            names.join(", ")
                        }
                    ),
                });
            }
        },
        // Only when nothing names another location: the task's layout says nothing about it.
        None if dumps.len() == 1 && !location_flag && !restore_names_a_location(raw) => {
            (dumps[0], false)
        }
        None => return Ok(()),
    };
    let r = raw.restore.get_or_insert_with(RawRestore::default);
    let take = |slot: &mut Option<String>, v: &Option<String>, default: Option<&str>| {
        if force || slot.is_none() {
            *slot = v.clone().or_else(|| default.map(str::to_string));
        }
    };
    take(&mut r.bucket, &task.bucket, None);
    take(&mut r.directory, &task.directory, None);
    take(
        &mut r.time_directory,
        &task.time_directory,
        Some(super::defaults::TIME_DIRECTORY),
    );
    take(&mut r.time_zone, &task.time_zone, None);
    take(&mut r.record_delimiter, &task.record_delimiter, None);
    take(&mut r.key_separator, &task.key_separator, None);
    if force || r.store_key.is_none() {
        r.store_key = task.store_key;
    }
    Ok(())
}

/// Whether `[restore]` says where to read (another place than a dump task's, maybe).
fn restore_names_a_location(raw: &RawConfig) -> bool {
    raw.restore
        .as_ref()
        .is_some_and(|r| r.bucket.is_some() || r.directory.is_some())
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

    const TWO_DUMPS: &str = r#"
[store]
url = "s3://archive"
[[tasks]]
name = "orders"
topics = ["orders"]
bucket = "orders-bucket"
directory = "backups/orders"
time_directory = "dt=yyyy-MM-dd/HH"
time_zone = "Europe/Berlin"
format = "text"
record_delimiter = ";"
store_key = true
key_separator = ":"
[[tasks]]
name = "audit"
topics = ["audit"]
[restore]
directory = "somewhere-else"
"#;

    #[test]
    fn task_flag_takes_the_dump_task_layout() {
        let o = RestoreOverrides {
            task: Some("orders".into()),
            ..Default::default()
        };
        let r = restore(TWO_DUMPS, &o).unwrap().restore.unwrap();
        assert_eq!(
            r.directory.as_str(),
            "backups/orders",
            "the task beats [restore]"
        );
        assert_eq!(
            r.time_directory.map(|t| t.to_string()),
            Some("dt=yyyy-MM-dd/HH".to_string())
        );
        assert_eq!(r.time_zone, chrono_tz::Europe::Berlin);
        assert_eq!(r.text.key_separator.as_deref(), Some(&b":"[..]));
        assert_eq!(r.store.url.to_string(), "s3://orders-bucket");

        // Another task: its unset layout means the defaults, not [restore]'s values.
        let o = RestoreOverrides {
            task: Some("audit".into()),
            ..Default::default()
        };
        let r = restore(TWO_DUMPS, &o).unwrap().restore.unwrap();
        assert_eq!(r.directory.as_str(), "");
        assert_eq!(
            r.time_directory.map(|t| t.to_string()),
            Some("yyyy/MM/dd".to_string())
        );
        assert_eq!(r.store.url.to_string(), "s3://archive");

        // Flags still win over the task.
        let o = RestoreOverrides {
            task: Some("orders".into()),
            directory: Some("flag-dir".into()),
            ..Default::default()
        };
        let r = restore(TWO_DUMPS, &o).unwrap().restore.unwrap();
        assert_eq!(r.directory.as_str(), "flag-dir");
    }

    #[test]
    fn unknown_task_names_the_dump_tasks() {
        let o = RestoreOverrides {
            task: Some("nope".into()),
            ..Default::default()
        };
        let found = issues(TWO_DUMPS, &o);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].key, "--task");
        assert!(
            found[0].message.contains("orders, audit"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn the_only_dump_task_fills_what_restore_leaves_unset() {
        let file = r#"
[[tasks]]
name = "orders"
topics = ["orders"]
directory = "backups/orders"
[restore]
time_zone = "Asia/Tokyo"
"#;
        let r = restore(file, &RestoreOverrides::default())
            .unwrap()
            .restore
            .unwrap();
        assert_eq!(r.directory.as_str(), "backups/orders");
        assert_eq!(
            r.time_zone,
            chrono_tz::Asia::Tokyo,
            "[restore] keeps its own"
        );
        assert!(r.time_directory.is_some());
        // With two dump tasks and no --task the layout stays unknown: archives are found at
        // any depth.
        let r = restore(TWO_DUMPS, &RestoreOverrides::default())
            .unwrap()
            .restore
            .unwrap();
        assert_eq!(r.directory.as_str(), "somewhere-else");
        assert!(r.time_directory.is_none());
        // A location of its own ([restore] directory, --directory or --source): not adopted.
        let own = format!("{file}directory = \"elsewhere\"\n");
        let r = restore(&own, &RestoreOverrides::default())
            .unwrap()
            .restore
            .unwrap();
        assert!(r.time_directory.is_none(), "no layout from the task");
        assert_eq!(r.time_zone, chrono_tz::Asia::Tokyo);
        let flag = RestoreOverrides {
            source: Some("file:///other".into()),
            ..Default::default()
        };
        let r = restore(file, &flag).unwrap().restore.unwrap();
        assert_eq!(
            r.directory.as_str(),
            "",
            "the task's directory is not taken"
        );
        assert!(r.time_directory.is_none());
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
