//! `strata archive`: list, verify and prune what dump archived, on S3 and `file://` alike.
//!
//! Contract: `ls` reads the listing and strata's own records (seals, gap records, prune marks,
//! snapshot names), never an archive object; `verify` reads every object (or a deterministic
//! sample) and writes nothing; `prune` writes only when applied, and never removes a range a
//! dump may not have committed yet. The archive is found as restore finds it (the same flags
//! and helpers); the offset arithmetic is pure ([`ranges`]), the listing model nearly so
//! ([`catalog`]).

pub(crate) mod catalog;
pub mod list;
pub mod prune;
pub(crate) mod ranges;
pub mod verify;

pub use list::{list, Listing};
pub use prune::{prune, PruneOptions, PruneReport};
pub use verify::{verify, VerifyOptions, VerifyReport};

use crate::config::{Config, ConfigError, KafkaConfig, RestoreOverrides, TopicSelector};
use crate::format::TextOptions;
use crate::layout::DumpDir;
use crate::store::{ObjectStore, StoreError};
use chrono::{DateTime, NaiveDate, Utc};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Where the archive is, as `strata restore` takes it: `--config FILE [--task NAME]` for a
/// dump task's store and directory, `--source URL --directory D` for any place.
#[derive(Debug, Clone, Default)]
pub struct LocationArgs {
    pub task: Option<String>,
    pub source: Option<String>,
    pub directory: Option<String>,
    pub topics: Option<Vec<String>>,
    pub topic_regex: Option<String>,
}

/// What an archive command needs, resolved from the file and flags (no I/O yet).
#[derive(Debug, Clone)]
pub struct Settings {
    pub store: crate::config::StoreConfig,
    pub directory: DumpDir,
    pub topics: Option<TopicSelector>,
    /// The dump task's text options (how text objects decode).
    pub text: TextOptions,
    /// `limits.buffer_memory`: bytes of objects verify holds at once.
    pub memory_budget: u64,
    /// `limits.leftover_age_secs`: how long a seal whose object is missing may be an upload in
    /// progress.
    pub pending_age: Duration,
    /// The dump task that writes this archive, when the file has it: its group's committed
    /// offsets tell prune which objects are committed.
    pub group: Option<(String, KafkaConfig)>,
    /// The file's log settings.
    pub telemetry: crate::config::TelemetryConfig,
}

impl Settings {
    /// Resolves the archive's location the way `strata restore` does (the same file, flags
    /// and validation).
    pub fn load(config: Option<&Path>, args: &LocationArgs) -> Result<Self, ConfigError> {
        let overrides = RestoreOverrides {
            task: args.task.clone(),
            source: args.source.clone(),
            directory: args.directory.clone(),
            topics: args.topics.clone(),
            topic_regex: args.topic_regex.clone(),
            ..RestoreOverrides::default()
        };
        let cfg = Config::load_for_restore(config, &overrides)?;
        Ok(Self::of(&cfg, args.task.as_deref()))
    }

    fn of(cfg: &Config, task: Option<&str>) -> Self {
        // load_for_restore implies [restore]; an empty one if it ever did not.
        let r = cfg.restore.clone();
        let (store, directory, topics, text, memory_budget) = match r {
            Some(r) => (r.store, r.directory, r.topics, r.text, r.memory_budget.0),
            None => (
                cfg.store.clone(),
                DumpDir::default(),
                None,
                TextOptions::default(),
                cfg.limits.buffer_memory.0,
            ),
        };
        // The dump task writing exactly here (the named one first).
        let group = cfg
            .tasks
            .iter()
            .filter(|t| t.store.url == store.url && t.directory == directory)
            .min_by_key(|t| Some(t.name.as_str()) != task)
            .map(|t| (t.name.to_string(), cfg.kafka.clone()));
        Self {
            store,
            directory,
            topics,
            text,
            memory_budget,
            pending_age: cfg.limits.leftover_age,
            group,
            telemetry: cfg.telemetry.clone(),
        }
    }
}

/// An archive ready to read.
#[derive(Debug, Clone)]
pub struct Archive {
    pub store: Arc<dyn ObjectStore>,
    pub settings: Settings,
}

impl Archive {
    pub async fn open(settings: Settings) -> Result<Self, ArchiveError> {
        let store = crate::store::open(&settings.store)
            .await
            .map_err(ArchiveError::Store)?;
        Ok(Self { store, settings })
    }

    /// `s3://bucket/prefix/dir` or `file:///root/dir`.
    pub fn location(&self) -> String {
        catalog::location(self.store.as_ref(), &self.settings.directory)
    }

    pub(crate) async fn catalog(&self) -> Result<catalog::Catalog, ArchiveError> {
        let opts = catalog::ScanOptions {
            directory: &self.settings.directory,
            topics: self.settings.topics.as_ref(),
            pending_age: self.settings.pending_age,
        };
        catalog::scan(self.store.as_ref(), &opts)
            .await
            .map_err(|source| ArchiveError::List {
                location: self.location(),
                source,
            })
    }
}

