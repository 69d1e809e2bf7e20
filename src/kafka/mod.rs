//! Kafka clients built from [`KafkaConfig`]: client settings (security included), an admin
//! helper for topics and watermarks, and the producer restore uses. The dump consumer's
//! rebalance handling lives in `dump`, next to the buffers it must protect.

pub mod admin;
pub mod refusal;

use crate::config::KafkaConfig;
use rdkafka::ClientConfig;
use std::time::Duration;

pub use admin::Admin;
pub use refusal::{Refusal, Watch};

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
    #[error("Kafka at {servers} refused the login of {who}: {detail}; check the user name and password of this cluster's settings (and that the user exists for this mechanism)")]
    LoginRefused {
        servers: String,
        who: String,
        detail: String,
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

/// librdkafka settings shared by every client strata creates.
pub fn client_config(k: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", k.bootstrap_servers.join(","))
        .set(
            "security.protocol",
            k.security_protocol.as_str().to_ascii_lowercase(),
        )
        .set("client.id", &k.client_id)
        // librdkafka logs through our handler; keep its own chatter at warnings.
        .set("log_level", "4");
    if let Some(s) = &k.sasl {
        c.set("sasl.mechanism", s.mechanism.as_str())
            .set("sasl.username", &s.username)
            .set("sasl.password", s.password.expose());
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
    for (key, value) in &k.properties {
        c.set(key, value);
    }
    c
}

/// strata's short-lived readers (progress markers, positions, checkpoints, `--once` coverage):
/// their [`Watch`] keeps end of partition, which is how they learn they are done, out of the
/// error log.
pub type Reader = rdkafka::consumer::BaseConsumer<Watch>;

/// Creates a [`Reader`] from client settings.
pub fn reader(c: &ClientConfig) -> rdkafka::error::KafkaResult<Reader> {
    c.create_with_context(Watch::default())
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
        let cc = client_config(&c.kafka);
        assert_eq!(cc.get("bootstrap.servers"), Some("a:1,b:2"));
        assert_eq!(cc.get("security.protocol"), Some("sasl_ssl"));
        assert_eq!(cc.get("sasl.mechanism"), Some("SCRAM-SHA-256"));
        assert_eq!(cc.get("sasl.password"), Some("pw"));
        assert_eq!(cc.get("ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(cc.get("fetch.min.bytes"), Some("1000"));
    }
}
