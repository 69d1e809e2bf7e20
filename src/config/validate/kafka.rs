//! `[kafka]` (and `[restore.kafka]`): servers, security, extra librdkafka properties.

use super::*;

/// librdkafka properties strata sets itself; overriding them would break its guarantees.
pub(in crate::config) const OWNED_PROPERTIES: &[(&str, &str)] = &[
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

pub(super) fn kafka(cx: &mut Ctx<'_>, table: &str, raw: RawKafka) -> KafkaConfig {
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
