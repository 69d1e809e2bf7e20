//! Raw TOML into typed values. Collects every problem instead of stopping at the first, and
//! never copies a secret's value into a message. One file per section: `kafka`, `store`,
//! `tasks` (with `dump` and `replicate`, one per task type), `restore`, `tier`; shared checks
//! live here.

mod dump;
mod kafka;
mod replicate;
mod restore;
mod store;
mod tasks;
mod tier;

/// The librdkafka properties `[kafka.properties]` may not set (config/example.toml lists them).
#[cfg(test)]
pub(super) use kafka::OWNED_PROPERTIES;
#[cfg(test)]
pub(super) use tasks::keys_of;

use super::raw::*;
use super::secret::{self, Secret};
use super::*;
use crate::format::{Delimiter, FormatKind, FormatSpec, TextOptions};
use crate::size::RawSize;
use chrono_tz::Tz;
use std::collections::BTreeMap;

/// Parses TOML text; syntax and type errors give the line and column, without echoing values.
pub(super) fn parse(text: &str, origin: &str) -> Result<RawConfig, ConfigError> {
    super::raw::parse(text).map_err(|e| {
        let at = e
            .span()
            .map(|s| {
                let before = &text[..s.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!("line {line}, column {col}: ")
            })
            .unwrap_or_default();
        ConfigError::Syntax {
            path: origin.to_string(),
            message: format!("{at}{}", redact_serde(e.message())),
        }
    })
}

/// serde quotes the offending value ("invalid type: string \"hunter2\", expected ..."): keep the
/// kind, drop the value, since it may be a secret.
fn redact_serde(msg: &str) -> String {
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = msg.strip_prefix(prefix) {
            let kind = rest.split([' ', ',']).next().unwrap_or_default();
            let expected = rest
                .find(", expected")
                .map(|i| &rest[i..])
                .unwrap_or_default();
            return format!("{prefix}{kind}{expected}");
        }
    }
    msg.to_string()
}

struct Ctx<'a> {
    issues: Vec<Issue>,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Ctx<'_> {
    fn push(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.issues.push(Issue {
            key: key.into(),
            message: message.into(),
        });
    }

    /// `${VAR}` expansion of a plain value.
    fn text(&mut self, key: &str, v: &Option<String>) -> Option<String> {
        let v = v.as_ref()?;
        match secret::expand(v, self.env) {
            Ok(s) => Some(s),
            Err(e) => {
                self.push(key, e.to_string());
                None
            }
        }
    }

    fn secret(&mut self, key: &str, v: &Option<String>) -> Option<Secret> {
        let raw = v.as_ref()?;
        let sources = secret::sources(raw);
        let origin = if sources.is_empty() {
            "inline".to_string()
        } else {
            format!("from {}", sources.join(", "))
        };
        self.text(key, v).map(|s| Secret::new(s, origin))
    }

    fn unknown(&mut self, table: &str, unknown: &Unknown, known: &[&str]) {
        for k in unknown.keys() {
            let key = if table.is_empty() {
                k.clone()
            } else {
                format!("{table}.{k}")
            };
            let best = known
                .iter()
                .map(|c| (strsim::jaro_winkler(k, c), *c))
                .filter(|(s, _)| *s > 0.8)
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((_, c)) => self.push(key, format!("unknown key; did you mean \"{c}\"?")),
                None => self.push(
                    key,
                    format!("unknown key; known keys here: {}", known.join(", ")),
                ),
            }
        }
    }

    fn choice<T>(
        &mut self,
        key: &str,
        v: &Option<String>,
        default: T,
        parse: impl Fn(&str) -> Option<T>,
        names: &str,
    ) -> T {
        match self.text(key, v) {
            None => default,
            Some(s) => parse(&s).unwrap_or_else(|| {
                self.push(key, format!("{s:?} is not one of {names}"));
                default
            }),
        }
    }

    fn size(&mut self, key: &str, v: &Option<RawSize>, default: ByteSize) -> ByteSize {
        match v {
            None => default,
            Some(s) => s.resolve().unwrap_or_else(|m| {
                self.push(key, m);
                default
            }),
        }
    }
}

// The keys of each table, as its raw struct declares them.
pub(super) const TOP_KEYS: &[&str] = RawConfig::KEYS;
pub(super) const KAFKA_KEYS: &[&str] = RawKafka::KEYS;
pub(super) const STORE_KEYS: &[&str] = RawStore::KEYS;
pub(super) const LIMITS_KEYS: &[&str] = RawLimits::KEYS;
pub(super) const TELEMETRY_KEYS: &[&str] = RawTelemetry::KEYS;
pub(super) const CDC_KEYS: &[&str] = RawCdc::KEYS;
pub(super) const ICEBERG_KEYS: &[&str] = RawIceberg::KEYS;
pub(super) const RESTORE_KEYS: &[&str] = RawRestore::KEYS;
pub(super) const TIER_KEYS: &[&str] = RawTier::KEYS;

