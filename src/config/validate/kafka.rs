//! `[kafka]` (and `[restore.kafka]`): servers, security, extra librdkafka properties.

use super::*;

/// Why strata owns a librdkafka property.
#[derive(Debug, Clone, Copy)]
pub(in crate::config) enum Owned {
    /// Set through one of strata's own keys (named here): refused in every Kafka table.
    Key(&'static str),
    /// Set by strata for dump's and replicate's guarantees (the reason): refused wherever a
    /// dump or replicate task uses the table. Restore guards its own producer settings (it
    /// ignores them with a warning), so a table only restore uses keeps them.
    Guarantee(&'static str),
}

/// Who creates clients from a Kafka table's properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::config) enum Clients {
    /// Dump or replicate tasks (maybe restore too): `[kafka]` of a file with `[[tasks]]`, a
    /// replicate task's `[tasks.peer]`.
    Tasks,
    /// Restore only: `[restore.kafka]`, or `[kafka]` of a file without `[[tasks]]`.
    RestoreOnly,
}

const ISOLATION: &str = "dump and replicate read only records of committed transactions \
(read_committed); read_uncommitted would archive or copy records of aborted transactions";
const TXN_ID: &str = "replicate gives each source partition's producer a transactional id of its \
own; one fixed id would make a task's partition producers fence each other";
const TXN_TIMEOUT: &str = "replicate sets it (60 s) so that the open transaction of a crashed \
worker is aborted soon; a longer one holds back read_committed readers of the target longer";
const ACKS: &str = "replicate produces with acks=all; fewer acknowledgements lose records the \
target acknowledged when a broker fails";
const IDEMPOTENCE: &str = "replicate needs idempotent producers: without them a retried batch can \
land twice or out of order, and transactions require them";

/// librdkafka properties strata sets itself; overriding them would break its guarantees. One
/// table for every Kafka table of the config, read through [`refused_property`].
pub(in crate::config) const OWNED_PROPERTIES: &[(&str, Owned)] = &[
    ("bootstrap.servers", Owned::Key("kafka.bootstrap_servers")),
    ("security.protocol", Owned::Key("kafka.security_protocol")),
    ("sasl.mechanism", Owned::Key("kafka.sasl_mechanism")),
    ("sasl.mechanisms", Owned::Key("kafka.sasl_mechanism")),
    ("sasl.username", Owned::Key("kafka.username")),
    ("sasl.password", Owned::Key("kafka.password")),
    (
        "group.id",
        Owned::Key("the task name (one consumer group per task)"),
    ),
    (
        "enable.auto.commit",
        Owned::Key("nothing: strata commits only after an upload is durable"),
    ),
    (
        "enable.auto.offset.store",
        Owned::Key("nothing: strata commits only after an upload is durable"),
    ),
    ("auto.offset.reset", Owned::Key("tasks[].start_offset")),
    (
        "enable.partition.eof",
        Owned::Key("nothing: `strata dump --once` sets it"),
    ),
    (
        "partition.assignment.strategy",
        Owned::Key("nothing: strata uses cooperative-sticky so a rebalance only drops the buffers of moved partitions"),
    ),
    ("isolation.level", Owned::Guarantee(ISOLATION)),
    ("transactional.id", Owned::Guarantee(TXN_ID)),
    ("transaction.timeout.ms", Owned::Guarantee(TXN_TIMEOUT)),
    ("acks", Owned::Guarantee(ACKS)),
    // librdkafka's other name for acks.
    ("request.required.acks", Owned::Guarantee(ACKS)),
    ("enable.idempotence", Owned::Guarantee(IDEMPOTENCE)),
];

/// The guard every librdkafka property of the config goes through (by its librdkafka name):
/// why strata refuses `name` in a table whose properties reach `clients`, or `None`.
pub(in crate::config) fn refused_property(name: &str, clients: Clients) -> Option<String> {
    let (_, owned) = OWNED_PROPERTIES.iter().find(|(p, _)| *p == name)?;
    match (owned, clients) {
        (Owned::Key(instead), _) => Some(format!("is managed by strata; set {instead} instead")),
        (Owned::Guarantee(why), Clients::Tasks) => Some(format!(
            "is managed by strata for dump and replicate tasks: {why}; remove it"
        )),
        (Owned::Guarantee(_), Clients::RestoreOnly) => None,
    }
}

/// A Kafka table (`[kafka]`, `[restore.kafka]`, `[tasks.peer]`) whose properties reach `clients`;
/// `known`: the table's keys, for its unknown ones.
pub(super) fn kafka(
    cx: &mut Ctx<'_>,
    table: &str,
    raw: RawKafka,
    clients: Clients,
    known: &[&str],
) -> KafkaConfig {
    cx.unknown(table, &raw.unknown, known);
    let key = |k: &str| format!("{table}.{k}");
    let bootstrap_servers = servers(cx, &key("bootstrap_servers"), &raw.bootstrap_servers);
    let security_protocol = protocol(cx, &key("security_protocol"), &raw.security_protocol);
    let sasl = sasl(cx, table, &raw, security_protocol);
    let tls = tls(cx, table, &raw, security_protocol);
    let properties = properties(cx, table, &raw.properties, clients);
    KafkaConfig {
        bootstrap_servers,
        security_protocol,
        sasl,
        tls,
        client_id: cx
            .text(&key("client_id"), &raw.client_id)
            .unwrap_or_else(|| "strata".to_string()),
        properties,
    }
}

fn servers(cx: &mut Ctx<'_>, key: &str, raw: &Option<StringList>) -> Vec<String> {
    let servers: Vec<String> = match raw {
        None => vec![defaults::BOOTSTRAP.to_string()],
        Some(list) => list
            .items()
            .iter()
            .filter_map(|s| cx.text(key, &Some(s.clone())))
            .collect(),
    };
    if servers.is_empty() {
        cx.push(key, "is empty; give at least one \"host:port\"");
    }
    for s in &servers {
        let ok = s
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            cx.push(
                key,
                format!("{s:?} is not \"host:port\" (e.g. \"kafka-1:9092\")"),
            );
        }
    }
    servers
}