/// What stops an archive command (problems an archive has are results, not errors).
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("{0}")]
    Store(#[source] StoreError),
    #[error("cannot list the archive {location}: {source}; check --source/--directory (or the task's bucket and directory) and the store's credentials")]
    List {
        location: String,
        #[source]
        source: StoreError,
    },
    #[error("no archive under {location}: no objects named <topic>+<partition>+<offset>.<ext> and no seals; check --source and --directory, or name the dump task with --task")]
    NoArchive { location: String },
    #[error("--before {value:?}: {why}; give an RFC 3339 time (2026-11-29T06:00:00Z), a date (2026-11-29, midnight UTC) or an age (90d, 36h, 30m)")]
    BadTime { value: String, why: String },
    #[error(transparent)]
    State(#[from] crate::state::StateError),
    #[error("archive command failed internally: {0}")]
    Internal(String),
}

/// A `--before` value: RFC 3339, a date (midnight UTC) or an age before `now` (`90d`, `36h`,
/// `30m`).
pub fn parse_time(value: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, ArchiveError> {
    let bad = |why: &str| ArchiveError::BadTime {
        value: value.to_string(),
        why: why.to_string(),
    };
    let v = value.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(v, "%Y-%m-%d") {
        return d
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .ok_or_else(|| bad("not a date"));
    }
    let unit = v.chars().last().ok_or_else(|| bad("empty"))?;
    let secs = match unit {
        'd' => 86_400,
        'h' => 3_600,
        'm' => 60,
        _ => return Err(bad("not a time, a date or an age")),
    };
    let n: i64 = v[..v.len() - 1]
        .parse()
        .map_err(|_| bad("not a time, a date or an age"))?;
    if n < 0 {
        return Err(bad("an age cannot be negative"));
    }
    n.checked_mul(secs)
        .and_then(chrono::Duration::try_seconds)
        .and_then(|d| now.checked_sub_signed(d))
        .ok_or_else(|| bad("too far back"))
}

/// RFC 3339 in ms of a record timestamp, or `-`.
pub(crate) fn ts(ms: Option<i64>) -> String {
    ms.and_then(DateTime::<Utc>::from_timestamp_millis)
        .map_or("-".to_string(), |d| {
            d.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        })
}

/// Bytes in the largest binary unit that keeps a number >= 1.
pub(crate) fn human(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Offsets `from..to` (end exclusive) as people read them: `from..to-1`, inclusive.
pub(crate) fn offsets(from: i64, to: i64) -> String {
    if to - from == 1 {
        format!("{from}")
    } else {
        format!("{from}..{}", to - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn before_takes_a_time_a_date_or_an_age() {
        let now = Utc.with_ymd_and_hms(2026, 12, 10, 12, 0, 0).unwrap();
        assert_eq!(
            parse_time("2026-11-29T06:00:00Z", now).unwrap(),
            Utc.with_ymd_and_hms(2026, 11, 29, 6, 0, 0).unwrap()
        );
        assert_eq!(
            parse_time("2026-11-29T07:00:00+01:00", now).unwrap(),
            Utc.with_ymd_and_hms(2026, 11, 29, 6, 0, 0).unwrap()
        );
        assert_eq!(
            parse_time("2026-11-29", now).unwrap(),
            Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0).unwrap()
        );
        assert_eq!(
            parse_time("10d", now).unwrap(),
            Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
        );
        assert_eq!(
            parse_time("36h", now).unwrap(),
            Utc.with_ymd_and_hms(2026, 12, 9, 0, 0, 0).unwrap()
        );
        assert_eq!(
            parse_time("30m", now).unwrap(),
            Utc.with_ymd_and_hms(2026, 12, 10, 11, 30, 0).unwrap()
        );
        for bad in [
            "",
            "yesterday",
            "-3d",
            "3w",
            "99999999999999999d",
            "2026-13-01",
        ] {
            let e = parse_time(bad, now).unwrap_err().to_string();
            assert!(
                e.contains("--before") && e.contains("RFC 3339"),
                "{bad}: {e}"
            );
        }
    }

    fn settings(text: &str, args: &LocationArgs) -> Settings {
        let o = RestoreOverrides {
            task: args.task.clone(),
            source: args.source.clone(),
            directory: args.directory.clone(),
            ..RestoreOverrides::default()
        };
        let cfg = Config::restore_from_toml(text, "t.toml", &o, |_| None).unwrap();
        Settings::of(&cfg, args.task.as_deref())
    }

    const TWO: &str = "[store]\nurl = \"file:///a\"\n[[tasks]]\nname = \"orders\"\ntopics = [\"o\"]\ndirectory = \"orders\"\n[[tasks]]\nname = \"audit\"\ntopics = [\"a\"]\ndirectory = \"audit\"\n";

    #[test]
    fn the_location_is_restores_and_the_group_the_task_writing_there() {
        let task = |t: &str| LocationArgs {
            task: Some(t.into()),
            ..LocationArgs::default()
        };
        let s = settings(TWO, &task("audit"));
        assert_eq!(s.directory.as_str(), "audit");
        assert_eq!(s.group.map(|g| g.0), Some("audit".to_string()));
        // A location given by flags: the task writing exactly there, if any.
        let at = |dir: &str| LocationArgs {
            source: Some("file:///a".into()),
            directory: Some(dir.into()),
            ..LocationArgs::default()
        };
        assert_eq!(
            settings(TWO, &at("orders")).group.map(|g| g.0),
            Some("orders".into())
        );
        assert_eq!(settings(TWO, &at("elsewhere")).group, None);
        assert_eq!(
            settings("", &at("orders")).group,
            None,
            "no file, no Kafka check"
        );
    }

    #[test]
    fn offsets_read_inclusive() {
        assert_eq!(offsets(0, 100), "0..99");
        assert_eq!(offsets(7, 8), "7");
        assert_eq!(human(512.0), "512 B");
        assert_eq!(human(1536.0), "1.5 KiB");
        assert_eq!(ts(Some(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(ts(None), "-");
    }
}
