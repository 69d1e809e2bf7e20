//! `[kafka]` (and every other Kafka table) as validated: a cluster and how to reach it.

use super::Secret;
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
}

impl SaslMechanism {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sasl {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: Secret,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tls {
    pub ca_location: Option<PathBuf>,
    pub certificate_location: Option<PathBuf>,
    pub key_location: Option<PathBuf>,
    pub key_password: Option<Secret>,
}

/// The kinds of Kafka client strata creates. A `[kafka.properties]` key prefixed `consumer.`,
/// `producer.` or `admin.` (as MirrorMaker 2 and Kafka Connect users write them) reaches that
/// kind only: librdkafka warns about, or refuses, a consumer property given to a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClientKind {
    /// dump's and replicate's source consumers, and every short-lived reader (positions,
    /// checkpoints, group offsets, `--once` coverage, restore's progress markers).
    Consumer,
    /// replicate's and restore's producers (records, offset syncs, checkpoints, positions).
    Producer,
    /// Topic and metadata calls: creating topics, partition counts, configs, watermarks.
    Admin,
}

impl ClientKind {
    pub const ALL: [ClientKind; 3] = [Self::Consumer, Self::Producer, Self::Admin];

    /// The key prefix that addresses this kind.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Consumer => "consumer.",
            Self::Producer => "producer.",
            Self::Admin => "admin.",
        }
    }

    /// The kind a property key addresses and the librdkafka property it sets: `None` for an
    /// unprefixed key (every kind).
    pub fn of_key(key: &str) -> Option<(Self, &str)> {
        Self::ALL
            .into_iter()
            .find_map(|kind| key.strip_prefix(kind.prefix()).map(|p| (kind, p)))
    }
}

/// A Kafka cluster and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaConfig {
    pub bootstrap_servers: Vec<String>,
    pub security_protocol: SecurityProtocol,
    pub sasl: Option<Sasl>,
    pub tls: Tls,
    pub client_id: String,
    /// Extra librdkafka properties as written (prefixed ones included: see
    /// [`KafkaConfig::properties_for`]); values are treated as secret in reports.
    pub properties: BTreeMap<String, String>,
}

impl KafkaConfig {
    /// The librdkafka properties a client of `kind` gets, by librdkafka name: the unprefixed
    /// ones, then those prefixed for `kind`, which therefore win when a client sets them in
    /// this order.
    pub fn properties_for(&self, kind: ClientKind) -> Vec<(&str, &str)> {
        let all = self
            .properties
            .iter()
            .filter(|(k, _)| ClientKind::of_key(k).is_none())
            .map(|(k, v)| (k.as_str(), v.as_str()));
        let own = self.properties.iter().filter_map(|(k, v)| {
            ClientKind::of_key(k)
                .filter(|(of, _)| *of == kind)
                .map(|(_, p)| (p, v.as_str()))
        });
        all.chain(own).collect()
    }
}
