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
        "sasl.oauthbearer.method",
        Owned::Key("kafka.sasl_mechanism (OAUTHBEARER or AWS_MSK_IAM)"),
    ),
    (
        "sasl.oauthbearer.config",
        Owned::Key("kafka.sasl_mechanism (OAUTHBEARER or AWS_MSK_IAM)"),
    ),
    (
        "sasl.oauthbearer.token.endpoint.url",
        Owned::Key("kafka.oauth_token_endpoint"),
    ),
    (
        "sasl.oauthbearer.client.id",
        Owned::Key("kafka.oauth_client_id"),
    ),
    (
        "sasl.oauthbearer.client.secret",
        Owned::Key("kafka.oauth_client_secret"),
    ),
    ("sasl.oauthbearer.scope", Owned::Key("kafka.oauth_scope")),
    (
        "sasl.oauthbearer.extensions",
        Owned::Key("kafka.oauth_extensions"),
    ),
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

/// The keys of each kind of SASL login, and the mechanisms that take them.
const LOGIN_KEYS: [(&str, Takes, &str); 9] = [
    (
        "username",
        SaslMechanism::uses_password,
        PASSWORD_MECHANISMS,
    ),
    (
        "password",
        SaslMechanism::uses_password,
        PASSWORD_MECHANISMS,
    ),
    ("oauth_token_endpoint", is_oauth, "OAUTHBEARER"),
    ("oauth_client_id", is_oauth, "OAUTHBEARER"),
    ("oauth_client_secret", is_oauth, "OAUTHBEARER"),
    ("oauth_scope", is_oauth, "OAUTHBEARER"),
    ("oauth_extensions", is_oauth, "OAUTHBEARER"),
    ("aws_region", is_msk, "AWS_MSK_IAM"),
    ("aws_role_arn", is_msk, "AWS_MSK_IAM"),
];

/// Whether a mechanism takes a key.
type Takes = fn(SaslMechanism) -> bool;

const PASSWORD_MECHANISMS: &str = "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512";
const MECHANISMS: &str = "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM";

fn is_oauth(m: SaslMechanism) -> bool {
    m == SaslMechanism::OAuthBearer
}

fn is_msk(m: SaslMechanism) -> bool {
    m == SaslMechanism::AwsMskIam
}

/// Whether the login key `k` of `raw` is set.
fn login_key_set(raw: &RawKafka, k: &str) -> bool {
    match k {
        "username" => raw.username.is_some(),
        "password" => raw.password.is_some(),
        "oauth_token_endpoint" => raw.oauth_token_endpoint.is_some(),
        "oauth_client_id" => raw.oauth_client_id.is_some(),
        "oauth_client_secret" => raw.oauth_client_secret.is_some(),
        "oauth_scope" => raw.oauth_scope.is_some(),
        "oauth_extensions" => raw.oauth_extensions.is_some(),
        "aws_region" => raw.aws_region.is_some(),
        "aws_role_arn" => raw.aws_role_arn.is_some(),
        _ => false,
    }
}

/// The SASL login: with a SASL protocol, a mechanism and the keys of its kind of login (user
/// and password, an OAuth client, or AWS settings) and no other kind's; without one, none.
fn sasl(cx: &mut Ctx<'_>, table: &str, raw: &RawKafka, protocol: SecurityProtocol) -> Option<Sasl> {
    let key = |k: &str| format!("{table}.{k}");
    let mechanism = mechanism(cx, &key("sasl_mechanism"), &raw.sasl_mechanism);
    if !protocol.uses_sasl() {
        let set = std::iter::once("sasl_mechanism")
            .filter(|_| raw.sasl_mechanism.is_some())
            .chain(
                LOGIN_KEYS
                    .iter()
                    .map(|(k, ..)| *k)
                    .filter(|k| login_key_set(raw, k)),
            );
        for k in set.collect::<Vec<_>>() {
            cx.push(key(k), format!("is set but security_protocol is \"{}\"; use SASL_PLAINTEXT or SASL_SSL, or remove it", protocol.as_str()));
        }
        return None;
    }
    if raw.sasl_mechanism.is_none() {
        let with = format!("security_protocol = \"{}\"", protocol.as_str());
        cx.push(
            key("sasl_mechanism"),
            format!("is required with {with}; set {MECHANISMS}"),
        );
        // Most logins are a user and a password: name what else they lack, unless the keys
        // set show another kind of login.
        let other_kind = LOGIN_KEYS
            .iter()
            .any(|(k, takes, _)| !takes(SaslMechanism::Plain) && login_key_set(raw, k));
        if !other_kind {
            password_login(cx, table, raw, SaslMechanism::Plain, &with);
        }
        return None;
    }
    let mechanism = mechanism?;
    for (k, takes, which) in LOGIN_KEYS {
        if login_key_set(raw, k) && !takes(mechanism) {
            cx.push(
                key(k),
                format!(
                    "is only for sasl_mechanism {which}, not {}; remove it",
                    mechanism.as_str()
                ),
            );
        }
    }
    match mechanism {
        SaslMechanism::OAuthBearer => oauth_client(cx, table, raw).map(Sasl::OAuthBearer),
        SaslMechanism::AwsMskIam => Some(Sasl::AwsMskIam(msk_iam(cx, table, raw, protocol))),
        _ => password_login(
            cx,
            table,
            raw,
            mechanism,
            &format!("sasl_mechanism = \"{}\"", mechanism.as_str()),
        ),
    }
}

