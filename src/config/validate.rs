//! Raw TOML into typed values. Collects every problem instead of stopping at the first, and
//! never copies a secret's value into a message.

use super::raw::*;
use super::secret::{self, Secret};
use super::size::RawSize;
use super::*;
use crate::format::{Delimiter, FormatKind, FormatSpec, TextOptions};

/// Parses TOML text; syntax and type errors give the line and column, without echoing values.
pub(super) fn parse(text: &str, origin: &str) -> Result<RawConfig, ConfigError> {
    toml::from_str::<RawConfig>(text).map_err(|e| {
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
        let vars = secret::variables(raw);
        let origin = if vars.is_empty() {
            "inline".to_string()
        } else {
            format!("from ${{{}}}", vars.join("}, ${"))
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

pub(super) const TOP_KEYS: &[&str] = &[
    "kafka",
    "store",
    "limits",
    "telemetry",
    "tasks",
    "restore",
    "tier",
];
pub(super) const KAFKA_KEYS: &[&str] = &[
    "bootstrap_servers",
    "security_protocol",
    "sasl_mechanism",
    "username",
    "password",
    "ssl_ca_location",
    "ssl_certificate_location",
    "ssl_key_location",
    "ssl_key_password",
    "client_id",
    "properties",
];
pub(super) const STORE_KEYS: &[&str] = &[
    "url",
    "region",
    "endpoint",
    "path_style",
    "access_key",
    "secret_key",
    "create_bucket",
    "part_size",
    "max_attempts",
];
pub(super) const LIMITS_KEYS: &[&str] = &["max_tasks", "buffer_memory"];
pub(super) const TELEMETRY_KEYS: &[&str] = &["log_format", "log_level", "metrics_listen"];
pub(super) const TASK_KEYS: &[&str] = &[
    "type",
    "name",
    "topics",
    "topic_regex",
    "start_offset",
    "dump_interval_secs",
    "bucket",
    "directory",
    "time_directory",
    "time_zone",
    "time_source",
    "record_delimiter",
    "store_key",
    "key_separator",
    "format",
    "compression",
    "max_file_size",
    "topic_refresh_secs",
];
pub(super) const RESTORE_KEYS: &[&str] = &[
    "bucket",
    "directory",
    "time_directory",
    "time_zone",
    "topics",
    "topic_regex",
    "from",
    "to",
    "target_prefix",
    "topic_map",
    "partitioning",
    "create_topics",
    "partitions",
    "replication_factor",
    "rate_limit_mib_per_sec",
    "checkpoint",
    "skip_corrupt",
    "exactly_once",
    "record_delimiter",
    "store_key",
    "key_separator",
    "kafka",
];
pub(super) const TIER_KEYS: &[&str] = &[
    "listen",
    "prefix",
    "chunk_size",
    "compression",
    "cache_dir",
    "cache_size",
    "prefetch_chunks",
    "upload_concurrency",
];

/// librdkafka properties strata sets itself; overriding them would break its guarantees.
const OWNED_PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers", "kafka.bootstrap_servers"),
    ("security.protocol", "kafka.security_protocol"),
    ("sasl.mechanism", "kafka.sasl_mechanism"),
    ("sasl.mechanisms", "kafka.sasl_mechanism"),
    ("sasl.username", "kafka.username"),
    ("sasl.password", "kafka.password"),
    ("group.id", "the task name (one consumer group per task)"),
    (
        "enable.auto.commit",
        "nothing: strata commits only after an upload is durable",
    ),
    (
        "enable.auto.offset.store",
        "nothing: strata commits only after an upload is durable",
    ),
    ("auto.offset.reset", "tasks[].start_offset"),
    ("enable.partition.eof", "nothing: `strata dump --once` sets it"),
    (
        "partition.assignment.strategy",
        "nothing: strata uses cooperative-sticky so a rebalance only drops the buffers of moved partitions",
    ),
];

pub(super) fn validate(
    raw: RawConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, Vec<Issue>> {
    let mut cx = Ctx {
        issues: Vec::new(),
        env,
    };
    cx.unknown("", &raw.unknown, TOP_KEYS);
    let kafka = kafka(&mut cx, "kafka", raw.kafka.unwrap_or_default());
    let store = store(&mut cx, raw.store.unwrap_or_default());
    let limits = limits(&mut cx, raw.limits.unwrap_or_default());
    let telemetry = telemetry(&mut cx, raw.telemetry.unwrap_or_default());
    if raw.tasks.len() > limits.max_tasks as usize {
        cx.push(
            "tasks",
            format!(
                "{} tasks, but at most {} are allowed per file (limits.max_tasks); split them over several files or processes",
                raw.tasks.len(),
                limits.max_tasks
            ),
        );
    }
    let tasks: Vec<DumpTask> = raw
        .tasks
        .iter()
        .enumerate()
        .filter_map(|(i, t)| task(&mut cx, &format!("tasks[{i}]"), t, &store))
        .collect();
    check_task_overlaps(&mut cx, &tasks);
    let restore = raw.restore.map(|r| restore(&mut cx, r, &store, &kafka));
    let tier = tier(&mut cx, raw.tier.unwrap_or_default());
    if !cx.issues.is_empty() {
        return Err(cx.issues);
    }
    Ok(Config {
        kafka,
        store,
        limits,
        telemetry,
        tasks,
        restore: restore.flatten(),
        tier,
    })
}

fn kafka(cx: &mut Ctx<'_>, table: &str, raw: RawKafka) -> KafkaConfig {
    cx.unknown(table, &raw.unknown, KAFKA_KEYS);
    let key = |k: &str| format!("{table}.{k}");
    let servers: Vec<String> = match &raw.bootstrap_servers {
        None => vec![defaults::BOOTSTRAP.to_string()],
        Some(list) => list
            .items()
            .iter()
            .filter_map(|s| cx.text(&key("bootstrap_servers"), &Some(s.clone())))
            .collect(),
    };
    if servers.is_empty() {
        cx.push(
            key("bootstrap_servers"),
            "is empty; give at least one \"host:port\"",
        );
    }
    for s in &servers {
        let ok = s
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            cx.push(
                key("bootstrap_servers"),
                format!("{s:?} is not \"host:port\" (e.g. \"kafka-1:9092\")"),
            );
        }
    }
    let protocol = cx.choice(
        &key("security_protocol"),
        &raw.security_protocol,
        SecurityProtocol::Plaintext,
        |s| match s.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        },
        "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    );
    let mechanism = raw.sasl_mechanism.as_ref().map(|_| {
        cx.choice(
            &key("sasl_mechanism"),
            &raw.sasl_mechanism,
            SaslMechanism::Plain,
            |s| match s.to_ascii_uppercase().as_str() {
                "PLAIN" => Some(SaslMechanism::Plain),
                "SCRAM-SHA-256" => Some(SaslMechanism::ScramSha256),
                "SCRAM-SHA-512" => Some(SaslMechanism::ScramSha512),
                _ => None,
            },
            "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
        )
    });
    let username = cx.text(&key("username"), &raw.username);
    let password = cx.secret(&key("password"), &raw.password);
    let sasl = if protocol.uses_sasl() {
        if mechanism.is_none() {
            cx.push(key("sasl_mechanism"), format!("is required with security_protocol = \"{}\"; set PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", protocol.as_str()));
        }
        if username.as_deref().unwrap_or_default().is_empty() {
            cx.push(
                key("username"),
                format!(
                    "is required with security_protocol = \"{}\"",
                    protocol.as_str()
                ),
            );
        }
        if password.as_ref().is_none_or(|p| p.expose().is_empty()) && raw.password.is_none() {
            cx.push(key("password"), format!("is required with security_protocol = \"{}\"; use password = \"${{KAFKA_PASSWORD}}\" to keep it out of the file", protocol.as_str()));
        }
        match (mechanism, username.clone(), password.clone()) {
            (Some(mechanism), Some(username), Some(password)) => Some(Sasl {
                mechanism,
                username,
                password,
            }),
            _ => None,
        }
    } else {
        for (k, present) in [
            ("sasl_mechanism", mechanism.is_some()),
            ("username", username.is_some()),
            ("password", raw.password.is_some()),
        ] {
            if present {
                cx.push(key(k), format!("is set but security_protocol is \"{}\"; use SASL_PLAINTEXT or SASL_SSL, or remove it", protocol.as_str()));
            }
        }
        None
    };
    let tls = Tls {
        ca_location: cx
            .text(&key("ssl_ca_location"), &raw.ssl_ca_location)
            .map(PathBuf::from),
        certificate_location: cx
            .text(
                &key("ssl_certificate_location"),
                &raw.ssl_certificate_location,
            )
            .map(PathBuf::from),
        key_location: cx
            .text(&key("ssl_key_location"), &raw.ssl_key_location)
            .map(PathBuf::from),
        key_password: cx.secret(&key("ssl_key_password"), &raw.ssl_key_password),
    };
    if !protocol.uses_tls()
        && (tls.ca_location.is_some()
            || tls.certificate_location.is_some()
            || tls.key_location.is_some())
    {
        cx.push(
            key("ssl_ca_location"),
            format!(
                "TLS files are set but security_protocol is \"{}\"; use SSL or SASL_SSL",
                protocol.as_str()
            ),
        );
    }
    let mut properties = BTreeMap::new();
    for (k, v) in &raw.properties {
        let pkey = format!("{table}.properties.\"{k}\"");
        if let Some((_, instead)) = OWNED_PROPERTIES.iter().find(|(p, _)| p == k) {
            cx.push(pkey, format!("is managed by strata; set {instead} instead"));
            continue;
        }
        let value = match v {
            toml::Value::String(s) => cx.text(&pkey, &Some(s.clone())),
            toml::Value::Integer(i) => Some(i.to_string()),
            toml::Value::Boolean(b) => Some(b.to_string()),
            toml::Value::Float(f) => Some(f.to_string()),
            _ => {
                cx.push(pkey, "must be a string, number or boolean");
                None
            }
        };
        if let Some(value) = value {
            properties.insert(k.clone(), value);
        }
    }
    KafkaConfig {
        bootstrap_servers: servers,
        security_protocol: protocol,
        sasl,
        tls,
        client_id: cx
            .text(&key("client_id"), &raw.client_id)
            .unwrap_or_else(|| "strata".to_string()),
        properties,
    }
}

fn bucket_name_problem(b: &str) -> Option<String> {
    let ok_chars = b
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let ok_ends = b.starts_with(|c: char| c.is_ascii_alphanumeric())
        && b.ends_with(|c: char| c.is_ascii_alphanumeric());
    if (3..=63).contains(&b.len()) && ok_chars && ok_ends {
        None
    } else {
        Some(format!("bucket name {b:?} must be 3-63 characters of lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"))
    }
}

/// Parses `s3://bucket/prefix` or `file:///path` (also `file://./relative`).
pub(super) fn parse_store_url(s: &str) -> Result<StoreUrl, String> {
    if let Some(rest) = s.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if let Some(p) = bucket_name_problem(bucket) {
            return Err(p);
        }
        let prefix =
            crate::layout::DumpDir::parse(prefix).map_err(|e| format!("key prefix {e}"))?;
        Ok(StoreUrl::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.as_str().to_string(),
        })
    } else if let Some(rest) = s.strip_prefix("file://") {
        if rest.is_empty() {
            return Err("file:// needs a path, e.g. \"file:///var/lib/strata\"".into());
        }
        Ok(StoreUrl::File {
            root: PathBuf::from(rest),
        })
    } else {
        Err(format!(
            "{s:?} is neither \"s3://bucket/prefix\" nor \"file:///path\""
        ))
    }
}

fn store(cx: &mut Ctx<'_>, raw: RawStore) -> StoreConfig {
    cx.unknown("store", &raw.unknown, STORE_KEYS);
    let url_text = cx
        .text("store.url", &raw.url)
        .unwrap_or_else(|| defaults::STORE_URL.to_string());
    let url = parse_store_url(&url_text).unwrap_or_else(|m| {
        cx.push("store.url", m);
        StoreUrl::File {
            root: PathBuf::from("./strata-archive"),
        }
    });
    let access_key = cx.secret("store.access_key", &raw.access_key);
    let secret_key = cx.secret("store.secret_key", &raw.secret_key);
    let credentials = match (access_key, secret_key) {
        (Some(access_key), Some(secret_key)) => Credentials::Static {
            access_key,
            secret_key,
        },
        (None, None) => Credentials::DefaultChain,
        (Some(_), None) => {
            cx.push("store.secret_key", "is missing while store.access_key is set; set both, or neither to use the AWS default credential chain");
            Credentials::DefaultChain
        }
        (None, Some(_)) => {
            cx.push("store.access_key", "is missing while store.secret_key is set; set both, or neither to use the AWS default credential chain");
            Credentials::DefaultChain
        }
    };
    let endpoint = cx.text("store.endpoint", &raw.endpoint);
    if let Some(e) = &endpoint {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            cx.push(
                "store.endpoint",
                format!("{e:?} must start with http:// or https://"),
            );
        }
    }
    let part_size = cx.size("store.part_size", &raw.part_size, defaults::PART_SIZE);
    if part_size < ByteSize::mib(5) || part_size > ByteSize(5 << 30) {
        cx.push(
            "store.part_size",
            format!("{part_size} is outside S3's multipart limits; use 5MiB to 5GiB"),
        );
    }
    let max_attempts = raw.max_attempts.unwrap_or(defaults::MAX_ATTEMPTS);
    if max_attempts == 0 {
        cx.push("store.max_attempts", "must be at least 1");
    }
    StoreConfig {
        url,
        s3: S3Settings {
            region: cx
                .text("store.region", &raw.region)
                .unwrap_or_else(|| "us-east-1".to_string()),
            path_style: raw.path_style.unwrap_or(endpoint.is_some()),
            endpoint,
            credentials,
            create_bucket: raw.create_bucket.unwrap_or(false),
            part_size,
            max_attempts: max_attempts.max(1),
        },
    }
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

fn task(cx: &mut Ctx<'_>, k: &str, raw: &RawTask, store: &StoreConfig) -> Option<DumpTask> {
    cx.unknown(k, &raw.unknown, TASK_KEYS);
    let before = cx.issues.len();
    if let Some(kind) = cx.text(&format!("{k}.type"), &raw.kind) {
        if kind != "dump" {
            cx.push(format!("{k}.type"), format!("{kind:?} is not a task type strata runs; use \"dump\" (replication is not available yet)"));
        }
    }
    let name = match cx.text(&format!("{k}.name"), &raw.name) {
        None => {
            cx.push(
                format!("{k}.name"),
                "is missing; every task needs a name (it also names the consumer group)",
            );
            None
        }
        Some(n) => TaskName::parse(&n)
            .map_err(|m| cx.push(format!("{k}.name"), m))
            .ok(),
    };
    let topics = topic_selector(cx, k, &raw.topics, &raw.topic_regex, true);
    let start_offset = cx.choice(
        &format!("{k}.start_offset"),
        &raw.start_offset,
        StartOffset::Earliest,
        |s| match s {
            "earliest" => Some(StartOffset::Earliest),
            "latest" => Some(StartOffset::Latest),
            _ => None,
        },
        "\"earliest\" or \"latest\"",
    );
    let interval = raw
        .dump_interval_secs
        .unwrap_or(defaults::DUMP_INTERVAL_SECS);
    if interval == 0 || interval > 86_400 {
        cx.push(
            format!("{k}.dump_interval_secs"),
            format!("{interval} is outside 1..=86400 seconds"),
        );
    }
    let task_store = match cx.text(&format!("{k}.bucket"), &raw.bucket) {
        None => store.clone(),
        Some(b) => {
            if !matches!(store.url, StoreUrl::S3 { .. }) {
                cx.push(
                    format!("{k}.bucket"),
                    "applies to s3:// stores only; store.url is a file:// directory",
                );
            } else if let Some(p) = bucket_name_problem(&b) {
                cx.push(format!("{k}.bucket"), p);
            }
            store.with_bucket(&b)
        }
    };
    let directory = cx
        .text(&format!("{k}.directory"), &raw.directory)
        .unwrap_or_default();
    let directory = crate::layout::DumpDir::parse(&directory).unwrap_or_else(|e| {
        cx.push(format!("{k}.directory"), format!("{directory:?} {e}"));
        crate::layout::DumpDir::default()
    });
    let time_directory = time_directory(cx, &format!("{k}.time_directory"), &raw.time_directory);
    let time_zone = time_zone(cx, &format!("{k}.time_zone"), &raw.time_zone);
    let time_source = cx.choice(
        &format!("{k}.time_source"),
        &raw.time_source,
        TimeSource::Record,
        |s| match s {
            "record" => Some(TimeSource::Record),
            "dump" => Some(TimeSource::Dump),
            _ => None,
        },
        "\"record\" (exactly once) or \"dump\" (at least once)",
    );
    let kind = cx.choice(
        &format!("{k}.format"),
        &raw.format,
        FormatKind::Text,
        |s| s.parse().ok(),
        FormatKind::NAMES,
    );
    let compression = cx.choice(
        &format!("{k}.compression"),
        &raw.compression,
        FormatSpec::default_compression(kind),
        |s| s.parse().ok(),
        "\"none\", \"gzip\", \"zstd\" or \"snappy\"",
    );
    let text = text_options(
        cx,
        k,
        &raw.record_delimiter,
        raw.store_key,
        &raw.key_separator,
    );
    if kind != FormatKind::Text
        && (raw.record_delimiter.is_some()
            || raw.key_separator.is_some()
            || raw.store_key.is_some())
    {
        cx.push(format!("{k}.record_delimiter"), format!("record_delimiter, store_key and key_separator apply to format = \"text\" only; format \"{}\" keeps record boundaries and keys itself", kind.as_str()));
    }
    let format = FormatSpec::new(kind, compression, text)
        .map_err(|e| cx.push(format!("{k}.compression"), e.to_string()))
        .ok();
    let max_file_size = cx.size(
        &format!("{k}.max_file_size"),
        &raw.max_file_size,
        defaults::MAX_FILE_SIZE,
    );
    if max_file_size < ByteSize::mib(1) || max_file_size > ByteSize(4 << 30) {
        cx.push(
            format!("{k}.max_file_size"),
            format!("{max_file_size} is outside 1MiB..=4GiB"),
        );
    }
    let refresh = raw
        .topic_refresh_secs
        .unwrap_or(defaults::TOPIC_REFRESH_SECS);
    if refresh == 0 {
        cx.push(format!("{k}.topic_refresh_secs"), "must be at least 1");
    }
    if raw.topic_refresh_secs.is_some() && raw.topic_regex.is_none() {
        cx.push(format!("{k}.topic_refresh_secs"), "applies to topic_regex only: a topic list is watched by the consumer itself; remove it");
    }
    if cx.issues.len() > before {
        return None;
    }
    Some(DumpTask {
        name: name?,
        topics: topics?,
        start_offset,
        interval: Duration::from_secs(interval),
        store: task_store,
        directory,
        time_directory,
        time_zone,
        time_source,
        format: format?,
        max_file_size,
        topic_refresh: Duration::from_secs(refresh.max(1)),
    })
}

/// Two tasks writing the same topic into the same place would overwrite each other's objects.
fn check_task_overlaps(cx: &mut Ctx<'_>, tasks: &[DumpTask]) {
    for (i, a) in tasks.iter().enumerate() {
        for b in &tasks[i + 1..] {
            if a.name == b.name {
                cx.push(
                    "tasks",
                    format!(
                        "two tasks are named {:?}; names must be unique (each is a consumer group)",
                        a.name.as_str()
                    ),
                );
            }
            let same_place = a.store.url == b.store.url && a.directory == b.directory;
            let shared = match (&a.topics, &b.topics) {
                (TopicSelector::List(x), TopicSelector::List(y)) => {
                    x.iter().find(|t| y.contains(t)).cloned()
                }
                (x, y) if x == y => Some(x.to_string()),
                _ => None,
            };
            if let (true, Some(t)) = (same_place, shared) {
                cx.push("tasks", format!("tasks {:?} and {:?} both dump {t} into the same bucket and directory; give one another directory", a.name.as_str(), b.name.as_str()));
            }
        }
    }
}

fn timestamp(
    cx: &mut Ctx<'_>,
    k: &str,
    v: &Option<String>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let s = cx.text(k, v)?;
    chrono::DateTime::parse_from_rfc3339(&s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| {
            cx.push(
                k,
                format!("{s:?} is not an RFC 3339 time such as \"2026-11-29T00:00:00Z\""),
            )
        })
        .ok()
}

fn restore(
    cx: &mut Ctx<'_>,
    raw: RawRestore,
    store: &StoreConfig,
    source_kafka: &KafkaConfig,
) -> Option<RestoreConfig> {
    cx.unknown("restore", &raw.unknown, RESTORE_KEYS);
    let before = cx.issues.len();
    let rstore = match cx.text("restore.bucket", &raw.bucket) {
        None => store.clone(),
        Some(b) => {
            if let Some(p) = bucket_name_problem(&b) {
                cx.push("restore.bucket", p);
            }
            store.with_bucket(&b)
        }
    };
    let directory = cx
        .text("restore.directory", &raw.directory)
        .unwrap_or_default();
    let directory = crate::layout::DumpDir::parse(&directory).unwrap_or_else(|e| {
        cx.push("restore.directory", format!("{directory:?} {e}"));
        crate::layout::DumpDir::default()
    });
    let time_directory = time_directory(cx, "restore.time_directory", &raw.time_directory);
    let time_zone = time_zone(cx, "restore.time_zone", &raw.time_zone);
    let topics = topic_selector(cx, "restore", &raw.topics, &raw.topic_regex, false);
    let from = timestamp(cx, "restore.from", &raw.from);
    let to = timestamp(cx, "restore.to", &raw.to);
    if let (Some(f), Some(t)) = (from, to) {
        if f >= t {
            cx.push(
                "restore.to",
                format!(
                    "{} is not after restore.from {}",
                    t.to_rfc3339(),
                    f.to_rfc3339()
                ),
            );
        }
    }
    let prefix = cx
        .text("restore.target_prefix", &raw.target_prefix)
        .unwrap_or_default();
    if !prefix.is_empty() && !valid_topic_name(&prefix) {
        cx.push(
            "restore.target_prefix",
            format!(
                "{prefix:?} would make invalid topic names; use letters, digits, '.', '_', '-'"
            ),
        );
    }
    for (src, dst) in &raw.topic_map {
        if !valid_topic_name(dst) {
            cx.push(
                format!("restore.topic_map.\"{src}\""),
                format!("{dst:?} is not a valid Kafka topic name"),
            );
        }
    }
    let partitioning = cx.choice(
        "restore.partitioning",
        &raw.partitioning,
        Partitioning::Original,
        |s| match s {
            "original" => Some(Partitioning::Original),
            "key-hash" | "key_hash" => Some(Partitioning::KeyHash),
            _ => None,
        },
        "\"original\" or \"key-hash\"",
    );
    if let Some(p) = raw.partitions {
        if p < 1 {
            cx.push("restore.partitions", "must be at least 1");
        }
    }
    let replication_factor = raw.replication_factor.unwrap_or(1);
    if replication_factor < 1 {
        cx.push("restore.replication_factor", "must be at least 1");
    }
    let rate = raw.rate_limit_mib_per_sec;
    if rate.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        cx.push(
            "restore.rate_limit_mib_per_sec",
            "must be a positive number of MiB per second",
        );
    }
    let text = text_options(
        cx,
        "restore",
        &raw.record_delimiter,
        raw.store_key,
        &raw.key_separator,
    );
    let kafka = match raw.kafka {
        Some(k) => kafka(cx, "restore.kafka", k),
        None => source_kafka.clone(),
    };
    if cx.issues.len() > before {
        return None;
    }
    Some(RestoreConfig {
        store: rstore,
        directory,
        time_directory,
        time_zone,
        topics,
        from,
        to,
        naming: TopicNaming {
            map: raw.topic_map,
            prefix,
        },
        partitioning,
        create_topics: raw.create_topics.unwrap_or(true),
        partitions: raw.partitions,
        replication_factor,
        rate_limit_bytes_per_sec: rate.map(|r| r * 1024.0 * 1024.0),
        checkpoint: raw.checkpoint.map(PathBuf::from),
        skip_corrupt: raw.skip_corrupt.unwrap_or(false),
        exactly_once: raw.exactly_once.unwrap_or(false),
        text,
        kafka,
    })
}

