//! What `[store]` asks of S3 beyond where the bucket is: the settings every object strata writes
//! carries (server-side encryption, storage class, tags, canned ACL) and a role to assume.
//! Values here are validated (`validate/store.rs`); the S3 backend turns them into headers.

use std::collections::BTreeMap;
use std::fmt;

/// Server-side encryption every write asks for (`x-amz-server-side-encryption`), so a bucket
/// policy that refuses unencrypted `PutObject`s takes strata's writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sse {
    /// SSE-S3: keys S3 manages (`AES256`).
    S3,
    /// SSE-KMS (`aws:kms`) with the given key (an id, `alias/...` or an ARN), or S3's
    /// `aws/s3` key when `None`.
    Kms { key_id: Option<String> },
}

impl Sse {
    /// The header value, as written in `store.sse`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Sse::S3 => "AES256",
            Sse::Kms { .. } => "aws:kms",
        }
    }

    pub fn kms_key_id(&self) -> Option<&str> {
        match self {
            Sse::Kms { key_id } => key_id.as_deref(),
            Sse::S3 => None,
        }
    }
}

/// The storage classes strata can write: those whose objects read back at once. `GLACIER` and
/// `DEEP_ARCHIVE` objects need a restore before a GET, and strata reads its own objects
/// (seals, manifests, restore, tier fetches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageClass {
    Standard,
    StandardIa,
    OnezoneIa,
    IntelligentTiering,
    GlacierIr,
    ReducedRedundancy,
}

impl StorageClass {
    pub const ALL: [StorageClass; 6] = [
        StorageClass::Standard,
        StorageClass::StandardIa,
        StorageClass::OnezoneIa,
        StorageClass::IntelligentTiering,
        StorageClass::GlacierIr,
        StorageClass::ReducedRedundancy,
    ];

    /// S3's name (`x-amz-storage-class`).
    pub fn as_str(self) -> &'static str {
        match self {
            StorageClass::Standard => "STANDARD",
            StorageClass::StandardIa => "STANDARD_IA",
            StorageClass::OnezoneIa => "ONEZONE_IA",
            StorageClass::IntelligentTiering => "INTELLIGENT_TIERING",
            StorageClass::GlacierIr => "GLACIER_IR",
            StorageClass::ReducedRedundancy => "REDUCED_REDUNDANCY",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// The canned ACLs strata may put on its objects (`x-amz-acl`). The public ones are left out:
/// archives hold Kafka data; grant reads with a bucket policy instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CannedAcl {
    Private,
    BucketOwnerRead,
    /// What a bucket of another account usually requires of writers, and the one ACL a bucket
    /// with ACLs disabled (Object Ownership "bucket owner enforced") still takes.
    BucketOwnerFullControl,
}

impl CannedAcl {
    pub const ALL: [CannedAcl; 3] = [
        CannedAcl::Private,
        CannedAcl::BucketOwnerRead,
        CannedAcl::BucketOwnerFullControl,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CannedAcl::Private => "private",
            CannedAcl::BucketOwnerRead => "bucket-owner-read",
            CannedAcl::BucketOwnerFullControl => "bucket-owner-full-control",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// What every object strata writes to S3 carries: on `PutObject` and `CreateMultipartUpload`,
/// so archives, seals, parameter records, tier chunks and the start-up probe alike.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectOptions {
    pub sse: Option<Sse>,
    pub storage_class: Option<StorageClass>,
    /// At most [`ObjectOptions::MAX_TAGS`], keys and values within S3's limits.
    pub tags: BTreeMap<String, String>,
    pub acl: Option<CannedAcl>,
}

impl ObjectOptions {
    /// S3's limits on object tags.
    pub const MAX_TAGS: usize = 10;
    pub const MAX_TAG_KEY_CHARS: usize = 128;
    pub const MAX_TAG_VALUE_CHARS: usize = 256;
}

/// A role strata assumes through STS (`store.role_arn`), starting from the static keys or the
/// AWS default credential chain; the SDK renews its temporary credentials before they expire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssumeRole {
    pub role_arn: String,
    /// Not a secret (AWS says so), but printed only as "set".
    pub external_id: Option<String>,
    pub session_name: String,
    /// `store.sts_endpoint`; `None`: `store.endpoint` when set, else AWS's regional STS.
    pub sts_endpoint: Option<String>,
}

impl AssumeRole {
    /// The session name when `store.role_session_name` is left out: what CloudTrail shows.
    pub const DEFAULT_SESSION_NAME: &'static str = "strata";
}

impl fmt::Display for AssumeRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "role {} (session {:?}", self.role_arn, self.session_name)?;
        if self.external_id.is_some() {
            f.write_str(", external id set")?;
        }
        if let Some(e) = &self.sts_endpoint {
            write!(f, ", STS at {e}")?;
        }
        f.write_str(")")
    }
}