/// `sasl_mechanism`, when set and known.
fn mechanism(cx: &mut Ctx<'_>, key: &str, raw: &Option<String>) -> Option<SaslMechanism> {
    let name = cx.text(key, raw)?;
    let m = match name.to_ascii_uppercase().as_str() {
        "PLAIN" => SaslMechanism::Plain,
        "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
        "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
        "OAUTHBEARER" => SaslMechanism::OAuthBearer,
        "AWS_MSK_IAM" => SaslMechanism::AwsMskIam,
        "GSSAPI" => {
            cx.push(key, "GSSAPI (Kerberos) is not supported: strata's Kafka client is built without Kerberos; use SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM (docs/configuration.md, Kafka)");
            return None;
        }
        _ => {
            cx.push(key, format!("{name:?} is not one of {MECHANISMS}"));
            return None;
        }
    };
    Some(m)
}

/// PLAIN and SCRAM: a user name and its password, both required (by `required_by`, a setting).
fn password_login(
    cx: &mut Ctx<'_>,
    table: &str,
    raw: &RawKafka,
    mechanism: SaslMechanism,
    required_by: &str,
) -> Option<Sasl> {
    let key = |k: &str| format!("{table}.{k}");
    let username = cx.text(&key("username"), &raw.username);
    let password = cx.secret(&key("password"), &raw.password);
    let with = format!("is required with {required_by}");
    if username.as_deref().unwrap_or_default().is_empty() {
        cx.push(key("username"), with.clone());
    }
    if raw.password.is_none() {
        cx.push(
            key("password"),
            format!("{with}; use password = \"${{KAFKA_PASSWORD}}\" to keep it out of the file"),
        );
    }
    Some(Sasl::Password {
        mechanism,
        username: username.filter(|u| !u.is_empty())?,
        password: password?,
    })
}

/// OAUTHBEARER: the OAuth client librdkafka fetches tokens for (client credentials grant).
fn oauth_client(cx: &mut Ctx<'_>, table: &str, raw: &RawKafka) -> Option<OAuthClient> {
    let key = |k: &str| format!("{table}.{k}");
    let required = "is required with sasl_mechanism = \"OAUTHBEARER\"";
    let endpoint = cx.text(&key("oauth_token_endpoint"), &raw.oauth_token_endpoint);
    match &endpoint {
        None if raw.oauth_token_endpoint.is_none() => cx.push(
            key("oauth_token_endpoint"),
            format!("{required}: the OIDC provider's token URL, e.g. \"https://login.example.com/oauth2/token\""),
        ),
        Some(url) => {
            if let Some(why) = token_endpoint_problem(url) {
                cx.push(key("oauth_token_endpoint"), why);
            }
        }
        None => {}
    }
    let client_id = cx.text(&key("oauth_client_id"), &raw.oauth_client_id);
    if raw.oauth_client_id.is_none() || client_id.as_deref() == Some("") {
        cx.push(key("oauth_client_id"), required);
    }
    let client_secret = cx.secret(&key("oauth_client_secret"), &raw.oauth_client_secret);
    if raw.oauth_client_secret.is_none() {
        cx.push(
            key("oauth_client_secret"),
            format!("{required}; use oauth_client_secret = \"${{KAFKA_OAUTH_CLIENT_SECRET}}\" to keep it out of the file"),
        );
    }
    let scope = cx.text(&key("oauth_scope"), &raw.oauth_scope);
    if scope.as_deref().is_some_and(|s| s.trim().is_empty()) {
        cx.push(
            key("oauth_scope"),
            "is empty; leave it out for the provider's default scope",
        );
    }
    let mut extensions = BTreeMap::new();
    for (name, value) in raw.oauth_extensions.iter().flatten() {
        let ekey = format!("{table}.oauth_extensions.{name}");
        let Some(value) = cx.text(&ekey, &Some(value.clone())) else {
            continue;
        };
        match extension_problem(name, &value) {
            Some(why) => cx.push(ekey, why),
            None => {
                extensions.insert(name.clone(), value);
            }
        }
    }
    Some(OAuthClient {
        token_endpoint: endpoint.filter(|u| token_endpoint_problem(u).is_none())?,
        client_id: client_id.filter(|c| !c.is_empty())?,
        client_secret: client_secret?,
        scope,
        extensions,
    })
}

