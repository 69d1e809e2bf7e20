//! S3 backend (AWS S3 or a compatible store such as LocalStack or MinIO). Large objects go up
//! in multipart uploads. Bodies go up unsigned with a CRC32C checksum the store verifies; the SDK
//! adds no other checksums (S3-compatible stores differ in which they accept). Every object
//! created carries `[store]`'s encryption, storage class, tags and ACL; credentials may come from
//! a role assumed through STS. Error messages name the fix (a bucket in another region, no
//! credentials anywhere, the IAM actions a refused request needs), carry no SDK debug output,
//! and are scrubbed of the configured credentials.

use super::chunks::Chunks;
use super::iam::{self, Op};
use super::{
    check_key, error_chain, ErrorKind, Finish, Finished, Incomplete, MultipartUpload, ObjectMeta,
    ObjectStore, StoreError,
};
use crate::config::{
    AssumeRole, CannedAcl, Credentials, ObjectOptions, S3Region, S3Settings, Sse, StorageClass,
};
use async_trait::async_trait;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    Region, RequestChecksumCalculation, ResponseChecksumValidation, SharedHttpClient,
};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::{
    ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart, ObjectCannedAcl,
    ServerSideEncryption,
};
use aws_sdk_s3::Client;
use bytes::Bytes;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    /// Key prefix inside the bucket, `""` or `a/b/`.
    prefix: String,
    part_size: usize,
    create_bucket: bool,
    region: S3Region,
    endpoint: String,
    /// Credential values to scrub from any message that reaches a user.
    secrets: Arc<Vec<String>>,
    /// Where the SDK's chain looks for credentials (`None`: they are in the config), for the
    /// error when it finds none.
    credential_sources: Option<Arc<String>>,
    /// The role the credentials are exchanged for, for the error when STS refuses.
    role: Option<Arc<AssumeRole>>,
    /// Who the requests are made as, for the access-denied error ("role ... (assumed)").
    who: Arc<String>,
    objects: Arc<ObjectOptions>,
    headers: Arc<WriteHeaders>,
    /// Keys whose `CreateMultipartUpload` got no answer: S3 may hold an upload strata never
    /// learnt the id of. Once the key is stored, its other uploads are aborted.
    lost_starts: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

/// The headers of [`ObjectOptions`], built once: what `PutObject` and `CreateMultipartUpload`
/// send (never `UploadPart` or `CompleteMultipartUpload`, which S3 refuses them on).
#[derive(Debug, Clone, Default, PartialEq)]
struct WriteHeaders {
    sse: Option<ServerSideEncryption>,
    kms_key_id: Option<String>,
    storage_class: Option<aws_sdk_s3::types::StorageClass>,
    /// `x-amz-tagging`: the tags as a URL query.
    tagging: Option<String>,
    acl: Option<ObjectCannedAcl>,
}

impl WriteHeaders {
    fn of(o: &ObjectOptions) -> Self {
        Self {
            sse: o.sse.as_ref().map(|s| match s {
                Sse::S3 => ServerSideEncryption::Aes256,
                Sse::Kms { .. } => ServerSideEncryption::AwsKms,
            }),
            kms_key_id: o.sse.as_ref().and_then(Sse::kms_key_id).map(str::to_string),
            storage_class: o.storage_class.map(|c| match c {
                StorageClass::Standard => aws_sdk_s3::types::StorageClass::Standard,
                StorageClass::StandardIa => aws_sdk_s3::types::StorageClass::StandardIa,
                StorageClass::OnezoneIa => aws_sdk_s3::types::StorageClass::OnezoneIa,
                StorageClass::IntelligentTiering => {
                    aws_sdk_s3::types::StorageClass::IntelligentTiering
                }
                StorageClass::GlacierIr => aws_sdk_s3::types::StorageClass::GlacierIr,
                StorageClass::ReducedRedundancy => {
                    aws_sdk_s3::types::StorageClass::ReducedRedundancy
                }
            }),
            tagging: tagging_header(&o.tags),
            acl: o.acl.map(|a| match a {
                CannedAcl::Private => ObjectCannedAcl::Private,
                CannedAcl::BucketOwnerRead => ObjectCannedAcl::BucketOwnerRead,
                CannedAcl::BucketOwnerFullControl => ObjectCannedAcl::BucketOwnerFullControl,
            }),
        }
    }
}

/// Sets [`WriteHeaders`] on a `PutObject` or `CreateMultipartUpload` request (two builder
/// types with the same setters).
macro_rules! with_write_headers {
    ($req:expr, $h:expr) => {{
        let h: &WriteHeaders = $h;
        $req.set_server_side_encryption(h.sse.clone())
            .set_ssekms_key_id(h.kms_key_id.clone())
            .set_storage_class(h.storage_class.clone())
            .set_tagging(h.tagging.clone())
            .set_acl(h.acl.clone())
    }};
}

