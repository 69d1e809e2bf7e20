//! Refusals a retry cannot heal: the cluster rejected the login, the TLS handshake failed, or
//! an ACL is missing. librdkafka reports the first two only to a client context and retries
//! forever, so [`Watch`] remembers them; callers then stop with an error naming the cluster,
//! the user or the certificate file, and the fix.

use super::{servers, KafkaError};
use crate::config::{KafkaConfig, Sasl, SaslMechanism};
use rdkafka::types::RDKafkaErrorCode;
use std::sync::{Arc, Mutex};

/// Why the cluster turned this client away for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// SASL authentication failed (wrong password, unknown user, mechanism not enabled).
    Login(String),
    /// The TLS handshake failed (untrusted CA, name mismatch, client certificate refused).
    Tls(String),
    /// There was no OAUTHBEARER token to log in with (the token endpoint refused the client,
    /// or no AWS credentials signed one).
    Token(String),
}

/// How librdkafka starts the error of a failed OAUTHBEARER token refresh.
const NO_TOKEN: &str = "Failed to acquire SASL OAUTHBEARER token";

/// The refusal a client error stands for, if any.
pub fn refusal_of(error: &rdkafka::error::KafkaError, reason: &str) -> Option<Refusal> {
    match error.rdkafka_error_code()? {
        RDKafkaErrorCode::Authentication if reason.contains(NO_TOKEN) => {
            Some(Refusal::Token(reason.to_string()))
        }
        RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SaslAuthenticationFailed => {
            Some(Refusal::Login(reason.to_string()))
        }
        RDKafkaErrorCode::SSL => Some(Refusal::Tls(reason.to_string())),
        _ => None,
    }
}

/// Whether a broker error means a missing ACL.
pub fn is_authorization(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::GroupAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
    )
}

/// Remembers the first [`Refusal`] a client reports. Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    first: Arc<Mutex<Option<Refusal>>>,
}

impl Watch {
    /// Records `error` when it is a refusal; `true` then.
    pub fn note(&self, error: &rdkafka::error::KafkaError, reason: &str) -> bool {
        let Some(r) = refusal_of(error, reason) else {
            return false;
        };
        if let Ok(mut first) = self.first.lock() {
            first.get_or_insert(r);
        }
        true
    }

    pub fn refusal(&self) -> Option<Refusal> {
        self.first.lock().ok().and_then(|f| f.clone())
    }

    /// The error of a failed call to the cluster of `k`: its refusal when there was one, else
    /// unreachable with `detail`.
    pub fn failure(&self, k: &KafkaConfig, detail: impl std::fmt::Display) -> KafkaError {
        match self.refusal() {
            Some(r) => KafkaError::refused(k, r),
            None => KafkaError::Unreachable {
                servers: servers(k),
                detail: detail.to_string(),
            },
        }
    }
}

/// The errors librdkafka retries repeat in floods (a broker down is reported by every client,
/// many times a second): each kind is logged at most once per [`RETRIED_INTERVAL`] across the
/// process. `Some(n)` when a line is due, standing for `n` occurrences.
pub(crate) fn retried(error: &rdkafka::error::KafkaError) -> Option<u64> {
    static SEEN: std::sync::LazyLock<crate::throttle::Throttles> =
        std::sync::LazyLock::new(|| crate::throttle::Throttles::new(RETRIED_INTERVAL));
    SEEN.event(&error.to_string())
}

/// How often one kind of retried Kafka client error is logged at most.
pub(crate) const RETRIED_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

impl rdkafka::client::ClientContext for Watch {
    super::msk_iam::oauth_token_hook!();

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if !self.note(&error, reason)
            && error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF)
        {
            if let Some(times) = retried(&error) {
                tracing::warn!(error = %error, reason, times, "kafka client error; librdkafka retries");
            }
        }
    }
}

impl rdkafka::consumer::ConsumerContext for Watch {}

/// For producers whose deliveries the caller checks itself (flush, transactions).
impl rdkafka::producer::ProducerContext for Watch {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::message::DeliveryResult<'_>, _: ()) {}
}

/// Who this client is to the cluster, for messages: the SASL user, the client certificate, or
/// an anonymous client.
pub fn principal(k: &KafkaConfig) -> String {
    match (&k.sasl, &k.tls.certificate_location) {
        (Some(s), _) => s.who(),
        (None, Some(cert)) => format!("the client certificate {}", cert.display()),
        (None, None) => "this client (no user or client certificate configured)".to_string(),
    }
}

