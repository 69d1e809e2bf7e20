//! `[kafka]` (and every other Kafka table) as validated: a cluster and how to reach it.

use super::{AssumeRole, Secret};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How strata talks to Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }
    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    /// OAuth 2 bearer tokens from an OIDC provider (client credentials).
    OAuthBearer,
    /// Amazon MSK's IAM access control: OAUTHBEARER with tokens signed by AWS credentials.
    AwsMskIam,
}

impl SaslMechanism {
    /// The name `kafka.sasl_mechanism` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
            Self::OAuthBearer => "OAUTHBEARER",
            Self::AwsMskIam => "AWS_MSK_IAM",
        }
    }

    /// What to check when the cluster refuses a login with this mechanism.
    pub fn fix(self) -> &'static str {
        match self {
            Self::Plain | Self::ScramSha256 | Self::ScramSha512 => "check the user name and the password (a changed password needs the config updated), and that the user exists for this mechanism",
            Self::OAuthBearer => "check that the brokers accept tokens of this OIDC provider (their JWKS, expected audience and issuer) and the token's subject claim",
            Self::AwsMskIam => "check that the cluster has IAM access control on, that its region is the one tokens are signed for (kafka.aws_region), and the identity's kafka-cluster:Connect permission",
        }
    }

    /// What to check when a cluster refuses a login with `m` (`None`: without SASL).
    pub fn fix_of(m: Option<Self>) -> &'static str {
        m.map_or(
            "check the cluster's security_protocol and SASL settings",
            Self::fix,
        )
    }

    /// Whether the login is a user name and password.
    pub fn uses_password(self) -> bool {
        matches!(self, Self::Plain | Self::ScramSha256 | Self::ScramSha512)
    }
}

/// How strata logs in over SASL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sasl {
    /// PLAIN or SCRAM: a user and its password.
    Password {
        mechanism: SaslMechanism,
        username: String,
        password: Secret,
    },
    /// OAUTHBEARER with tokens librdkafka fetches (and refreshes) from an OIDC token endpoint.
    OAuthBearer(OAuthClient),
    /// AWS_MSK_IAM: tokens strata signs with AWS credentials and renews before they expire.
    AwsMskIam(MskIam),
}

impl Sasl {
    pub fn mechanism(&self) -> SaslMechanism {
        match self {
            Self::Password { mechanism, .. } => *mechanism,
            Self::OAuthBearer(_) => SaslMechanism::OAuthBearer,
            Self::AwsMskIam(_) => SaslMechanism::AwsMskIam,
        }
    }

    /// Who logs in, for messages (never a secret): `user "alice"`, `OAuth client "strata"`,
    /// `the AWS identity of the default credential chain`.
    pub fn who(&self) -> String {
        match self {
            Self::Password { username, .. } => format!("user {username:?}"),
            Self::OAuthBearer(o) => format!("OAuth client {:?}", o.client_id),
            Self::AwsMskIam(m) => match &m.role {
                Some(r) => format!("AWS role {}", r.role_arn),
                None => "the AWS identity of the default credential chain".to_string(),
            },
        }
    }
}

/// An OAuth 2 client of an OIDC provider, for `sasl_mechanism = "OAUTHBEARER"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClient {
    /// The provider's token endpoint (`http://` or `https://`, no user info).
    pub token_endpoint: String,
    pub client_id: String,
    pub client_secret: Secret,
    /// Space-separated scopes to ask for; `None`: the provider's default.
    pub scope: Option<String>,
    /// SASL extensions sent with the token (KIP-342), e.g. a cloud service's logical cluster.
    pub extensions: BTreeMap<String, String>,
}

/// `sasl_mechanism = "AWS_MSK_IAM"`: where the signing credentials and region come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MskIam {
    /// `kafka.aws_region`; `None`: the AWS environment's (`AWS_REGION`, profile, instance).
    pub region: Option<String>,
    /// A role to assume with the default chain's credentials (`kafka.aws_role_arn`).
    pub role: Option<AssumeRole>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tls {
    pub ca_location: Option<PathBuf>,
    pub certificate_location: Option<PathBuf>,
    pub key_location: Option<PathBuf>,
    pub key_password: Option<Secret>,
}

/// A Kafka cluster and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    pub bootstrap_servers: Vec<String>,
    pub security_protocol: SecurityProtocol,
    pub sasl: Option<Sasl>,
    pub tls: Tls,
    pub client_id: String,
    /// Extra librdkafka properties; values are treated as secret in reports.
    pub properties: BTreeMap<String, String>,
}