/// `x-amz-tagging`: `k1=v1&k2=v2`, each key and value percent-encoded as a URL query.
fn tagging_header(tags: &std::collections::BTreeMap<String, String>) -> Option<String> {
    fn enc(s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        for b in s.bytes() {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
    (!tags.is_empty()).then(|| {
        tags.iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect::<Vec<_>>()
            .join("&")
    })
}

/// What [`S3Store::build`] takes other than the config: the test seams.
#[derive(Default)]
struct Wiring {
    http: Option<SharedHttpClient>,
    /// Replaces the SDK's default credential chain.
    credentials: Option<SharedCredentialsProvider>,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl S3Store {
    /// A client of `bucket` with the region `store.region` names, or the AWS environment's.
    pub async fn connect(
        s: &S3Settings,
        bucket: String,
        prefix: String,
    ) -> Result<Self, StoreError> {
        let region = super::aws_env::resolve_region(s).await.map_err(|m| {
            StoreError::new(
                ErrorKind::InvalidInput,
                format!("s3://{bucket}/{prefix}"),
                m,
            )
        })?;
        Self::build(s, bucket, prefix, region, Wiring::default()).await
    }

    async fn build(
        s: &S3Settings,
        bucket: String,
        prefix: String,
        region: S3Region,
        wiring: Wiring,
    ) -> Result<Self, StoreError> {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(Region::new(region.name.clone()))
            // S3's and STS's (an assumed role's) requests alike.
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(s.max_attempts)
                    .with_initial_backoff(Duration::from_millis(200))
                    .with_max_backoff(Duration::from_secs(5)),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .read_timeout(Duration::from_secs(60))
                    .operation_attempt_timeout(Duration::from_secs(300))
                    .build(),
            );
        if let Some(http) = wiring.http {
            loader = loader.http_client(http);
        }
        let mut secrets = Vec::new();
        let mut credential_sources = None;
        let mut who = match (&s.credentials, wiring.credentials) {
            (
                Credentials::Static {
                    access_key,
                    secret_key,
                    session_token,
                },
                _,
            ) => {
                secrets.push(access_key.expose().to_string());
                secrets.push(secret_key.expose().to_string());
                secrets.extend(session_token.iter().map(|t| t.expose().to_string()));
                loader = loader.credentials_provider(aws_sdk_s3::config::Credentials::new(
                    access_key.expose(),
                    secret_key.expose(),
                    session_token.as_ref().map(|t| t.expose().to_string()),
                    None,
                    "strata-config",
                ));
                "the access key of store.access_key".to_string()
            }
            (Credentials::DefaultChain, replaced) => {
                credential_sources = Some(Arc::new(super::aws_env::process_credential_sources()));
                if let Some(c) = replaced {
                    loader = loader.credentials_provider(c);
                }
                "the identity the AWS default credential chain found".to_string()
            }
        };
        let shared = loader.load().await;
        let assumed = match &s.role {
            Some(role) => {
                who = format!("role {} (assumed)", role.role_arn);
                Some(assume_role(&shared, role, s.endpoint.as_deref()).await)
            }
            None => None,
        };
        let mut b = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(s.path_style)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if let Some(e) = &s.endpoint {
            b = b.endpoint_url(e);
        }
        if let Some(p) = assumed {
            b = b.credentials_provider(p);
        }
        let prefix = if prefix.is_empty() {
            prefix
        } else {
            format!("{}/", prefix.trim_end_matches('/'))
        };
        Ok(Self {
            client: Client::from_conf(b.build()),
            bucket,
            prefix,
            part_size: s.part_size.bytes() as usize,
            create_bucket: s.create_bucket,
            endpoint: s
                .endpoint
                .clone()
                .unwrap_or_else(|| format!("AWS S3 ({})", region.name)),
            region,
            secrets: Arc::new(secrets),
            credential_sources,
            role: s.role.clone().map(Arc::new),
            who: Arc::new(who),
            objects: Arc::new(s.objects.clone()),
            headers: Arc::new(WriteHeaders::of(&s.objects)),
            lost_starts: Arc::default(),
        })
    }

    /// After `key` was stored: aborts the uploads of `key` whose start got no answer (the
    /// stored one is complete and no longer listed). Best effort: what stays is removed at the
    /// next start, or by a lifecycle rule for incomplete uploads.
    async fn abort_lost_starts(&self, key: &str) {
        let lost = self.lost_starts.lock().is_ok_and(|mut l| l.remove(key));
        if !lost {
            return;
        }
        let uploads = match self.incomplete(key).await {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(object = %self.location(key), error = %e, "cannot list the uploads a lost answer may have left; they are removed at the next start, or by a lifecycle rule for incomplete uploads");
                return;
            }
        };
        for u in uploads.iter().filter(|u| u.key == key) {
            match self.abort_incomplete(u).await {
                Ok(()) => {
                    tracing::info!(object = %self.location(key), "aborted a multipart upload whose start got no answer")
                }
                Err(e) => {
                    tracing::warn!(object = %self.location(key), error = %e, "abort of a multipart upload whose start got no answer failed; it is removed at the next start, or by a lifecycle rule for incomplete uploads")
                }
            }
        }
    }

    fn full_key(&self, key: &str) -> Result<String, StoreError> {
        check_key(|| self.location(key), key)?;
        Ok(format!("{}{key}", self.prefix))
    }

    /// A listed object, its key relative to the store's prefix.
    fn meta_of(&self, o: aws_sdk_s3::types::Object) -> Option<ObjectMeta> {
        let rel = o.key?.strip_prefix(&self.prefix)?.to_string();
        Some(ObjectMeta {
            key: rel,
            size: o.size.unwrap_or_default().max(0) as u64,
            last_modified: o
                .last_modified
                .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())),
        })
    }

    fn scrub(&self, mut s: String) -> String {
        for secret in self.secrets.iter().filter(|x| !x.is_empty()) {
            s = s.replace(secret.as_str(), "<redacted>");
        }
        s
    }

    /// Turns an SDK error into a kind and a message a user can act on.
    fn err<E>(&self, key: &str, op: Op, e: SdkError<E, HttpResponse>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        if let Some(c) = credentials_failure(&e) {
            return self.no_credentials(key, op, c);
        }
        let status = match &e {
            SdkError::ServiceError(_) => e.raw_response().map(|r| r.status().as_u16()),
            _ => None,
        };
        let code = e.code().unwrap_or_default().to_string();
        // A service error's code and message say it all; the SDK's full context would add the
        // raw response (headers, body) to every message, and its debug form whole structures.
        let detail = match (&e, e.code(), e.message()) {
            (SdkError::ServiceError(_), Some(c), Some(m)) => format!("{c}: {m}"),
            (SdkError::ServiceError(_), Some(c), None) => c.to_string(),
            (SdkError::ServiceError(_), None, _) => {
                format!("HTTP {}", status.unwrap_or_default())
            }
            _ => error_chain(&e),
        };
        let detail = self.scrub(detail);
        if let Some(wrong) = wrong_region(&code, status, &e) {
            return StoreError::new(
                ErrorKind::Rejected,
                self.location(key),
                format!(
                    "{} failed: {} ({detail})",
                    op.name(),
                    self.region_hint(wrong)
                ),
            );
        }
        let failure = match &e {
            SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => Failure::Network,
            SdkError::ServiceError(_) => Failure::Service,
            _ => Failure::Other,
        };
        let kind = classify(failure, &code, status);
        let hint = match kind {
            ErrorKind::Unreachable => format!(
                "cannot reach the store at {}; check store.endpoint and that the store is up",
                self.endpoint
            ),
            ErrorKind::NoSuchBucket => format!(
                "bucket {:?} does not exist; create it or set store.create_bucket = true",
                self.bucket
            ),
            ErrorKind::NotFound => "no such object".to_string(),
            ErrorKind::Unauthorized => self.unauthorized_hint(key, op, &code),
            ErrorKind::Rejected => rejected_hint(&code, &self.region.name).unwrap_or_else(|| {
                "the store rejected the request, and sending it again gets the same answer; \
                 check that store.endpoint is an S3 API that takes unsigned payloads with \
                 CRC32C checksums, and that object keys (the prefix of store.url, \
                 tasks[].directory, tier.prefix) stay within its limits"
                    .to_string()
            }),
            _ => "the store refused the request; strata retries transient failures".to_string(),
        };
        StoreError::new(
            kind,
            self.location(key),
            format!("{} failed: {hint} ({detail})", op.name()),
        )
    }

    /// What to do about a 403: credentials the store does not take, an expired session token,
    /// or (`AccessDenied`, and a HEAD's bodiless 403) permissions: which ones, on what.
    fn unauthorized_hint(&self, key: &str, op: Op, code: &str) -> String {
        match code {
            "InvalidAccessKeyId" | "SignatureDoesNotMatch" => "access denied: the store does not \
                take the credentials; check store.access_key / store.secret_key (or the AWS \
                credential chain)"
                .to_string(),
            "ExpiredToken" | "InvalidToken" | "TokenRefreshRequired" => "the session token is \
                expired or invalid; temporary keys in store.access_key, store.secret_key and \
                store.session_token stop working when they expire: renew them, or let strata \
                renew its own (store.role_arn, or the AWS default credential chain)"
                .to_string(),
            _ => {
                let full = format!("{}{key}", self.prefix);
                let target = iam::Target {
                    bucket: &self.bucket,
                    key: &full,
                    region: &self.region.name,
                };
                let hint = iam::access_denied_hint(op, &self.objects, target, &self.who);
                if code.is_empty() {
                    format!(
                        "{hint}; S3 gives no reason for a HEAD request, so the credentials may \
                         also be wrong (store.access_key / store.secret_key)"
                    )
                } else {
                    hint
                }
            }
        }
    }

    /// What to do about a bucket in another region than the one requests are signed for.
    fn region_hint(&self, wrong: WrongRegion) -> String {
        match wrong.bucket_region {
            Some(r) => format!(
                "bucket {:?} is in region {r}, and strata signs its requests for {}; set \
                 store.region = {r:?}",
                self.bucket, self.region
            ),
            None => format!(
                "bucket {:?} is not in region {}; set store.region to the bucket's region",
                self.bucket, self.region
            ),
        }
    }

    /// The SDK's chain found no credentials (or a source of it failed).
    fn no_credentials(&self, key: &str, op: Op, e: &CredentialsError) -> StoreError {
        // A source that took too long (or STS, unreachable) may answer next time; the others
        // will not change.
        let kind = match e {
            CredentialsError::ProviderTimedOut(_) => ErrorKind::Unreachable,
            _ if network_failure(e) => ErrorKind::Unreachable,
            _ => ErrorKind::Unauthorized,
        };
        if let Some(role) = &self.role {
            return StoreError::new(
                kind,
                self.location(key),
                format!("{} failed: {}", op.name(), self.role_refused(role, e)),
            );
        }
        let tried = self
            .credential_sources
            .as_deref()
            .map_or("the AWS default credential chain", String::as_str);
        // The chain's own message ("an error occurred while loading credentials") adds
        // nothing; its source is what the last source tried said.
        let said = std::error::Error::source(e).map_or_else(|| e.to_string(), error_chain);
        StoreError::new(
            kind,
            self.location(key),
            format!(
                "{} failed: no AWS credentials found; strata tried {tried}; set \
                 store.access_key and store.secret_key, or provide credentials in one of these \
                 (the last source said: {})",
                op.name(),
                self.scrub(said)
            ),
        )
    }

    /// STS did not give the role's credentials: what it said, and what the base credentials
    /// and the role's trust policy must allow.
    fn role_refused(&self, role: &AssumeRole, e: &CredentialsError) -> String {
        let said = service_said(e).unwrap_or_else(|| {
            std::error::Error::source(e).map_or_else(|| e.to_string(), error_chain)
        });
        let base = match &self.credential_sources {
            None => "the keys of store.access_key need",
            Some(_) => "the identity the AWS default credential chain finds needs",
        };
        let sts = match (&role.sts_endpoint, self.endpoint.starts_with("http")) {
            (Some(e), _) => format!("{e} (store.sts_endpoint)"),
            (None, true) => format!(
                "{} (store.endpoint; store.sts_endpoint names another)",
                self.endpoint
            ),
            (None, false) => format!("AWS's regional STS endpoint of {}", self.region.name),
        };
        if network_failure(e) {
            return format!(
                "assuming role {} failed: cannot reach STS at {sts}; check that address and \
                 the network ({})",
                role.role_arn,
                self.scrub(said)
            );
        }
        format!(
            "assuming role {} failed ({}); {base} sts:AssumeRole on it, and the role's trust \
             policy must allow them{}; STS was asked at {sts}",
            role.role_arn,
            self.scrub(said),
            if role.external_id.is_some() {
                " with the external id of store.external_id"
            } else {
                " (set store.external_id when it requires one)"
            }
        )
    }

    /// GET of a whole object or of a byte range (end exclusive), body collected.
    async fn get_object(&self, key: &str, range: Option<Range<u64>>) -> Result<Bytes, StoreError> {
        let full = self.full_key(key)?;
        let op = if range.is_some() {
            Op::RangedGet
        } else {
            Op::Get
        };
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(full)
            .set_range(range.map(|r| format!("bytes={}-{}", r.start, r.end - 1)))
            .send()
            .await
            .map_err(|e| self.err(key, op, e))?;
        out.body
            .collect()
            .await
            .map(|b| b.into_bytes())
            .map_err(|e| {
                StoreError::new(
                    ErrorKind::Unreachable,
                    self.location(key),
                    format!("reading the body failed: {e}"),
                )
            })
    }

    async fn upload_part(
        &self,
        key: &str,
        full: &str,
        upload_id: &str,
        n: i32,
        data: Chunks,
    ) -> Result<CompletedPart, StoreError> {
        let out = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(full)
            .upload_id(upload_id)
            .part_number(n)
            .checksum_algorithm(ChecksumAlgorithm::Crc32C)
            .checksum_crc32_c(crc32c_header(data.crc32c()))
            .body(data.into_body())
            .customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| self.err(key, Op::UploadPart, e))?;
        Ok(CompletedPart::builder()
            .part_number(n)
            .set_e_tag(out.e_tag)
            .set_checksum_crc32_c(out.checksum_crc32_c)
            .build())
    }

    /// A new upload; nothing is sent before its first full part (or its finish).
    fn upload(&self, key: &str) -> Result<S3Upload, StoreError> {
        let full = self.full_key(key)?;
        Ok(S3Upload {
            store: self.clone(),
            key: key.to_string(),
            full,
            tag: uuid::Uuid::new_v4().simple().to_string(),
            upload_id: None,
            buffer: Chunks::default(),
            parts: Vec::new(),
            ended: false,
        })
    }
}