/// Every key a `[[tasks]]` entry may have, whatever its type.
#[cfg(test)]
pub(super) fn task_keys() -> Vec<&'static str> {
    let mut keys: Vec<&str> = TASK_TYPES.iter().flat_map(|(t, _)| keys_of(t)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

pub(super) fn validate(
    raw: RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Vec<Issue>> {
    let mut cx = Ctx {
        issues: Vec::new(),
        env,
    };
    cx.unknown("", &raw.unknown, TOP_KEYS);
    // `[kafka]` serves every mode; the properties only restore tolerates stay allowed in a file
    // that has no dump or replicate task.
    let clients = if raw.tasks.is_empty() {
        kafka::Clients::RestoreOnly
    } else {
        kafka::Clients::Tasks
    };
    let kafka = kafka::kafka(
        &mut cx,
        "kafka",
        raw.kafka.unwrap_or_default(),
        clients,
        KAFKA_KEYS,
    );
    let store = store::store(&mut cx, raw.store.unwrap_or_default());
    let limits = limits(&mut cx, raw.limits.unwrap_or_default());
    let telemetry = telemetry(&mut cx, raw.telemetry.unwrap_or_default());
    let tasks = tasks::tasks(&mut cx, &raw.tasks, &store, &limits);
    let restore = raw
        .restore
        .and_then(|r| restore::restore(&mut cx, r, &store, &kafka, limits.buffer_memory));
    let tier = tier::tier(&mut cx, raw.tier.unwrap_or_default());
    if !cx.issues.is_empty() {
        return Err(cx.issues);
    }
    Ok(Config {
        kafka,
        store,
        limits,
        telemetry,
        tasks: tasks.dump,
        replicate: tasks.replicate,
        restore,
        tier,
    })
}

fn limits(cx: &mut Ctx<'_>, raw: RawLimits) -> Limits {
    cx.unknown("limits", &raw.unknown, LIMITS_KEYS);
    let buffer_memory = cx.size(
        "limits.buffer_memory",
        &raw.buffer_memory,
        defaults::BUFFER_MEMORY,
    );
    if buffer_memory < ByteSize::mib(16) {
        cx.push(
            "limits.buffer_memory",
            format!("{buffer_memory} is too small; use at least 16MiB"),
        );
    }
    let max_tasks = raw.max_tasks.unwrap_or(defaults::MAX_TASKS);
    if max_tasks == 0 {
        cx.push("limits.max_tasks", "must be at least 1");
    }
    Limits {
        max_tasks,
        buffer_memory,
        leftover_age: std::time::Duration::from_secs(
            raw.leftover_age_secs.unwrap_or(defaults::LEFTOVER_AGE_SECS),
        ),
    }
}

fn telemetry(cx: &mut Ctx<'_>, raw: RawTelemetry) -> TelemetryConfig {
    cx.unknown("telemetry", &raw.unknown, TELEMETRY_KEYS);
    let log_format = cx.choice(
        "telemetry.log_format",
        &raw.log_format,
        LogFormat::Human,
        |s| match s {
            "human" => Some(LogFormat::Human),
            "json" => Some(LogFormat::Json),
            _ => None,
        },
        "\"human\" or \"json\"",
    );
    let log_level = cx
        .text("telemetry.log_level", &raw.log_level)
        .unwrap_or_else(|| "info".to_string());
    if tracing_subscriber::EnvFilter::try_new(&log_level).is_err() {
        cx.push("telemetry.log_level", format!("{log_level:?} is not a level or filter; use error, warn, info, debug or e.g. \"info,strata=debug\""));
    }
    let metrics_listen = match cx.text("telemetry.metrics_listen", &raw.metrics_listen) {
        None => None,
        Some(s) if s.is_empty() => None,
        Some(s) => s.parse::<SocketAddr>().map(Some).unwrap_or_else(|_| {
            cx.push(
                "telemetry.metrics_listen",
                format!("{s:?} is not \"ip:port\" (e.g. \"127.0.0.1:9464\")"),
            );
            None
        }),
    };
    TelemetryConfig {
        log_format,
        log_level,
        metrics_listen,
    }
}

fn valid_topic_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A task's `start_offset` (either task type): where a new group starts.
fn start_offset(cx: &mut Ctx<'_>, k: &str, raw: &Option<String>) -> StartOffset {
    cx.choice(
        &format!("{k}.start_offset"),
        raw,
        StartOffset::Earliest,
        |s| match s {
            "earliest" => Some(StartOffset::Earliest),
            "latest" => Some(StartOffset::Latest),
            _ => None,
        },
        "\"earliest\" or \"latest\"",
    )
}

fn topic_selector(
    cx: &mut Ctx<'_>,
    k: &str,
    list: &Option<Vec<String>>,
    regex: &Option<String>,
    required: bool,
) -> Option<TopicSelector> {
    match (list, regex) {
        (Some(_), Some(_)) => {
            cx.push(
                format!("{k}.topics"),
                "and topic_regex are both set; use one: a list of names or one regular expression",
            );
            None
        }
        (Some(list), None) => {
            if list.is_empty() {
                cx.push(format!("{k}.topics"), "is empty; name at least one topic");
            }
            if list.len() > defaults::MAX_TOPICS {
                cx.push(
                    format!("{k}.topics"),
                    format!(
                        "lists {} topics, at most {} are allowed; use topic_regex for more",
                        list.len(),
                        defaults::MAX_TOPICS
                    ),
                );
            }
            for t in list {
                if !valid_topic_name(t) {
                    cx.push(format!("{k}.topics"), format!("{t:?} is not a valid Kafka topic name (letters, digits, '.', '_', '-', at most 249)"));
                }
            }
            Some(TopicSelector::List(list.clone()))
        }
        (None, Some(r)) => match regex::Regex::new(&format!("^(?:{r})$")) {
            Ok(re) => Some(TopicSelector::Regex(re)),
            Err(e) => {
                let detail = e.to_string().lines().last().unwrap_or_default().to_string();
                cx.push(
                    format!("{k}.topic_regex"),
                    format!("{r:?} is not a valid regular expression ({detail})"),
                );
                None
            }
        },
        (None, None) => {
            if required {
                cx.push(
                    format!("{k}.topics"),
                    "is missing; set topics = [\"name\", ...] or topic_regex = \"pattern\"",
                );
            }
            None
        }
    }
}

/// A dump or replicate task's `topics` or `topic_regex`, minus `exclude_topics`.
fn task_topics(
    cx: &mut Ctx<'_>,
    k: &str,
    list: &Option<Vec<String>>,
    regex: &Option<String>,
    exclude: &Option<Vec<String>>,
) -> Option<TaskTopics> {
    let select = topic_selector(cx, k, list, regex, true);
    let key = format!("{k}.exclude_topics");
    let mut patterns = Vec::new();
    for r in exclude.iter().flatten() {
        match regex::Regex::new(&format!("^(?:{r})$")) {
            Ok(re) => patterns.push(re),
            Err(e) => {
                let detail = e.to_string().lines().last().unwrap_or_default().to_string();
                cx.push(
                    &key,
                    format!("{r:?} is not a valid regular expression ({detail})"),
                );
            }
        }
    }
    let topics = TaskTopics {
        select: select?,
        exclude: patterns,
    };
    if let (Some(left), TopicSelector::List(all)) = (topics.listed(), &topics.select) {
        if left.is_empty() && !all.is_empty() {
            cx.push(
                key,
                format!(
                    "leaves out every topic of topics ({}): the task would read nothing; remove the exclusion or the topics it matches",
                    all.join(", ")
                ),
            );
        }
    }
    Some(topics)
}

/// A directory of the archive (`directory`, `tier.prefix`), `default` when unset.
fn dump_dir(
    cx: &mut Ctx<'_>,
    key: &str,
    raw: &Option<String>,
    default: &str,
) -> crate::layout::DumpDir {
    let text = cx.text(key, raw).unwrap_or_else(|| default.to_string());
    crate::layout::DumpDir::parse(&text).unwrap_or_else(|e| {
        cx.push(key, format!("{text:?} {e}"));
        crate::layout::DumpDir::default()
    })
}

fn time_zone(cx: &mut Ctx<'_>, k: &str, v: &Option<String>) -> Tz {
    match cx.text(k, v) {
        None => Tz::UTC,
        Some(s) => s.parse::<Tz>().unwrap_or_else(|_| {
            cx.push(
                k,
                format!("{s:?} is not an IANA time zone (e.g. \"UTC\", \"Europe/Berlin\")"),
            );
            Tz::UTC
        }),
    }
}

fn time_directory(cx: &mut Ctx<'_>, k: &str, v: &Option<String>) -> crate::layout::TimeDirFormat {
    let s = cx
        .text(k, v)
        .unwrap_or_else(|| defaults::TIME_DIRECTORY.to_string());
    crate::layout::TimeDirFormat::parse(&s).unwrap_or_else(|e| {
        cx.push(k, format!("{s:?} {e}"));
        crate::layout::TimeDirFormat::parse(defaults::TIME_DIRECTORY)
            .unwrap_or_else(|_| unreachable!())
    })
}

fn text_options(
    cx: &mut Ctx<'_>,
    k: &str,
    delimiter: &Option<String>,
    store_key: Option<bool>,
    separator: &Option<String>,
) -> TextOptions {
    let delimiter = cx.choice(
        &format!("{k}.record_delimiter"),
        delimiter,
        Delimiter::Newline,
        |s| s.parse().ok(),
        Delimiter::NAMES,
    );
    let sep = cx
        .text(&format!("{k}.key_separator"), separator)
        .unwrap_or_else(|| defaults::KEY_SEPARATOR.to_string());
    if store_key == Some(true) {
        if sep.is_empty() {
            cx.push(
                format!("{k}.key_separator"),
                "is empty; with store_key = true keys need a separator such as \":\"",
            );
        }
        if delimiter
            .byte()
            .is_some_and(|d| sep.as_bytes().contains(&d))
        {
            cx.push(
                format!("{k}.key_separator"),
                format!("{sep:?} contains the record delimiter \"{delimiter}\"; pick another"),
            );
        }
    }
    TextOptions {
        delimiter,
        key_separator: (store_key == Some(true)).then(|| sep.into_bytes()),
    }
}
