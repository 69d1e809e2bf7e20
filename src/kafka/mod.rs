//! Kafka clients built from [`KafkaConfig`]: client settings (security included), the
//! [`source`] every consuming mode reads through, an admin helper for topics and watermarks,
//! short-lived readers, and reading a group's committed offsets.

pub mod admin;
pub mod group_offsets;
pub mod msk_iam;
pub mod refusal;
pub mod source;

use crate::config::{ClientKind, KafkaConfig, Sasl};
use rdkafka::consumer::{Consumer, ConsumerContext};
use rdkafka::error::KafkaResult;
use rdkafka::{ClientConfig, TopicPartitionList};
use std::time::Duration;

pub use admin::Admin;
pub use refusal::{Refusal, Watch};
pub use source::{Batch, Tp};

/// Timeout for metadata and admin calls; long enough for a slow broker, short enough to fail.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of Kafka operations, naming the cluster or topic and the likely fix.
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    #[error("kafka client for {servers}: {source}")]
    Client {
        servers: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },
    #[error("cannot reach Kafka at {servers}: {detail}; check kafka.bootstrap_servers, the security settings and that the brokers are up")]
    Unreachable { servers: String, detail: String },
    #[error("topic {topic:?}: {detail}")]
    Topic { topic: String, detail: String },
    #[error("Kafka at {servers} refused the login of {who}: {detail}; {fix}")]
    LoginRefused {
        servers: String,
        who: String,
        detail: String,
        fix: &'static str,
    },
    /// No OAUTHBEARER token to log in with: the OIDC provider's token endpoint refused or
    /// failed, or (AWS_MSK_IAM) no AWS credentials could sign one.
    #[error(
        "no login token for Kafka at {servers}: {source_of_tokens} gave none: {detail}; {fix}"
    )]
    NoToken {
        servers: String,
        /// `the OAuth token endpoint URL (client "id")` or `the AWS credentials of ...`.
        source_of_tokens: String,
        detail: String,
        fix: &'static str,
    },
    #[error("TLS with Kafka at {servers} failed: {detail}; check that {ca} holds the CA that signed the brokers' certificates{client}")]
    Tls {
        servers: String,
        detail: String,
        ca: String,
        client: String,
    },
    #[error("Kafka at {servers} does not authorize {principal}: {detail}; grant the ACLs this mode needs (see docs/operations.md, Kafka ACLs)")]
    NotAuthorized {
        servers: String,
        principal: String,
        detail: String,
    },
}

/// librdkafka settings of a client of `kind`: what every client shares, and the user's
/// properties for that kind ([`KafkaConfig::properties_for`]). A mode that sets its own settings
/// after these and wants the user's to win applies `properties_for` again after them.
pub fn client_config(k: &KafkaConfig, kind: ClientKind) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", k.bootstrap_servers.join(","))
        .set(
            "security.protocol",
            k.security_protocol.as_str().to_ascii_lowercase(),
        )
        .set("client.id", &k.client_id)
        // librdkafka logs through our handler; keep its own chatter at warnings.
        .set("log_level", "4");
    match &k.sasl {
        None => {}
        Some(Sasl::Password {
            mechanism,
            username,
            password,
        }) => {
            c.set("sasl.mechanism", mechanism.as_str())
                .set("sasl.username", username)
                .set("sasl.password", password.expose());
        }
        // librdkafka's own OIDC client: it fetches a token with the client credentials grant
        // (HTTP Basic auth) and refreshes it at 80% of its life, on a thread of its own.
        Some(Sasl::OAuthBearer(o)) => {
            c.set("sasl.mechanism", "OAUTHBEARER")
                .set("sasl.oauthbearer.method", "oidc")
                .set("sasl.oauthbearer.token.endpoint.url", &o.token_endpoint)
                .set("sasl.oauthbearer.client.id", &o.client_id)
                .set("sasl.oauthbearer.client.secret", o.client_secret.expose());
            if let Some(scope) = &o.scope {
                c.set("sasl.oauthbearer.scope", scope);
            }
            if !o.extensions.is_empty() {
                let e: Vec<String> = o
                    .extensions
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                c.set("sasl.oauthbearer.extensions", e.join(","));
            }
        }
        // Tokens come from the contexts' refresh hook (msk_iam), which this names the settings to.
        Some(Sasl::AwsMskIam(m)) => {
            c.set("sasl.mechanism", "OAUTHBEARER")
                .set("sasl.oauthbearer.config", msk_iam::oauthbearer_config(m));
        }
    }
    let tls = &k.tls;
    if let Some(p) = &tls.ca_location {
        c.set("ssl.ca.location", p.display().to_string());
    }
    if let Some(p) = &tls.certificate_location {
        c.set("ssl.certificate.location", p.display().to_string());
    }
    if let Some(p) = &tls.key_location {
        c.set("ssl.key.location", p.display().to_string());
    }
    if let Some(p) = &tls.key_password {
        c.set("ssl.key.password", p.expose());
    }
    for (key, value) in k.properties_for(kind) {
        c.set(key, value);
    }
    c
}