#[async_trait]
impl ObjectStore for S3Store {
    async fn put(&self, key: &str, data: Bytes) -> Result<(), StoreError> {
        let mut up = self.upload(key)?;
        up.write(data).await?;
        Box::new(up).finish(Finish::Replace).await.map(|_| ())
    }

    async fn put_multipart(&self, key: &str) -> Result<Box<dyn MultipartUpload>, StoreError> {
        Ok(Box::new(self.upload(key)?))
    }

    async fn tag_of(&self, key: &str) -> Result<Option<String>, StoreError> {
        let full = self.full_key(key)?;
        let out = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(full)
            .send()
            .await
            .map_err(|e| self.err(key, Op::Head, e))?;
        Ok(out.metadata.and_then(|mut m| m.remove(TAG_METADATA)))
    }

    fn part_size(&self) -> usize {
        self.part_size
    }

    async fn incomplete(&self, prefix: &str) -> Result<Vec<Incomplete>, StoreError> {
        let full_prefix = format!("{}{prefix}", self.prefix);
        let mut out = Vec::new();
        let (mut key_marker, mut id_marker) = (None::<String>, None::<String>);
        loop {
            let page = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(&full_prefix)
                .set_key_marker(key_marker.take())
                .set_upload_id_marker(id_marker.take())
                .send()
                .await
                .map_err(|e| self.err(prefix, Op::ListMultipart, e))?;
            for u in page.uploads.unwrap_or_default() {
                let (Some(full), Some(id)) = (u.key, u.upload_id) else {
                    continue;
                };
                let Some(key) = full.strip_prefix(&self.prefix) else {
                    continue;
                };
                out.push(Incomplete {
                    key: key.to_string(),
                    started: u
                        .initiated
                        .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())),
                    handle: id,
                });
            }
            key_marker = page.next_key_marker;
            id_marker = page.next_upload_id_marker;
            if page.is_truncated != Some(true) || (key_marker.is_none() && id_marker.is_none()) {
                return Ok(out);
            }
        }
    }

    async fn abort_incomplete(&self, write: &Incomplete) -> Result<(), StoreError> {
        let full = self.full_key(&write.key)?;
        match self
            .client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(&full)
            .upload_id(&write.handle)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.code() == Some("NoSuchUpload")) =>
            {
                Ok(())
            }
            Err(e) => Err(self.err(&write.key, Op::AbortMultipart, e)),
        }
    }

    async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        self.get_object(key, None).await
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        if range.end <= range.start {
            return Err(StoreError::new(
                ErrorKind::InvalidInput,
                self.location(key),
                format!("empty range {}..{}", range.start, range.end),
            ));
        }
        self.get_object(key, Some(range)).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        let full = self.full_key(key)?;
        let out = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(full)
            .send()
            .await
            .map_err(|e| self.err(key, Op::Head, e))?;
        Ok(ObjectMeta {
            key: key.to_string(),
            size: out.content_length.unwrap_or_default().max(0) as u64,
            last_modified: out
                .last_modified
                .and_then(|t| chrono::DateTime::from_timestamp(t.secs(), t.subsec_nanos())),
        })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let full_prefix = format!("{}{prefix}", self.prefix);
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&full_prefix)
            .into_paginator()
            .send();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| self.err(prefix, Op::List, e))?;
            out.extend(
                page.contents
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|o| self.meta_of(o)),
            );
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<Vec<ObjectMeta>, StoreError> {
        let page = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(format!("{}{prefix}", self.prefix))
            .set_start_after(start_after.map(|a| format!("{}{a}", self.prefix)))
            .max_keys(max.clamp(1, 1000) as i32)
            .send()
            .await
            .map_err(|e| self.err(prefix, Op::List, e))?;
        let mut out: Vec<ObjectMeta> = page
            .contents
            .unwrap_or_default()
            .into_iter()
            .filter_map(|o| self.meta_of(o))
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out.truncate(max);
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let full = self.full_key(key)?;
        match self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(full)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let err = self.err(key, Op::Delete, e);
                if err.kind == ErrorKind::NotFound {
                    Ok(())
                } else {
                    Err(err)
                }
            }
        }
    }

    async fn check(&self) -> Result<(), StoreError> {
        let head = self.client.head_bucket().bucket(&self.bucket).send().await;
        if let Err(e) = head {
            let mut err = self.err("", Op::HeadBucket, e);
            if err.kind == ErrorKind::NotFound {
                err.kind = ErrorKind::NoSuchBucket;
            }
            if err.kind != ErrorKind::NoSuchBucket {
                return Err(err);
            }
            if !self.create_bucket {
                return Err(StoreError::new(
                    ErrorKind::NoSuchBucket,
                    self.location(""),
                    format!(
                        "bucket {:?} does not exist; create it or set store.create_bucket = true",
                        self.bucket
                    ),
                ));
            }
            let mut req = self.client.create_bucket().bucket(&self.bucket);
            if self.region.name != "us-east-1" {
                req = req.create_bucket_configuration(
                    aws_sdk_s3::types::CreateBucketConfiguration::builder()
                        .location_constraint(aws_sdk_s3::types::BucketLocationConstraint::from(
                            self.region.name.as_str(),
                        ))
                        .build(),
                );
            }
            if let Err(e) = req.send().await {
                let err = self.err("", Op::CreateBucket, e);
                if !err.message.contains("BucketAlreadyOwnedByYou") {
                    return Err(err);
                }
            }
        }
        let probe = format!(".strata-probe-{}", uuid::Uuid::new_v4().simple());
        self.put(&probe, Bytes::from_static(b"strata write check"))
            .await?;
        self.delete(&probe).await
    }

    fn location(&self, key: &str) -> String {
        format!("s3://{}/{}{key}", self.bucket, self.prefix)
    }
}

/// The credential chain's error, when that is why a request was not sent.
fn credentials_failure<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a CredentialsError> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(c) = err.downcast_ref::<CredentialsError>() {
            return Some(c);
        }
        next = err.source();
    }
    None
}

/// The code and message of the service error behind a credential provider's failure (STS
/// refusing a role), without the SDK's debug form.
fn service_said(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(m) = err.downcast_ref::<aws_sdk_s3::error::ErrorMetadata>() {
            return match (m.code(), m.message()) {
                (Some(c), Some(msg)) => Some(format!("{c}: {msg}")),
                (Some(c), None) => Some(c.to_string()),
                _ => None,
            };
        }
        next = err.source();
    }
    None
}