fn protocol(cx: &mut Ctx<'_>, key: &str, raw: &Option<String>) -> SecurityProtocol {
    cx.choice(
        key,
        raw,
        SecurityProtocol::Plaintext,
        |s| match s.to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Some(SecurityProtocol::Plaintext),
            "SSL" => Some(SecurityProtocol::Ssl),
            "SASL_PLAINTEXT" => Some(SecurityProtocol::SaslPlaintext),
            "SASL_SSL" => Some(SecurityProtocol::SaslSsl),
            _ => None,
        },
        "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    )
}

/// The SASL login: all of mechanism, user and password with a SASL protocol, none without.
fn sasl(cx: &mut Ctx<'_>, table: &str, raw: &RawKafka, protocol: SecurityProtocol) -> Option<Sasl> {
    let key = |k: &str| format!("{table}.{k}");
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
    if !protocol.uses_sasl() {
        for (k, present) in [
            ("sasl_mechanism", mechanism.is_some()),
            ("username", username.is_some()),
            ("password", raw.password.is_some()),
        ] {
            if present {
                cx.push(key(k), format!("is set but security_protocol is \"{}\"; use SASL_PLAINTEXT or SASL_SSL, or remove it", protocol.as_str()));
            }
        }
        return None;
    }
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
    Some(Sasl {
        mechanism: mechanism?,
        username: username?,
        password: password?,
    })
}

/// TLS files, which only a TLS protocol uses.
fn tls(cx: &mut Ctx<'_>, table: &str, raw: &RawKafka, protocol: SecurityProtocol) -> Tls {
    let key = |k: &str| format!("{table}.{k}");
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
    tls
}

/// `[<table>.properties]`: extra librdkafka properties as strings, strata's own refused.
fn properties(
    cx: &mut Ctx<'_>,
    table: &str,
    raw: &BTreeMap<String, toml::Value>,
    clients: Clients,
) -> BTreeMap<String, String> {
    let mut properties = BTreeMap::new();
    for (k, v) in raw {
        let pkey = format!("{table}.properties.\"{k}\"");
        if let Some(why) = refused_property(k, clients) {
            cx.push(pkey, why);
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
    properties
}