/// Why `url` cannot be a token endpoint: not http(s), no host, or user info (the endpoint is
/// named in errors; credentials belong in oauth_client_id and oauth_client_secret).
pub(in crate::config) fn token_endpoint_problem(url: &str) -> Option<String> {
    let lower = url.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
    else {
        return Some(format!(
            "{url:?} is not an http:// or https:// URL (the token endpoint of the OIDC provider)"
        ));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Some("holds user info (\"user:password@\"); remove it and set oauth_client_id and oauth_client_secret".to_string());
    }
    if authority.is_empty() || authority.starts_with(':') {
        return Some(format!("{url:?} names no host"));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!("{url:?} holds spaces or control characters"));
    }
    None
}

/// Why `name = value` cannot be a SASL/OAUTHBEARER extension (RFC 7628: the name is letters,
/// not `auth`; the value printable; librdkafka joins them with commas).
pub(in crate::config) fn extension_problem(name: &str, value: &str) -> Option<String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphabetic()) {
        return Some("the extension name must be letters only (RFC 7628)".to_string());
    }
    if name == "auth" {
        return Some("\"auth\" is reserved for the token itself (RFC 7628)".to_string());
    }
    if value.contains(',') {
        return Some("the value must not hold a comma".to_string());
    }
    if !value.chars().all(|c| (' '..='~').contains(&c)) {
        return Some("the value must be printable ASCII".to_string());
    }
    None
}

/// AWS_MSK_IAM: over TLS only (MSK's IAM listeners take nothing else), an optional region and
/// role; credentials always come from the AWS default chain.
fn msk_iam(cx: &mut Ctx<'_>, table: &str, raw: &RawKafka, protocol: SecurityProtocol) -> MskIam {
    let key = |k: &str| format!("{table}.{k}");
    if protocol != SecurityProtocol::SaslSsl {
        cx.push(
            key("security_protocol"),
            format!("is \"{}\" but sasl_mechanism = \"AWS_MSK_IAM\" needs \"SASL_SSL\": MSK's IAM listeners (ports 9098, 9198) take TLS only", protocol.as_str()),
        );
    }
    let region = cx.text(&key("aws_region"), &raw.aws_region);
    if let Some(r) = &region {
        let ok = !r.is_empty()
            && r.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            cx.push(
                key("aws_region"),
                format!("{r:?} is not an AWS region name (e.g. \"eu-west-1\")"),
            );
        }
    }
    let role = cx.text(&key("aws_role_arn"), &raw.aws_role_arn);
    if let Some(arn) = &role {
        if !(arn.starts_with("arn:") && arn.contains(":role/")) {
            cx.push(
                key("aws_role_arn"),
                format!("{arn:?} is not an IAM role ARN (\"arn:aws:iam::123456789012:role/NAME\")"),
            );
        }
    }
    MskIam {
        region,
        role: role.map(|role_arn| AssumeRole {
            role_arn,
            external_id: None,
            session_name: AssumeRole::DEFAULT_SESSION_NAME.to_string(),
            sts_endpoint: None,
        }),
    }
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