/// Whether a credential provider failed to reach its service (STS down, no network).
fn network_failure(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err.is::<aws_sdk_s3::error::ConnectorError>() {
            return true;
        }
        next = err.source();
    }
    false
}

/// The credentials of `role`, assumed with the `shared` config's (static or default chain);
/// STS is asked at `store.sts_endpoint`, else `store.endpoint` (S3-compatible stores serve
/// STS on their S3 port), else AWS's regional STS.
async fn assume_role(
    shared: &aws_config::SdkConfig,
    role: &AssumeRole,
    endpoint: Option<&str>,
) -> aws_config::sts::AssumeRoleProvider {
    let mut conf = shared.clone().into_builder();
    if let Some(e) = role.sts_endpoint.as_deref().or(endpoint) {
        conf = conf.endpoint_url(e);
    }
    let mut b = aws_config::sts::AssumeRoleProvider::builder(&role.role_arn)
        .session_name(&role.session_name)
        .configure(&conf.build());
    if let Some(id) = &role.external_id {
        b = b.external_id(id);
    }
    b.build().await
}

/// Hints for the 4xx answers a setting of `[store]` causes.
fn rejected_hint(code: &str, region: &str) -> Option<String> {
    Some(match code {
        "KMS.NotFoundException" => format!(
            "the KMS key of store.sse_kms_key_id does not exist in the bucket's region {region} \
             (a key of another account needs its full ARN)"
        ),
        "KMS.DisabledException" | "KMS.KMSInvalidStateException" => "the KMS key of \
            store.sse_kms_key_id is disabled or pending deletion; enable it or name another"
            .to_string(),
        "AccessControlListNotSupported" => "the bucket has ACLs disabled (Object Ownership \
            \"bucket owner enforced\"); leave store.acl out, or set it to \
            \"bucket-owner-full-control\""
            .to_string(),
        "InvalidStorageClass" => {
            "the store does not offer store.storage_class; leave it out or pick another".to_string()
        }
        "InvalidTag" => "the store refused store.tags; check their keys and values".to_string(),
        _ => return None,
    })
}

/// An answer that says the bucket is in another region than the one requests are signed for.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WrongRegion {
    /// The bucket's region, when S3 said it (`x-amz-bucket-region`, or the message of
    /// `AuthorizationHeaderMalformed`).
    bucket_region: Option<String>,
}

/// S3 answers a request signed for the wrong region with 301 `PermanentRedirect` (no body for
/// HEAD) or 400 `AuthorizationHeaderMalformed`; both name the bucket's region. Neither heals by
/// sending again.
fn wrong_region<E: ProvideErrorMetadata>(
    code: &str,
    status: Option<u16>,
    e: &SdkError<E, HttpResponse>,
) -> Option<WrongRegion> {
    let header = e
        .raw_response()
        .and_then(|r| r.headers().get("x-amz-bucket-region"))
        .map(str::to_string);
    let in_message = || {
        // "... the region 'us-east-1' is wrong; expecting 'eu-west-1'"
        let m = e.message()?;
        let (_, rest) = m.split_once("expecting '")?;
        let (r, _) = rest.split_once('\'')?;
        Some(r.to_string())
    };
    match (code, status) {
        ("PermanentRedirect", _) | (_, Some(301)) => Some(WrongRegion {
            bucket_region: header.or_else(in_message),
        }),
        ("AuthorizationHeaderMalformed", _) => {
            let r = header.or_else(in_message)?;
            Some(WrongRegion {
                bucket_region: Some(r),
            })
        }
        _ => None,
    }
}

/// How a request failed before its answer was classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    Network,
    Service,
    Other,
}

/// Maps an S3 error code and HTTP status to what a caller does about it.
fn classify(failure: Failure, code: &str, status: Option<u16>) -> ErrorKind {
    match failure {
        Failure::Network => ErrorKind::Unreachable,
        Failure::Other => ErrorKind::Service,
        Failure::Service => match (code, status) {
            ("NoSuchBucket", _) => ErrorKind::NoSuchBucket,
            // The bucket is in another region: the same request gets the same redirect.
            ("PermanentRedirect" | "AuthorizationHeaderMalformed", _) | (_, Some(301)) => {
                ErrorKind::Rejected
            }
            ("NoSuchKey" | "NotFound", _) | (_, Some(404)) => ErrorKind::NotFound,
            (
                "InvalidAccessKeyId"
                | "SignatureDoesNotMatch"
                | "AccessDenied"
                | "InvalidToken"
                | "ExpiredToken",
                _,
            )
            | (_, Some(401 | 403)) => ErrorKind::Unauthorized,
            ("InvalidRange", _) | (_, Some(416)) => ErrorKind::InvalidInput,
            // 4xx answers that say "again, later": a slow or cut body, a body damaged on the
            // way (its CRC32C did not match), a conflicting operation, throttling.
            (
                "RequestTimeout"
                | "IncompleteBody"
                | "BadDigest"
                | "OperationAborted"
                | "SlowDown"
                | "Throttling"
                | "ThrottlingException"
                | "TooManyRequests",
                _,
            )
            | (_, Some(408 | 409 | 429)) => ErrorKind::Service,
            (_, Some(400..=499)) => ErrorKind::Rejected,
            _ => ErrorKind::Service,
        },
    }
}

/// User metadata naming the upload that wrote an object (its [`MultipartUpload::tag`]).
const TAG_METADATA: &str = "strata-writer";

struct S3Upload {
    store: S3Store,
    key: String,
    full: String,
    tag: String,
    /// Set once the first part went out; until then the object is only in `buffer`.
    upload_id: Option<String>,
    /// Bytes written and not sent yet (less than a part), as the caller's pieces.
    buffer: Chunks,
    parts: Vec<CompletedPart>,
    /// Completed or aborted: nothing is left to clean up.
    ended: bool,
}

impl Drop for S3Upload {
    /// A cancelled writer (its task dropped mid-upload) must not leave parts that S3 keeps
    /// billing: the abort goes on in the background.
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        let (Some(id), Ok(rt)) = (self.upload_id.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let (store, full, key) = (
            self.store.clone(),
            std::mem::take(&mut self.full),
            std::mem::take(&mut self.key),
        );
        rt.spawn(async move { abort_upload(&store, &key, &full, &id).await });
    }
}

/// Aborts an upload, retrying for a few minutes while the store is unreachable (an upload cut
/// off by an outage cannot be aborted during it).
async fn abort_upload(store: &S3Store, key: &str, full: &str, upload_id: &str) {
    let mut pause = Duration::from_secs(1);
    for attempt in 1.. {
        let r = store
            .client
            .abort_multipart_upload()
            .bucket(&store.bucket)
            .key(full)
            .upload_id(upload_id)
            .send()
            .await;
        let Err(e) = r else { return };
        if e.code() == Some("NoSuchUpload") {
            return;
        }
        let transient = matches!(e, SdkError::DispatchFailure(_) | SdkError::TimeoutError(_))
            || e.raw_response()
                .is_some_and(|r| r.status().is_server_error());
        if !transient || attempt >= ABORT_ATTEMPTS {
            tracing::warn!(object = %store.location(key), error = %store.scrub(error_chain(&e)), "abort of a multipart upload failed; it is removed at the next start, or by a lifecycle rule for incomplete uploads");
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(30));
    }
}

/// Tries of an abort while the store is unreachable: about five minutes.
const ABORT_ATTEMPTS: u32 = 13;

/// The `x-amz-checksum-crc32c` value of a body: base64 of the big-endian CRC32C. Bodies go up
/// with this checksum instead of a SHA-256 payload signature (`UNSIGNED-PAYLOAD`): the store
/// still refuses a body changed on the way, and hashing the payload was a large share of a text
/// dump's CPU to S3, CRC32C a small fraction of it (bench/README.md, "Allocator purging and
/// unsigned payloads").
fn crc32c_header(crc: u32) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

/// S3 answers a conditional write whose key is taken with 412.
fn precondition_failed<E: ProvideErrorMetadata>(e: &SdkError<E, HttpResponse>) -> bool {
    e.code() == Some("PreconditionFailed")
        || e.raw_response().is_some_and(|r| r.status().as_u16() == 412)
}