fn tier(cx: &mut Ctx<'_>, raw: RawTier) -> TierConfig {
    cx.unknown("tier", &raw.unknown, TIER_KEYS);
    let listen_text = cx
        .text("tier.listen", &raw.listen)
        .unwrap_or_else(|| defaults::TIER_LISTEN.to_string());
    let listen = listen_text.parse::<SocketAddr>().unwrap_or_else(|_| {
        cx.push(
            "tier.listen",
            format!("{listen_text:?} is not \"ip:port\" (e.g. \"127.0.0.1:9190\")"),
        );
        SocketAddr::from(([127, 0, 0, 1], 9190))
    });
    if !listen.ip().is_loopback() {
        cx.push("tier.listen", format!("{listen} is not a loopback address; the bridge and strata tier run on the same host, keep it on 127.0.0.1"));
    }
    let prefix_text = cx
        .text("tier.prefix", &raw.prefix)
        .unwrap_or_else(|| defaults::TIER_PREFIX.to_string());
    let prefix = crate::layout::DumpDir::parse(&prefix_text).unwrap_or_else(|e| {
        cx.push("tier.prefix", format!("{prefix_text:?} {e}"));
        crate::layout::DumpDir::default()
    });
    let chunk_size = cx.size("tier.chunk_size", &raw.chunk_size, defaults::CHUNK_SIZE);
    if chunk_size < ByteSize(64 << 10) || chunk_size > ByteSize::mib(256) {
        cx.push(
            "tier.chunk_size",
            format!("{chunk_size} is outside 64KiB..=256MiB"),
        );
    }
    let compress_chunks = cx.choice(
        "tier.compression",
        &raw.compression,
        false,
        |s| match s {
            "zstd" => Some(true),
            "none" => Some(false),
            _ => None,
        },
        "\"zstd\" or \"none\"",
    );
    let cache_size = cx.size("tier.cache_size", &raw.cache_size, defaults::CACHE_SIZE);
    if cache_size < chunk_size.max(ByteSize(1)) {
        cx.push(
            "tier.cache_size",
            format!("{cache_size} is smaller than one chunk ({chunk_size})"),
        );
    }
    let upload_concurrency = raw
        .upload_concurrency
        .unwrap_or(defaults::UPLOAD_CONCURRENCY);
    if upload_concurrency == 0 {
        cx.push("tier.upload_concurrency", "must be at least 1");
    }
    TierConfig {
        listen,
        prefix,
        chunk_size,
        compress_chunks,
        cache_dir: cx.text("tier.cache_dir", &raw.cache_dir).map(PathBuf::from),
        cache_size,
        prefetch_chunks: raw.prefetch_chunks.unwrap_or(defaults::PREFETCH_CHUNKS),
        upload_concurrency: upload_concurrency.max(1),
    }
}