/// strata's short-lived readers (progress markers, positions, checkpoints, `--once` coverage):
/// their [`Watch`] keeps end of partition, which is how they learn they are done, out of the
/// error log.
pub type Reader = rdkafka::consumer::BaseConsumer<Watch>;

/// Creates a [`Reader`] from client settings (with its login token at once, for AWS_MSK_IAM:
/// readers make blocking calls before they poll).
pub fn reader(c: &ClientConfig) -> rdkafka::error::KafkaResult<Reader> {
    let r: Reader = c.create_with_context(Watch::default())?;
    msk_iam::prime(r.client(), c)
        .map_err(|e| rdkafka::error::KafkaError::ClientCreation(e.to_string()))?;
    Ok(r)
}

/// A client of consumer group `group` that never joins it: it reads the group's committed
/// offsets over a connection of its own. A member's requests to the group coordinator queue
/// behind its JoinGroup, which the coordinator holds while the group rebalances (up to a dead
/// member's session timeout), so the member itself cannot ask meanwhile.
pub fn group_reader(k: &KafkaConfig, group: &str) -> Result<Reader, KafkaError> {
    let mut c = client_config(k, ClientKind::Consumer);
    c.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false");
    reader(&c).map_err(|source| KafkaError::Client {
        servers: servers(k),
        source,
    })
}

/// A group's committed offsets for the partitions of `tpl`. Asked again (for up to
/// [`ADMIN_TIMEOUT`]) while the group's coordinator settles: a new cluster answers
/// "not coordinator" until its `__consumer_offsets` topic exists, and a coordinator that moves
/// or loads answers the same for a moment; a first `--once` run on a fresh cluster ended with
/// "cannot reach Kafka" on that answer.
pub fn committed_offsets<X, C>(
    c: &C,
    tpl: &TopicPartitionList,
    timeout: Duration,
) -> KafkaResult<TopicPartitionList>
where
    X: ConsumerContext,
    C: Consumer<X>,
{
    while_coordinator_settles(ADMIN_TIMEOUT, std::thread::sleep, || {
        c.committed_offsets(tpl.clone(), timeout)
    })
}

/// Commits offsets for the group of `c` (a [`group_reader`]: it never joins, so the
/// coordinator refuses the commit while the group has active members). Asked again while the
/// coordinator settles, as [`committed_offsets`].
pub fn commit_offsets<X, C>(c: &C, tpl: &TopicPartitionList) -> KafkaResult<()>
where
    X: ConsumerContext,
    C: Consumer<X>,
{
    while_coordinator_settles(ADMIN_TIMEOUT, std::thread::sleep, || {
        c.commit(tpl, rdkafka::consumer::CommitMode::Sync)
    })
}

/// Coordinator answers a wait heals.
fn coordinator_settling(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::*;
    matches!(
        e.rdkafka_error_code(),
        Some(NotCoordinator | CoordinatorNotAvailable | CoordinatorLoadInProgress)
    )
}