impl S3Upload {
    async fn start(&mut self) -> Result<String, StoreError> {
        if let Some(id) = &self.upload_id {
            return Ok(id.clone());
        }
        let req = self
            .store
            .client
            .create_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.full)
            .metadata(TAG_METADATA, &self.tag)
            .checksum_algorithm(ChecksumAlgorithm::Crc32C);
        let out = match with_write_headers!(req, &self.store.headers).send().await {
            Ok(out) => out,
            Err(e) => {
                // No answer (or a 5xx): the upload may exist on S3 without strata knowing its id.
                if e.raw_response()
                    .is_none_or(|r| r.status().is_server_error())
                {
                    if let Ok(mut l) = self.store.lost_starts.lock() {
                        l.insert(self.key.clone());
                    }
                }
                return Err(self.store.err(&self.key, Op::StartMultipart, e));
            }
        };
        let id = out.upload_id.ok_or_else(|| {
            StoreError::new(
                ErrorKind::Service,
                self.store.location(&self.key),
                "the store returned no multipart upload id",
            )
        })?;
        self.upload_id = Some(id.clone());
        Ok(id)
    }

    async fn send_part(&mut self, data: Chunks) -> Result<(), StoreError> {
        let n = self.parts.len() as i32 + 1;
        if n > 10_000 {
            return Err(StoreError::new(
                ErrorKind::InvalidInput,
                self.store.location(&self.key),
                "more than 10000 parts; raise store.part_size",
            ));
        }
        let id = self.start().await?;
        let part = self
            .store
            .upload_part(&self.key, &self.full, &id, n, data)
            .await?;
        self.parts.push(part);
        Ok(())
    }

    async fn append(&mut self, data: Bytes) -> Result<(), StoreError> {
        self.buffer.push(data);
        while self.buffer.len() >= self.store.part_size {
            let part = self.buffer.take(self.store.part_size);
            self.send_part(part).await?;
        }
        Ok(())
    }

    /// One PUT of the buffered bytes (the object never reached a part).
    async fn put_whole(&mut self, mode: Finish) -> Result<Finished, StoreError> {
        let data = self.buffer.take_all();
        let mut req = self
            .store
            .client
            .put_object()
            .bucket(&self.store.bucket)
            .key(&self.full)
            .metadata(TAG_METADATA, &self.tag)
            .checksum_algorithm(ChecksumAlgorithm::Crc32C)
            .checksum_crc32_c(crc32c_header(data.crc32c()))
            .body(data.into_body());
        req = with_write_headers!(req, &self.store.headers);
        if mode == Finish::CreateNew {
            req = req.if_none_match("*");
        }
        match req.customize().disable_payload_signing().send().await {
            Ok(_) => Ok(Finished::Stored),
            Err(e) if mode == Finish::CreateNew && precondition_failed(&e) => Ok(Finished::Exists),
            Err(e) => Err(self.store.err(&self.key, Op::Put, e)),
        }
    }

    async fn complete(&mut self, mode: Finish) -> Result<Finished, StoreError> {
        if self.upload_id.is_none() {
            return self.put_whole(mode).await;
        }
        if !self.buffer.is_empty() {
            let rest = self.buffer.take_all();
            self.send_part(rest).await?;
        }
        let id = self.start().await?;
        let mut req = self
            .store
            .client
            .complete_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.full)
            .upload_id(&id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(self.parts.clone()))
                    .build(),
            );
        if mode == Finish::CreateNew {
            req = req.if_none_match("*");
        }
        match req.send().await {
            Ok(_) => Ok(Finished::Stored),
            Err(e) if mode == Finish::CreateNew && precondition_failed(&e) => {
                // The refused upload stays open on S3 until aborted.
                self.abort_quietly().await;
                Ok(Finished::Exists)
            }
            Err(e) => Err(self.store.err(&self.key, Op::CompleteMultipart, e)),
        }
    }

    async fn abort_quietly(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        if let Some(id) = self.upload_id.take() {
            abort_upload(&self.store, &self.key, &self.full, &id).await;
        }
    }
}

#[async_trait]
impl MultipartUpload for S3Upload {
    async fn write(&mut self, data: Bytes) -> Result<(), StoreError> {
        let r = self.append(data).await;
        if r.is_err() {
            self.abort_quietly().await;
        }
        r
    }

    async fn finish(mut self: Box<Self>, mode: Finish) -> Result<Finished, StoreError> {
        let r = self.complete(mode).await;
        match r {
            Ok(_) => {
                self.ended = true;
                self.store.abort_lost_starts(&self.key).await;
            }
            Err(_) => self.abort_quietly().await,
        }
        r
    }

    async fn abort(mut self: Box<Self>) -> Result<(), StoreError> {
        self.abort_quietly().await;
        Ok(())
    }

