//! `[store]` as validated: where archives go and how strata talks to S3.

use super::{AssumeRole, ByteSize, ObjectOptions, Secret};
use std::fmt;
use std::path::PathBuf;

/// Where archives go: an S3 bucket (with a key prefix) or a local directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    S3 { bucket: String, prefix: String },
    File { root: PathBuf },
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            StoreUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            StoreUrl::File { root } => write!(f, "file://{}", root.display()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    Static {
        access_key: Secret,
        secret_key: Secret,
        /// `store.session_token`: the keys are temporary ones (`ASIA...`).
        session_token: Option<Secret>,
    },
    /// Environment, profile, web identity, instance metadata: the AWS default chain.
    DefaultChain,
}

/// S3 connection settings, shared by every bucket strata touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Settings {
    /// `store.region`; `None`: from the AWS environment (see [`S3Region`]).
    pub region: Option<String>,
    pub endpoint: Option<String>,
    pub path_style: bool,
    pub credentials: Credentials,
    /// Assumed through STS with `credentials`.
    pub role: Option<AssumeRole>,
    /// What every object written carries.
    pub objects: ObjectOptions,
    pub create_bucket: bool,
    pub part_size: ByteSize,
    pub max_attempts: u32,
}

/// The region S3 requests are signed for, and where it came from. The store finds it (it
/// reads the environment, the AWS config files and the instance metadata service) when
/// `store.region` is not set; `strata validate` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Region {
    pub name: String,
    pub source: RegionSource,
}

/// Where an [`S3Region`] came from, in the order they are looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionSource {
    /// `store.region`.
    Config,
    /// `AWS_REGION` or `AWS_DEFAULT_REGION`.
    Env(&'static str),
    /// A profile of the AWS config files (`AWS_PROFILE`, else `default`).
    Profile(String),
    /// The EC2 instance metadata service (not asked with a custom `store.endpoint`).
    InstanceMetadata,
    /// Nothing named one and `store.endpoint` is set: `us-east-1`, which S3-compatible stores
    /// take whatever their own region.
    EndpointDefault,
}

impl fmt::Display for S3Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (", self.name)?;
        match &self.source {
            RegionSource::Config => f.write_str("store.region"),
            RegionSource::Env(var) => write!(f, "from {var}"),
            RegionSource::Profile(p) => write!(f, "from profile {p:?} of the AWS config files"),
            RegionSource::InstanceMetadata => f.write_str("from the EC2 instance metadata"),
            RegionSource::EndpointDefault => {
                f.write_str("default for a custom endpoint: none set anywhere")
            }
        }?;
        f.write_str(")")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    pub url: StoreUrl,
    pub s3: S3Settings,
}

impl StoreConfig {
    /// The same store with another bucket (a task's `bucket` override).
    pub fn with_bucket(&self, bucket: &str) -> Self {
        let mut c = self.clone();
        if let StoreUrl::S3 { prefix, .. } = &self.url {
            c.url = StoreUrl::S3 {
                bucket: bucket.to_string(),
                prefix: prefix.clone(),
            };
        }
        c
    }
}