/// Runs `op` until it gives anything but a settling coordinator, or until pauses of `sleep`
/// (100 ms, doubling to 2 s) would pass `wait`.
fn while_coordinator_settles<T>(
    wait: Duration,
    mut sleep: impl FnMut(Duration),
    mut op: impl FnMut() -> KafkaResult<T>,
) -> KafkaResult<T> {
    let mut pause = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    loop {
        match op() {
            Err(e) if coordinator_settling(&e) && waited + pause <= wait => {
                tracing::debug!(error = %e, "the group coordinator is not ready; asking again");
                sleep(pause);
                waited += pause;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            r => return r,
        }
    }
}

/// The servers as one string, for messages.
pub fn servers(k: &KafkaConfig) -> String {
    k.bootstrap_servers.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn oauthbearer_settings_reach_librdkafkas_oidc_client() {
        let c = Config::from_toml(
            r#"[kafka]
security_protocol = "SASL_SSL"
sasl_mechanism = "OAUTHBEARER"
oauth_token_endpoint = "https://idp.example.com/token"
oauth_client_id = "strata"
oauth_client_secret = "${SECRET}"
oauth_scope = "kafka read"
oauth_extensions = { logicalCluster = "lkc-1", identityPoolId = "pool-2" }
"#,
            "t",
            |k| (k == "SECRET").then(|| "s3cr3t".to_string()),
        )
        .unwrap();
        let cc = client_config(&c.kafka, ClientKind::Consumer);
        assert_eq!(cc.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert_eq!(cc.get("sasl.oauthbearer.method"), Some("oidc"));
        assert_eq!(
            cc.get("sasl.oauthbearer.token.endpoint.url"),
            Some("https://idp.example.com/token")
        );
        assert_eq!(cc.get("sasl.oauthbearer.client.id"), Some("strata"));
        assert_eq!(cc.get("sasl.oauthbearer.client.secret"), Some("s3cr3t"));
        assert_eq!(cc.get("sasl.oauthbearer.scope"), Some("kafka read"));
        assert_eq!(
            cc.get("sasl.oauthbearer.extensions"),
            Some("identityPoolId=pool-2,logicalCluster=lkc-1")
        );
        assert_eq!(cc.get("sasl.username"), None);
        // librdkafka accepts the whole set (it checks OIDC settings when a client is made).
        let r: Result<rdkafka::consumer::BaseConsumer, _> = cc.create();
        assert!(r.is_ok(), "{:?}", r.err());
    }

    #[test]
    fn aws_msk_iam_names_its_settings_for_the_token_hook() {
        let c = Config::from_toml(
            "[kafka]\nsecurity_protocol = \"SASL_SSL\"\nsasl_mechanism = \"AWS_MSK_IAM\"\naws_region = \"eu-west-1\"\n",
            "t",
            |_| None,
        )
        .unwrap();
        let cc = client_config(&c.kafka, ClientKind::Consumer);
        assert_eq!(cc.get("sasl.mechanism"), Some("OAUTHBEARER"));
        assert_eq!(
            cc.get("sasl.oauthbearer.method"),
            None,
            "tokens come from strata"
        );
        let Some(crate::config::Sasl::AwsMskIam(m)) = &c.kafka.sasl else {
            panic!("{:?}", c.kafka.sasl)
        };
        assert_eq!(
            cc.get("sasl.oauthbearer.config"),
            Some(msk_iam::oauthbearer_config(m).as_str())
        );
    }

    #[test]
    fn sasl_and_extra_properties_reach_librdkafka() {
        let c = Config::from_toml(
            r#"[kafka]
bootstrap_servers = "a:1,b:2"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-256"
username = "u"
password = "${PW}"
ssl_ca_location = "/ca.pem"
[kafka.properties]
"fetch.min.bytes" = 1000
"#,
            "t",
            |k| (k == "PW").then(|| "pw".to_string()),
        )
        .unwrap();
        let cc = client_config(&c.kafka, ClientKind::Consumer);
        assert_eq!(cc.get("bootstrap.servers"), Some("a:1,b:2"));
        assert_eq!(cc.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(cc.get("sasl.mechanism"), Some("SCRAM-SHA-256"));
        assert_eq!(cc.get("sasl.password"), Some("pw"));
        assert_eq!(cc.get("ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(cc.get("fetch.min.bytes"), Some("1000"));
    }

    #[test]
    fn prefixed_properties_reach_only_their_client_kind() {
        let c = Config::from_toml(
            r#"[kafka]
bootstrap_servers = "a:1"
[kafka.properties]
"socket.timeout.ms" = 30000
"consumer.fetch.min.bytes" = 1000
"producer.linger.ms" = 7
"admin.socket.timeout.ms" = 9000
"#,
            "t",
            |_| None,
        )
        .unwrap();
        let consumer = client_config(&c.kafka, ClientKind::Consumer);
        assert_eq!(consumer.get("fetch.min.bytes"), Some("1000"));
        assert_eq!(consumer.get("linger.ms"), None);
        assert_eq!(consumer.get("consumer.fetch.min.bytes"), None);
        assert_eq!(consumer.get("socket.timeout.ms"), Some("30000"));
        let producer = client_config(&c.kafka, ClientKind::Producer);
        assert_eq!(producer.get("linger.ms"), Some("7"));
        assert_eq!(producer.get("fetch.min.bytes"), None);
        let admin = client_config(&c.kafka, ClientKind::Admin);
        assert_eq!(admin.get("socket.timeout.ms"), Some("9000"));
        assert_eq!(admin.get("linger.ms"), None);
    }

    #[test]
    fn a_settling_coordinator_is_asked_again_other_errors_are_not() {
        use rdkafka::error::KafkaError::MetadataFetch;
        use rdkafka::types::RDKafkaErrorCode::*;
        // Two "not coordinator" answers, then the offsets: found after two pauses.
        let mut answers = vec![
            Err(MetadataFetch(NotCoordinator)),
            Err(MetadataFetch(CoordinatorLoadInProgress)),
            Ok(7),
        ]
        .into_iter();
        let mut slept = Vec::new();
        let r = while_coordinator_settles(
            Duration::from_secs(30),
            |d| slept.push(d),
            || answers.next().unwrap(),
        );
        assert_eq!(r.unwrap(), 7);
        assert_eq!(
            slept,
            [Duration::from_millis(100), Duration::from_millis(200)]
        );
        // Any other error is the answer at once.
        let mut calls = 0;
        let r: KafkaResult<()> = while_coordinator_settles(
            Duration::from_secs(30),
            |_| panic!("no pause for a real failure"),
            || {
                calls += 1;
                Err(MetadataFetch(GroupAuthorizationFailed))
            },
        );
        assert!(r.is_err() && calls == 1);
        // A coordinator that never settles fails once the pauses would pass the wait.
        let mut total = Duration::ZERO;
        let r: KafkaResult<()> = while_coordinator_settles(
            Duration::from_secs(5),
            |d| total += d,
            || Err(MetadataFetch(CoordinatorNotAvailable)),
        );
        assert_eq!(
            r.unwrap_err().rdkafka_error_code(),
            Some(CoordinatorNotAvailable)
        );
        assert!(total <= Duration::from_secs(5) && total >= Duration::from_secs(3));
    }
}