    fn tag(&self) -> &str {
        &self.tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_carry_the_crc32c_s3_expects() {
        // The check value of CRC-32C (RFC 3720) is 0xE3069283; S3 wants its 4 bytes, big-endian,
        // in base64.
        assert_eq!(crc32c_header(crc32c::crc32c(b"123456789")), "4waSgw==");
        assert_eq!(crc32c_header(crc32c::crc32c(b"")), "AAAAAA==");
    }

    #[test]
    fn errors_map_to_what_users_fix() {
        use ErrorKind::*;
        let svc = |code, status| classify(Failure::Service, code, status);
        assert_eq!(classify(Failure::Network, "", None), Unreachable);
        assert_eq!(svc("InvalidAccessKeyId", Some(403)), Unauthorized);
        assert_eq!(svc("SignatureDoesNotMatch", Some(403)), Unauthorized);
        assert_eq!(
            svc("", Some(403)),
            Unauthorized,
            "HEAD answers have no error body"
        );
        assert_eq!(svc("NoSuchBucket", Some(404)), NoSuchBucket);
        assert_eq!(svc("NoSuchKey", Some(404)), NotFound);
        assert_eq!(svc("", Some(404)), NotFound);
        assert_eq!(svc("InvalidRange", Some(416)), InvalidInput);
        assert_eq!(svc("SlowDown", Some(503)), Service);
        assert_eq!(svc("InvalidRequest", Some(400)), Rejected);
        assert_eq!(svc("KeyTooLongError", Some(400)), Rejected);
        assert_eq!(
            svc("", Some(400)),
            Rejected,
            "HEAD answers have no error body"
        );
        assert_eq!(svc("RequestTimeout", Some(400)), Service);
        assert_eq!(svc("BadDigest", Some(400)), Service);
        assert_eq!(svc("OperationAborted", Some(409)), Service);
        assert_eq!(svc("", Some(429)), Service);
        assert_eq!(svc("InternalError", Some(500)), Service);
        assert_eq!(svc("PermanentRedirect", Some(301)), Rejected);
        assert_eq!(
            svc("", Some(301)),
            Rejected,
            "HEAD answers have no error body"
        );
        assert_eq!(svc("AuthorizationHeaderMalformed", Some(400)), Rejected);
        assert_eq!(
            svc("TemporaryRedirect", Some(307)),
            Service,
            "a new bucket's DNS catching up"
        );
    }

    use crate::config::{ByteSize, RegionSource, Secret};
    use aws_smithy_runtime_api::client::http::{
        HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
    };
    use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
    use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The SDK's HTTP client replaced by one canned answer; counts the requests it got.
    #[derive(Debug, Clone)]
    struct Canned {
        status: u16,
        headers: Vec<(&'static str, &'static str)>,
        body: &'static str,
        calls: Arc<AtomicUsize>,
    }

    impl HttpConnector for Canned {
        fn call(&self, _: HttpRequest) -> HttpConnectorFuture {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let status = StatusCode::try_from(self.status).expect("a valid status");
            let mut r = HttpResponse::new(status, SdkBody::from(self.body));
            for (k, v) in &self.headers {
                r.headers_mut().insert(*k, *v);
            }
            HttpConnectorFuture::ready(Ok(r))
        }
    }

    impl HttpClient for Canned {
        fn http_connector(
            &self,
            _: &HttpConnectorSettings,
            _: &RuntimeComponents,
        ) -> SharedHttpConnector {
            SharedHttpConnector::new(self.clone())
        }
    }

    fn settings(credentials: Credentials) -> S3Settings {
        S3Settings {
            region: None,
            endpoint: None,
            path_style: false,
            credentials,
            role: None,
            objects: ObjectOptions::default(),
            create_bucket: false,
            part_size: ByteSize::mib(5),
            max_attempts: 3,
        }
    }

    fn test_keys() -> Credentials {
        Credentials::Static {
            access_key: Secret::new("AKIATEST".into(), "inline"),
            secret_key: Secret::new("not-a-secret".into(), "inline"),
            session_token: None,
        }
    }

    /// A store of bucket "logs" signing for us-east-1 (as `AWS_REGION` said) whose every
    /// request gets `answer`.
    async fn store_answering(answer: &Canned, credentials: Wiring) -> S3Store {
        let region = S3Region {
            name: "us-east-1".into(),
            source: RegionSource::Env("AWS_REGION"),
        };
        let creds = match credentials.credentials {
            Some(_) => Credentials::DefaultChain,
            None => test_keys(),
        };
        let wiring = Wiring {
            http: Some(SharedHttpClient::new(answer.clone())),
            ..credentials
        };
        S3Store::build(&settings(creds), "logs".into(), "p".into(), region, wiring)
            .await
            .unwrap()
    }

    fn answer(
        status: u16,
        headers: Vec<(&'static str, &'static str)>,
        body: &'static str,
    ) -> Canned {
        Canned {
            status,
            headers,
            body,
            calls: Arc::new(AtomicUsize::new(0)),
        }
    }

    const REDIRECT: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>PermanentRedirect</Code><Message>The bucket you are attempting to access must be addressed using the specified endpoint. Please send all future requests to this endpoint.</Message><Endpoint>logs.s3.eu-west-1.amazonaws.com</Endpoint><Bucket>logs</Bucket><RequestId>R</RequestId><HostId>H</HostId></Error>";

    #[tokio::test]
    async fn a_bucket_in_another_region_is_an_immediate_error_naming_it() {
        let region_header = ("x-amz-bucket-region", "eu-west-1");
        // GET: 301 with S3's error body; HEAD: the same status and header, no body.
        let get = answer(
            301,
            vec![region_header, ("content-type", "application/xml")],
            REDIRECT,
        );
        let store = store_answering(&get, Wiring::default()).await;
        let err = store
            .get("2026/t+0+00000000000000000000.jsonl")
            .await
            .unwrap_err();
        let head = answer(301, vec![region_header], "");
        let headed = store_answering(&head, Wiring::default()).await;
        let head_err = headed.head("k").await.unwrap_err();
        for (e, calls) in [(&err, &get.calls), (&head_err, &head.calls)] {
            assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
            assert!(!e.is_transient(), "{e}");
            let m = e.to_string();
            for part in [
                "bucket \"logs\" is in region eu-west-1",
                "signs its requests for us-east-1 (from AWS_REGION)",
                "set store.region = \"eu-west-1\"",
            ] {
                assert!(m.contains(part), "{part:?} in {m}");
            }
            assert_eq!(
                calls.load(Ordering::SeqCst),
                1,
                "sent once, not retried: {m}"
            );
        }
        // A signature for the wrong region: 400 with the region in the message only.
        let malformed = answer(
            400,
            vec![],
            "<Error><Code>AuthorizationHeaderMalformed</Code><Message>The authorization header is malformed; the region 'us-east-1' is wrong; expecting 'ap-south-1'</Message><Region>ap-south-1</Region></Error>",
        );
        let e = store_answering(&malformed, Wiring::default())
            .await
            .get("k")
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
        assert!(
            e.message.contains("set store.region = \"ap-south-1\""),
            "{e}"
        );
    }

    #[tokio::test]
    async fn no_credentials_anywhere_says_so_and_where_it_looked() {
        use aws_credential_types::provider::future::ProvideCredentials as Future;
        use aws_credential_types::provider::ProvideCredentials;
        #[derive(Debug)]
        struct Nowhere;
        impl ProvideCredentials for Nowhere {
            fn provide_credentials<'a>(&'a self) -> Future<'a>
            where
                Self: 'a,
            {
                Future::ready(Err(CredentialsError::not_loaded(
                    "no providers in chain provided credentials",
                )))
            }
        }
        let never = answer(200, vec![], "");
        let wiring = Wiring {
            http: None,
            credentials: Some(SharedCredentialsProvider::new(Nowhere)),
        };
        let store = store_answering(&never, wiring).await;
        let e = store.get("k").await.unwrap_err();
        let m = e.to_string();
        assert_eq!(e.kind, ErrorKind::Unauthorized, "{m}");
        assert!(!e.is_transient());
        for part in [
            "no AWS credentials found",
            "store.access_key and store.secret_key (not set)",
            "AWS_ACCESS_KEY_ID",
            "web identity",
            "EC2 instance metadata",
            "no providers in chain provided credentials",
        ] {
            assert!(m.contains(part), "{part:?} in {m}");
        }
        for debug in [
            "cannot reach",
            "store.endpoint",
            "DispatchFailure",
            "ConnectorError",
            "{",
        ] {
            assert!(!m.contains(debug), "{debug:?} in {m}");
        }
        assert_eq!(never.calls.load(Ordering::SeqCst), 0, "nothing was sent");
    }

    // --------------------------------------------------------------------------------------
    // What requests carry: a connector that records every request and answers by its kind.

    /// A request as the store sent it.
    #[derive(Debug, Clone)]
    struct Seen {
        method: String,
        uri: String,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }

        fn is_sts(&self) -> bool {
            self.body.contains("Action=AssumeRole")
        }
    }

    type Answer = (u16, Vec<(&'static str, String)>, String);

    /// The SDK's HTTP client replaced by `answer`, which sees each request; keeps them all.
    /// Status 0: no answer (connection refused).
    #[derive(Clone)]
    struct Recorder {
        answer: Arc<dyn Fn(&Seen) -> Answer + Send + Sync>,
        seen: Arc<std::sync::Mutex<Vec<Seen>>>,
    }

    impl std::fmt::Debug for Recorder {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Recorder")
        }
    }

    impl Recorder {
        fn new(answer: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> Self {
            Self {
                answer: Arc::new(answer),
                seen: Arc::default(),
            }
        }

        fn seen(&self) -> Vec<Seen> {
            self.seen.lock().unwrap().clone()
        }
    }

    impl HttpConnector for Recorder {
        fn call(&self, req: HttpRequest) -> HttpConnectorFuture {
            let seen = Seen {
                method: req.method().to_string(),
                uri: req.uri().to_string(),
                headers: req
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                body: req
                    .body()
                    .bytes()
                    .map(|b| String::from_utf8_lossy(b).into_owned())
                    .unwrap_or_default(),
            };
            let (status, headers, body) = (self.answer)(&seen);
            self.seen.lock().unwrap().push(seen);
            if status == 0 {
                return HttpConnectorFuture::ready(Err(aws_sdk_s3::error::ConnectorError::io(
                    "connection refused".into(),
                )));
            }
            let mut r = HttpResponse::new(
                StatusCode::try_from(status).expect("a valid status"),
                SdkBody::from(body),
            );
            for (k, v) in headers {
                r.headers_mut().insert(k, v);
            }
            HttpConnectorFuture::ready(Ok(r))
        }
    }

    impl HttpClient for Recorder {
        fn http_connector(
            &self,
            _: &HttpConnectorSettings,
            _: &RuntimeComponents,
        ) -> SharedHttpConnector {
            SharedHttpConnector::new(self.clone())
        }
    }

    /// What S3 answers each request of an upload (and anything else: 200, empty).
    fn s3_answers(r: &Seen) -> Answer {
        let etag = || vec![("etag", "\"e\"".to_string())];
        match r.method.as_str() {
            "POST" if r.uri.contains("uploads") => (
                200,
                vec![],
                "<InitiateMultipartUploadResult><Bucket>logs</Bucket><Key>p/k</Key><UploadId>U1</UploadId></InitiateMultipartUploadResult>".into(),
            ),
            "POST" if r.uri.contains("uploadId") => (
                200,
                vec![],
                "<CompleteMultipartUploadResult><Bucket>logs</Bucket><Key>p/k</Key><ETag>\"e\"</ETag></CompleteMultipartUploadResult>".into(),
            ),
            "PUT" => (200, etag(), String::new()),
            _ => (200, vec![], String::new()),
        }
    }

    async fn store_recording(s: &S3Settings, rec: &Recorder) -> S3Store {
        let region = S3Region {
            name: "us-east-1".into(),
            source: RegionSource::Config,
        };
        let wiring = Wiring {
            http: Some(SharedHttpClient::new(rec.clone())),
            credentials: None,
        };
        S3Store::build(s, "logs".into(), "p".into(), region, wiring)
            .await
            .unwrap()
    }

    fn all_settings() -> ObjectOptions {
        ObjectOptions {
            sse: Some(Sse::Kms {
                key_id: Some("alias/strata".into()),
            }),
            storage_class: Some(StorageClass::StandardIa),
            tags: [
                ("team".to_string(), "data".to_string()),
                ("cost center".to_string(), "a/b=c&d".to_string()),
            ]
            .into(),
            acl: Some(CannedAcl::BucketOwnerFullControl),
        }
    }

    const WRITE_HEADERS: [(&str, &str); 5] = [
        ("x-amz-server-side-encryption", "aws:kms"),
        (
            "x-amz-server-side-encryption-aws-kms-key-id",
            "alias/strata",
        ),
        ("x-amz-storage-class", "STANDARD_IA"),
        ("x-amz-tagging", "cost%20center=a%2Fb%3Dc%26d&team=data"),
        ("x-amz-acl", "bucket-owner-full-control"),
    ];

    /// A multipart start whose answer never came may have made an upload strata has no id
    /// for: once the key is stored (by the retry), the key's other uploads are aborted, and
    /// no other key's.
    #[tokio::test]
    async fn an_upload_whose_start_got_no_answer_is_aborted_once_the_key_is_stored() {
        let mut s = settings(test_keys());
        s.max_attempts = 1;
        let creates = Arc::new(AtomicUsize::new(0));
        let c = creates.clone();
        let rec = Recorder::new(move |r| {
            match (r.method.as_str(), r.uri.as_str()) {
            ("POST", u) if u.contains("uploads") && c.fetch_add(1, Ordering::SeqCst) == 0 => {
                (0, vec![], String::new())
            }
            ("GET", u) if u.contains("uploads") => (
                200,
                vec![],
                "<ListMultipartUploadsResult><Bucket>logs</Bucket><IsTruncated>false</IsTruncated>\
                 <Upload><Key>p/big</Key><UploadId>U0</UploadId><Initiated>2026-12-07T00:00:00.000Z</Initiated></Upload>\
                 <Upload><Key>p/big2</Key><UploadId>U9</UploadId><Initiated>2026-12-07T00:00:00.000Z</Initiated></Upload>\
                 </ListMultipartUploadsResult>"
                    .into(),
            ),
            ("DELETE", _) => (204, vec![], String::new()),
            _ => s3_answers(r),
        }
        });
        let store = store_recording(&s, &rec).await;
        let part = || Bytes::from(vec![7u8; (5 << 20) + 1]);
        let mut up = store.put_multipart("big").await.unwrap();
        assert!(up.write(part()).await.is_err(), "the start got no answer");
        assert!(
            !rec.seen().iter().any(|r| r.method == "GET"),
            "nothing is looked for before the key is stored"
        );
        let mut up = store.put_multipart("big").await.unwrap();
        up.write(part()).await.unwrap();
        up.finish(Finish::CreateNew).await.unwrap();
        let aborts: Vec<String> = rec
            .seen()
            .iter()
            .filter(|r| r.method == "DELETE")
            .map(|r| r.uri.clone())
            .collect();
        assert_eq!(aborts.len(), 1, "{aborts:?}");
        assert!(
            aborts[0].contains("p/big?") && aborts[0].contains("uploadId=U0"),
            "{aborts:?}"
        );
        // Done once: another object of the key looks for nothing.
        let lists = rec.seen().iter().filter(|r| r.method == "GET").count();
        let mut up = store.put_multipart("big").await.unwrap();
        up.write(part()).await.unwrap();
        up.finish(Finish::Replace).await.unwrap();
        assert_eq!(
            rec.seen().iter().filter(|r| r.method == "GET").count(),
            lists
        );
    }

    #[tokio::test]
    async fn every_object_created_carries_the_store_settings_and_parts_do_not() {
        let mut s = settings(test_keys());
        s.objects = all_settings();
        let rec = Recorder::new(s3_answers);
        let store = store_recording(&s, &rec).await;
        // A small object (one PutObject) and a multipart one (5 MiB parts).
        store.put("small", Bytes::from_static(b"x")).await.unwrap();
        let mut up = store.put_multipart("big").await.unwrap();
        up.write(Bytes::from(vec![7u8; (5 << 20) + 1]))
            .await
            .unwrap();
        up.finish(Finish::CreateNew).await.unwrap();
        let seen = rec.seen();
        let kinds: Vec<(&str, bool)> = seen
            .iter()
            .map(|r| {
                let kind = match (r.method.as_str(), &r.uri) {
                    ("PUT", u) if u.contains("partNumber") => "UploadPart",
                    ("PUT", _) => "PutObject",
                    ("POST", u) if u.contains("uploads") => "CreateMultipartUpload",
                    ("POST", _) => "CompleteMultipartUpload",
                    _ => "other",
                };
                (kind, r.header("x-amz-server-side-encryption").is_some())
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("PutObject", true),
                ("CreateMultipartUpload", true),
                ("UploadPart", false),
                ("UploadPart", false),
                ("CompleteMultipartUpload", false),
            ]
        );
        for r in seen.iter().filter(|r| kinds_create(r)) {
            for (name, value) in WRITE_HEADERS {
                assert_eq!(
                    r.header(name),
                    Some(value),
                    "{name} of {} {}",
                    r.method,
                    r.uri
                );
            }
        }
        for r in seen.iter().filter(|r| !kinds_create(r)) {
            for (name, _) in WRITE_HEADERS {
                assert_eq!(r.header(name), None, "{name} of {} {}", r.method, r.uri);
            }
        }
        // Without settings, no such header goes out.
        let rec = Recorder::new(s3_answers);
        let plain = store_recording(&settings(test_keys()), &rec).await;
        plain.put("small", Bytes::from_static(b"x")).await.unwrap();
        for (name, _) in WRITE_HEADERS {
            assert_eq!(rec.seen()[0].header(name), None, "{name}");
        }
    }

    /// A PutObject or CreateMultipartUpload.
    fn kinds_create(r: &Seen) -> bool {
        (r.method == "PUT" && !r.uri.contains("partNumber"))
            || (r.method == "POST" && r.uri.contains("uploads"))
    }

    #[test]
    fn sse_s3_sends_no_key_id() {
        let h = WriteHeaders::of(&ObjectOptions {
            sse: Some(Sse::S3),
            ..ObjectOptions::default()
        });
        assert_eq!(h.sse, Some(ServerSideEncryption::Aes256));
        assert_eq!(h.kms_key_id, None);
        assert_eq!(
            WriteHeaders::of(&ObjectOptions::default()),
            WriteHeaders::default()
        );
    }

    #[test]
    fn tags_are_encoded_as_a_url_query() {
        let tags = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<std::collections::BTreeMap<_, _>>()
        };
        assert_eq!(tagging_header(&tags(&[])), None);
        assert_eq!(
            tagging_header(&tags(&[("b", "2"), ("a", "1")])).as_deref(),
            Some("a=1&b=2")
        );
        assert_eq!(
            tagging_header(&tags(&[("k:x/y", "v w+@é"), ("e", "")])).as_deref(),
            Some("e=&k%3Ax%2Fy=v%20w%2B%40%C3%A9")
        );
    }

    #[tokio::test]
    async fn a_session_token_goes_with_the_static_keys_and_is_never_shown() {
        let mut s = settings(Credentials::Static {
            access_key: Secret::new("ASIATEMP".into(), "inline"),
            secret_key: Secret::new("temp-secret".into(), "inline"),
            session_token: Some(Secret::new("temp-token-123".into(), "inline")),
        });
        s.max_attempts = 1;
        let rec = Recorder::new(|_| {
            (
                403,
                vec![],
                "<Error><Code>ExpiredToken</Code><Message>The token temp-token-123 has expired</Message></Error>".into(),
            )
        });
        let store = store_recording(&s, &rec).await;
        let e = store.put("k", Bytes::from_static(b"x")).await.unwrap_err();
        let sent = &rec.seen()[0];
        assert_eq!(sent.header("x-amz-security-token"), Some("temp-token-123"));
        assert!(sent
            .header("authorization")
            .is_some_and(|a| a.contains("Credential=ASIATEMP/")));
        assert_eq!(e.kind, ErrorKind::Unauthorized, "{e}");
        let m = e.to_string();
        assert!(m.contains("session token is expired or invalid"), "{m}");
        assert!(m.contains("store.session_token"), "{m}");
        assert!(!m.contains("temp-token-123"), "{m}");
    }

    const ASSUMED: &str = "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><AssumeRoleResult><AssumedRoleUser><Arn>arn:aws:sts::111111111111:assumed-role/strata-writer/sess-1</Arn><AssumedRoleId>AROAEXAMPLE:sess-1</AssumedRoleId></AssumedRoleUser><Credentials><AccessKeyId>ASIAROLEKEY</AccessKeyId><SecretAccessKey>role-secret</SecretAccessKey><SessionToken>role-token</SessionToken><Expiration>2099-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleResult><ResponseMetadata><RequestId>r-1</RequestId></ResponseMetadata></AssumeRoleResponse>";

    fn role_settings() -> S3Settings {
        let mut s = settings(test_keys());
        s.role = Some(AssumeRole {
            role_arn: "arn:aws:iam::111111111111:role/strata-writer".into(),
            external_id: Some("ext-1".into()),
            session_name: "sess-1".into(),
            sts_endpoint: None,
        });
        s
    }

    #[tokio::test]
    async fn an_assumed_role_signs_the_requests() {
        let rec = Recorder::new(|r| {
            if r.is_sts() {
                (200, vec![], ASSUMED.into())
            } else {
                s3_answers(r)
            }
        });
        let store = store_recording(&role_settings(), &rec).await;
        store.put("k", Bytes::from_static(b"x")).await.unwrap();
        store.get("k").await.unwrap();
        let seen = rec.seen();
        let sts: Vec<&Seen> = seen.iter().filter(|r| r.is_sts()).collect();
        assert_eq!(sts.len(), 1, "assumed once, then cached: {seen:#?}");
        let asked = sts[0];
        assert!(
            asked.uri.starts_with("https://sts.us-east-1.amazonaws.com"),
            "{}",
            asked.uri
        );
        for part in [
            "RoleArn=arn%3Aaws%3Aiam%3A%3A111111111111%3Arole%2Fstrata-writer",
            "RoleSessionName=sess-1",
            "ExternalId=ext-1",
        ] {
            assert!(asked.body.contains(part), "{part} in {}", asked.body);
        }
        assert!(
            asked
                .header("authorization")
                .is_some_and(|a| a.contains("Credential=AKIATEST/")),
            "STS is asked with the static keys"
        );
        let s3: Vec<&Seen> = seen.iter().filter(|r| !r.is_sts()).collect();
        assert_eq!(s3.len(), 2);
        for r in s3 {
            assert!(
                r.header("authorization")
                    .is_some_and(|a| a.contains("Credential=ASIAROLEKEY/")),
                "{r:?}"
            );
            assert_eq!(r.header("x-amz-security-token"), Some("role-token"));
        }
    }

    #[tokio::test]
    async fn sts_refusing_the_role_says_what_to_grant() {
        let rec = Recorder::new(|r| {
            if r.is_sts() {
                (
                    403,
                    vec![("content-type", "text/xml".into())],
                    "<ErrorResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\"><Error><Type>Sender</Type><Code>AccessDenied</Code><Message>User: arn:aws:iam::222222222222:user/strata is not authorized to perform: sts:AssumeRole on resource: arn:aws:iam::111111111111:role/strata-writer</Message></Error><RequestId>r-2</RequestId></ErrorResponse>".into(),
                )
            } else {
                s3_answers(r)
            }
        });
        let mut s = role_settings();
        s.endpoint = Some("http://127.0.0.1:4566".into());
        let store = store_recording(&s, &rec).await;
        let e = store.put("k", Bytes::from_static(b"x")).await.unwrap_err();
        let m = e.to_string();
        assert_eq!(e.kind, ErrorKind::Unauthorized, "{m}");
        for part in [
            "put failed: assuming role arn:aws:iam::111111111111:role/strata-writer failed",
            "AccessDenied",
            "is not authorized to perform: sts:AssumeRole",
            "the keys of store.access_key need sts:AssumeRole on it",
            "trust policy",
            "store.external_id",
            "(AccessDenied: User: arn:aws:iam::222222222222:user/strata is not authorized",
            "STS was asked at http://127.0.0.1:4566 (store.endpoint; ",
        ] {
            assert!(m.contains(part), "{part:?} in {m}");
        }
        assert!(!m.contains("not-a-secret"), "{m}");
        let seen = rec.seen();
        assert!(
            seen.iter().all(Seen::is_sts),
            "no S3 request without credentials"
        );
        assert!(
            seen[0].uri.starts_with("http://127.0.0.1:4566"),
            "{}",
            seen[0].uri
        );
    }

    #[tokio::test]
    async fn an_unreachable_sts_is_named_as_unreachable() {
        let rec = Recorder::new(|r| {
            if r.is_sts() {
                (0, vec![], String::new())
            } else {
                s3_answers(r)
            }
        });
        let mut s = role_settings();
        s.max_attempts = 2;
        let store = store_recording(&s, &rec).await;
        let e = store.get("k").await.unwrap_err();
        let m = e.to_string();
        assert_eq!(e.kind, ErrorKind::Unreachable, "{m}");
        assert!(
            m.contains(
                "assuming role arn:aws:iam::111111111111:role/strata-writer failed: cannot reach \
                 STS at AWS's regional STS endpoint of us-east-1"
            ),
            "{m}"
        );
        assert!(!m.contains("sts:AssumeRole"), "{m}");
        let seen = rec.seen();
        assert_eq!(
            seen.len(),
            2,
            "store.max_attempts applies to STS: {seen:#?}"
        );
        assert!(seen.iter().all(Seen::is_sts));
    }

    #[tokio::test]
    async fn access_denied_names_the_action_and_the_resource() {
        let denied = |_: &Seen| -> Answer {
            (
                403,
                vec![],
                "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>".into(),
            )
        };
        let mut s = settings(test_keys());
        s.objects.tags = [("team".to_string(), "data".to_string())].into();
        let store = store_recording(&s, &Recorder::new(denied)).await;
        let e = store
            .put("t/k.jsonl", Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unauthorized, "{e}");
        assert!(!e.is_transient());
        let m = e.to_string();
        for part in [
            "put failed: access denied: the access key of store.access_key needs s3:PutObject \
             and s3:PutObjectTagging on arn:aws:s3:::logs/p/t/k.jsonl",
            "docs/operations.md#iam-policy",
            "set store.sse",
            "(AccessDenied: Access Denied)",
        ] {
            assert!(m.contains(part), "{part:?} in {m}");
        }
        let e = store.list("t/").await.unwrap_err();
        assert!(
            e.message
                .contains("needs s3:ListBucket on arn:aws:s3:::logs (prefix \"p/t/\")"),
            "{e}"
        );
        let e = store.delete("t/k.jsonl").await.unwrap_err();
        assert!(
            e.message
                .contains("s3:DeleteObject on arn:aws:s3:::logs/p/t/k.jsonl"),
            "{e}"
        );
        let e = store.incomplete("t/").await.unwrap_err();
        assert!(e.message.contains("s3:ListBucketMultipartUploads"), "{e}");
        // A HEAD's 403 has no body: the permissions, and the credentials as a suspect.
        let head = store_recording(&s, &Recorder::new(|_| (403, vec![], String::new()))).await;
        let e = head.head("t/k.jsonl").await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unauthorized, "{e}");
        assert!(
            e.message
                .contains("needs s3:GetObject on arn:aws:s3:::logs/p/t/k.jsonl"),
            "{e}"
        );
        assert!(e.message.contains("no reason for a HEAD"), "{e}");
        // With SSE-KMS the key's actions are named too.
        s.objects.sse = Some(Sse::Kms {
            key_id: Some("arn:aws:kms:us-east-1:123456789012:key/k-1".into()),
        });
        let store = store_recording(&s, &Recorder::new(denied)).await;
        let e = store
            .put("t/k.jsonl", Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(
            e.message
                .contains("and kms:GenerateDataKey on arn:aws:kms:us-east-1:123456789012:key/k-1"),
            "{e}"
        );
        assert!(!e.message.contains("set store.sse"), "{e}");
        // Credentials the store does not take are not a permissions problem.
        let bad_key = |_: &Seen| -> Answer {
            (
                403,
                vec![],
                "<Error><Code>InvalidAccessKeyId</Code><Message>no such key</Message></Error>"
                    .into(),
            )
        };
        let store = store_recording(&s, &Recorder::new(bad_key)).await;
        let e = store.get("k").await.unwrap_err();
        assert!(
            e.message
                .contains("check store.access_key / store.secret_key"),
            "{e}"
        );
        assert!(!e.message.contains("s3:GetObject"), "{e}");
    }

    #[tokio::test]
    async fn refusals_caused_by_store_settings_name_the_setting() {
        for (code, status, setting) in [
            (
                "KMS.NotFoundException",
                400,
                "store.sse_kms_key_id does not exist",
            ),
            (
                "KMS.DisabledException",
                400,
                "store.sse_kms_key_id is disabled",
            ),
            ("AccessControlListNotSupported", 400, "leave store.acl out"),
            ("InvalidStorageClass", 400, "store.storage_class"),
        ] {
            let body = format!("<Error><Code>{code}</Code><Message>m</Message></Error>");
            let rec = Recorder::new(move |_| (status, vec![], body.clone()));
            let store = store_recording(&settings(test_keys()), &rec).await;
            let e = store.put("k", Bytes::from_static(b"x")).await.unwrap_err();
            assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
            assert!(e.message.contains(setting), "{setting:?} in {e}");
            assert_eq!(rec.seen().len(), 1, "not retried");
        }
    }
}
