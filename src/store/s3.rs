//! S3 backend (AWS S3 or a compatible store such as LocalStack or MinIO). Large objects go up
//! in multipart uploads. Bodies go up unsigned with a CRC32C checksum the store verifies; the SDK
//! adds no other checksums (S3-compatible stores differ in which they accept). Error messages
//! name the fix (a bucket in another region, no credentials anywhere), carry no SDK debug
//! output, and are scrubbed of the configured credentials.

use super::chunks::Chunks;
use super::{
    check_key, ErrorKind, Finish, Finished, Incomplete, MultipartUpload, ObjectMeta, ObjectStore,
    StoreError,
};
use crate::config::{Credentials, S3Region, S3Settings};
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
use aws_sdk_s3::types::{ChecksumAlgorithm, CompletedMultipartUpload, CompletedPart};
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
            .region(Region::new(region.name.clone()));
        if let Some(http) = wiring.http {
            loader = loader.http_client(http);
        }
        let mut secrets = Vec::new();
        let mut credential_sources = None;
        match (&s.credentials, wiring.credentials) {
            (
                Credentials::Static {
                    access_key,
                    secret_key,
                },
                _,
            ) => {
                secrets.push(access_key.expose().to_string());
                secrets.push(secret_key.expose().to_string());
                loader = loader.credentials_provider(aws_sdk_s3::config::Credentials::new(
                    access_key.expose(),
                    secret_key.expose(),
                    None,
                    None,
                    "strata-config",
                ));
            }
            (Credentials::DefaultChain, replaced) => {
                credential_sources = Some(Arc::new(super::aws_env::process_credential_sources()));
                if let Some(c) = replaced {
                    loader = loader.credentials_provider(c);
                }
            }
        }
        let shared = loader.load().await;
        let mut b = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(s.path_style)
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
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
        if let Some(e) = &s.endpoint {
            b = b.endpoint_url(e);
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
        })
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
    fn err<E>(&self, key: &str, op: &str, e: SdkError<E, HttpResponse>) -> StoreError
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
                format!("{op} failed: {} ({detail})", self.region_hint(wrong)),
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
            ErrorKind::Unauthorized => "access denied; check store.access_key / store.secret_key \
                (or the AWS credential chain) and the bucket policy"
                .to_string(),
            ErrorKind::Rejected => "the store rejected the request, and sending it again gets \
                the same answer; check that store.endpoint is an S3 API that takes unsigned \
                payloads with CRC32C checksums, and that object keys (the prefix of store.url, \
                tasks[].directory, tier.prefix) stay within its limits"
                .to_string(),
            _ => "the store refused the request; strata retries transient failures".to_string(),
        };
        StoreError::new(
            kind,
            self.location(key),
            format!("{op} failed: {hint} ({detail})"),
        )
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
    fn no_credentials(&self, key: &str, op: &str, e: &CredentialsError) -> StoreError {
        // A source that took too long may answer next time; the others will not change.
        let kind = match e {
            CredentialsError::ProviderTimedOut(_) => ErrorKind::Unreachable,
            _ => ErrorKind::Unauthorized,
        };
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
                "{op} failed: no AWS credentials found; strata tried {tried}; set \
                 store.access_key and store.secret_key, or provide credentials in one of these \
                 (the last source said: {})",
                self.scrub(said)
            ),
        )
    }

    /// GET of a whole object or of a byte range (end exclusive), body collected.
    async fn get_object(&self, key: &str, range: Option<Range<u64>>) -> Result<Bytes, StoreError> {
        let full = self.full_key(key)?;
        let op = if range.is_some() { "ranged get" } else { "get" };
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
            .map_err(|e| self.err(key, "upload part", e))?;
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
            .map_err(|e| self.err(key, "head", e))?;
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
                .map_err(|e| self.err(prefix, "list multipart uploads", e))?;
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
            Err(e) => Err(self.err(&write.key, "abort multipart upload", e)),
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
            .map_err(|e| self.err(key, "head", e))?;
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
            let page = page.map_err(|e| self.err(prefix, "list", e))?;
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
            .map_err(|e| self.err(prefix, "list", e))?;
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
                let err = self.err(key, "delete", e);
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
            let mut err = self.err("", "head bucket", e);
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
                let err = self.err("", "create bucket", e);
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

/// The messages of an error and its sources, joined: what each layer says, without the debug
/// dump of the SDK's structures (`DisplayErrorContext` appends one).
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !text.is_empty() && !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
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
        let out = self
            .store
            .client
            .create_multipart_upload()
            .bucket(&self.store.bucket)
            .key(&self.full)
            .metadata(TAG_METADATA, &self.tag)
            .checksum_algorithm(ChecksumAlgorithm::Crc32C)
            .send()
            .await
            .map_err(|e| self.store.err(&self.key, "start multipart upload", e))?;
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
        if mode == Finish::CreateNew {
            req = req.if_none_match("*");
        }
        match req.customize().disable_payload_signing().send().await {
            Ok(_) => Ok(Finished::Stored),
            Err(e) if mode == Finish::CreateNew && precondition_failed(&e) => Ok(Finished::Exists),
            Err(e) => Err(self.store.err(&self.key, "put", e)),
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
            Err(e) => Err(self.store.err(&self.key, "complete multipart upload", e)),
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
            Ok(_) => self.ended = true,
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
            create_bucket: false,
            part_size: ByteSize::mib(5),
            max_attempts: 3,
        }
    }

    fn test_keys() -> Credentials {
        Credentials::Static {
            access_key: Secret::new("AKIATEST".into(), "inline"),
            secret_key: Secret::new("not-a-secret".into(), "inline"),
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
}