/// The error for a login without a token: names the token endpoint and the client, or the
/// AWS identity, and what to check.
fn no_token(k: &KafkaConfig, detail: String) -> KafkaError {
    let detail = detail
        .strip_prefix(NO_TOKEN)
        .map_or(detail.as_str(), |d| d.trim_start_matches(':').trim())
        .to_string();
    let (source_of_tokens, fix) = match &k.sasl {
        Some(Sasl::OAuthBearer(c)) => (
            format!("the OAuth token endpoint {} (client {:?})", c.token_endpoint, c.client_id),
            "check oauth_client_id and oauth_client_secret (and oauth_scope), and that the token endpoint answers from this host",
        ),
        Some(s @ Sasl::AwsMskIam(_)) => (
            format!("signing with {}", s.who()),
            "check the AWS credentials this process finds (AWS_* variables, profile, web identity, instance role) and aws_role_arn",
        ),
        _ => (
            "the OAUTHBEARER token source".to_string(),
            "check the cluster's SASL settings",
        ),
    };
    KafkaError::NoToken {
        servers: servers(k),
        source_of_tokens,
        detail,
        fix,
    }
}

impl KafkaError {
    /// The error for a refusal by the cluster of `k`.
    pub fn refused(k: &KafkaConfig, r: Refusal) -> Self {
        match r {
            Refusal::Login(detail) => KafkaError::LoginRefused {
                servers: servers(k),
                who: match &k.sasl {
                    Some(s) => format!("{} ({})", s.who(), s.mechanism().as_str()),
                    None => "a client without SASL settings".to_string(),
                },
                detail,
                fix: SaslMechanism::fix_of(k.sasl.as_ref().map(Sasl::mechanism)),
            },
            Refusal::Token(detail) => no_token(k, detail),
            Refusal::Tls(detail) => KafkaError::Tls {
                servers: servers(k),
                detail,
                ca: k.tls.ca_location.as_ref().map_or_else(
                    || "the system's CA certificates (no ssl_ca_location set)".to_string(),
                    |p| p.display().to_string(),
                ),
                client: k
                    .tls
                    .certificate_location
                    .as_ref()
                    .map_or_else(String::new, |p| {
                        format!(
                            ", and that the brokers trust the client certificate {}",
                            p.display()
                        )
                    }),
            },
        }
    }

    /// The error for a missing ACL of the principal of `k`.
    pub fn not_authorized(k: &KafkaConfig, detail: impl std::fmt::Display) -> Self {
        KafkaError::NotAuthorized {
            servers: servers(k),
            principal: principal(k),
            detail: detail.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use rdkafka::error::KafkaError as Rd;

    fn kafka(extra: &str) -> KafkaConfig {
        Config::from_toml(
            &format!("[kafka]\nbootstrap_servers = \"h:9\"\n{extra}"),
            "t",
            |_| Some("pw-secret".into()),
        )
        .unwrap()
        .kafka
    }

    #[test]
    fn login_and_tls_failures_are_refusals_others_are_not() {
        let w = Watch::default();
        assert!(!w.note(
            &Rd::Global(RDKafkaErrorCode::BrokerTransportFailure),
            "down"
        ));
        assert_eq!(w.refusal(), None);
        assert!(w.note(
            &Rd::Global(RDKafkaErrorCode::Authentication),
            "bad password"
        ));
        assert!(w.note(&Rd::Global(RDKafkaErrorCode::SSL), "later"));
        assert_eq!(
            w.refusal(),
            Some(Refusal::Login("bad password".into())),
            "the first stays"
        );
        assert!(is_authorization(RDKafkaErrorCode::GroupAuthorizationFailed));
        assert!(!is_authorization(RDKafkaErrorCode::UnknownTopicOrPartition));
    }

    #[test]
    fn messages_name_cluster_user_and_files_never_the_password() {
        let k = kafka("security_protocol = \"SASL_SSL\"\nsasl_mechanism = \"SCRAM-SHA-512\"\nusername = \"alice\"\npassword = \"${PW}\"\nssl_ca_location = \"/etc/ca.pem\"\n");
        let login =
            KafkaError::refused(&k, Refusal::Login("Authentication failed".into())).to_string();
        assert!(
            login.contains("h:9") && login.contains("\"alice\" (SCRAM-SHA-512)"),
            "{login}"
        );
        let tls =
            KafkaError::refused(&k, Refusal::Tls("certificate verify failed".into())).to_string();
        assert!(
            tls.contains("/etc/ca.pem") && tls.contains("certificate verify failed"),
            "{tls}"
        );
        let acl = KafkaError::not_authorized(&k, "Group authorization failed").to_string();
        assert!(
            acl.contains("user \"alice\"") && acl.contains("ACL"),
            "{acl}"
        );
        for m in [login, tls, acl] {
            assert!(!m.contains("pw-secret"), "{m}");
        }
    }
}
