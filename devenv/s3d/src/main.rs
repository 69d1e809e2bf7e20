//! s3d: the dev environment's second S3 server, on loopback only. Tests use it because it checks
//! request signatures (LocalStack's community edition does not); benchmarks use it where
//! LocalStack's own CPU would hide strata's. It is s3s-fs's file system backend (objects are plain
//! files under ROOT, signatures checked by s3s) with two changes, both for
//! speed (bench/README.md), in s3s-fs 0.14.1's own file layout so its other operations see them:
//! - a GetObject body is read in 1 MiB pieces (s3s-fs reads 4 KiB at a time, each a hop to
//!   tokio's blocking pool: more CPU per GiB served than LocalStack);
//! - UploadPart and CompleteMultipartUpload write parts and objects in 1 MiB pieces and join the
//!   parts by copy_file_range, without MD5 (a part is refused with BadDigest, and not kept, when
//!   it lacks the checksum its headers state): s3s-fs hashed every byte twice (part, then object),
//!   59 % of its CPU, which made it slower than strata itself. ETags are therefore not MD5s
//!   (random, as S3's are for encrypted objects); a completion with If-Match still goes to
//!   s3s-fs.
//!
//! It also lists open multipart uploads (s3s-fs 0.14 answers NotImplemented; strata lists them to
//! abort what a crash left). Every other operation is s3s-fs's own.

use std::future::Future;
use std::io::SeekFrom;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;

use bytes::BytesMut;
use clap::Parser;
use futures_util::StreamExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use s3s::auth::{Credentials, SimpleAuth};
use s3s::checksum::ChecksumHasher;
use s3s::dto::*;
use s3s::service::S3ServiceBuilder;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};
use s3s_fs::FileSystem;
use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio_util::io::ReaderStream;
use uuid::Uuid;

/// Bytes per read of an object body, and per write of a part.
const PIECE: usize = 1 << 20;
/// S3's smallest part (all but the last).
const MIN_PART: u64 = 5 << 20;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long)]
    port: u16,
    #[arg(long)]
    access_key: String,
    #[arg(long)]
    secret_key: String,
    /// Directory holding one subdirectory per bucket.
    root: PathBuf,
}

struct Store {
    fs: FileSystem,
    root: PathBuf,
}

impl Store {
    /// The file behind bucket/key, the way s3s-fs lays objects out; keys that would climb out
    /// of the root are refused.
    fn path(&self, bucket: &str, key: &str) -> S3Result<PathBuf> {
        let rel = Path::new(bucket).join(key);
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(s3_error!(
                InvalidArgument,
                "key {key:?} is not a plain relative path"
            ));
        }
        Ok(self.root.join(rel))
    }

    /// s3s-fs's names of its own files, at the root.
    fn internal(&self, name: String) -> PathBuf {
        self.root.join(name)
    }

    fn part_path(&self, upload: Uuid, n: i32) -> PathBuf {
        self.internal(format!(".upload_id-{upload}.part-{n}"))
    }

    fn upload_info_path(&self, upload: Uuid) -> PathBuf {
        self.internal(format!(".upload-{upload}.json"))
    }

    fn object_file(&self, bucket: &str, key: &str, kind: &str) -> PathBuf {
        let enc = |s: &str| base64_simd::URL_SAFE_NO_PAD.encode_to_string(s);
        self.internal(format!(".bucket-{}.object-{}{kind}", enc(bucket), enc(key)))
    }

    fn temp_path(&self) -> PathBuf {
        // s3s-fs removes `.tmp.*.internal.part` files at start.
        self.internal(format!(
            ".tmp.s3d-{}.internal.part",
            Uuid::new_v4().simple()
        ))
    }

    /// The upload exists and was started with the caller's access key (s3s-fs's rule).
    async fn owns(&self, cred: Option<&Credentials>, upload: Uuid) -> S3Result<()> {
        let Ok(content) = tokio::fs::read(self.upload_info_path(upload)).await else {
            return Err(s3_error!(NoSuchUpload));
        };
        let owner: Option<String> =
            serde_json::from_slice(&content).map_err(|e| s3_error!(e, InternalError))?;
        if owner.as_deref() == cred.map(|c| c.access_key.as_str()) {
            Ok(())
        } else {
            Err(s3_error!(AccessDenied))
        }
    }
}

fn upload_id(s: &str) -> S3Result<Uuid> {
    Uuid::parse_str(s).map_err(|_| s3_error!(NoSuchUpload))
}

/// An ETag that is not an MD5 (see the module's doc).
fn random_etag() -> String {
    format!("{:032x}", Uuid::new_v4().as_u128())
}

/// The checksums a request's headers state for its body, and a hasher for each.
fn stated_checksums(stated: &Checksum) -> ChecksumHasher {
    use s3s::crypto::{Checksum as _, Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
    ChecksumHasher {
        crc32: stated.checksum_crc32.as_ref().map(|_| Crc32::new()),
        crc32c: stated.checksum_crc32c.as_ref().map(|_| Crc32c::new()),
        sha1: stated.checksum_sha1.as_ref().map(|_| Sha1::new()),
        sha256: stated.checksum_sha256.as_ref().map(|_| Sha256::new()),
        crc64nvme: stated.checksum_crc64nvme.as_ref().map(|_| Crc64Nvme::new()),
    }
}

/// Writes `body` to `dest` through a temp file, in pieces of [`PIECE`] bytes, and makes it
/// `dest` only if it has the checksums `stated` (else BadDigest, as S3 answers); returns its size.
async fn write_body(
    store: &Store,
    body: StreamingBlob,
    dest: PathBuf,
    stated: Checksum,
) -> S3Result<u64> {
    let tmp = store.temp_path();
    let result = async {
        let mut file = tokio::fs::File::create(&tmp)
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        let mut body = body;
        let mut piece = BytesMut::with_capacity(PIECE);
        let mut size = 0u64;
        let mut hasher = stated_checksums(&stated);
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| s3_error!(IncompleteBody, "{e}"))?;
            hasher.update(&chunk);
            size += chunk.len() as u64;
            piece.extend_from_slice(&chunk);
            if piece.len() >= PIECE {
                file.write_all(&piece)
                    .await
                    .map_err(|e| s3_error!(e, InternalError))?;
                piece.clear();
            }
        }
        file.write_all(&piece)
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        file.flush()
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        let got = hasher.finalize();
        let differs = |a: &Option<String>, b: &Option<String>| a.is_some() && a != b;
        if differs(&stated.checksum_crc32, &got.checksum_crc32)
            || differs(&stated.checksum_crc32c, &got.checksum_crc32c)
            || differs(&stated.checksum_sha1, &got.checksum_sha1)
            || differs(&stated.checksum_sha256, &got.checksum_sha256)
            || differs(&stated.checksum_crc64nvme, &got.checksum_crc64nvme)
        {
            return Err(s3_error!(
                BadDigest,
                "the body does not have the checksum its headers state"
            ));
        }
        tokio::fs::rename(&tmp, &dest)
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        Ok(size)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

/// Joins the parts into `dest` (through a temp file) and removes them. With `create_new`, only
/// if `dest` does not exist yet (a hard link, which fails when the name is taken, even by a
/// completion racing this one): `Ok(false)` then, and the parts stay for an abort.
fn join_parts(
    tmp: &Path,
    parts: &[PathBuf],
    dest: &Path,
    create_new: bool,
) -> std::io::Result<bool> {
    let mut out = std::fs::File::create(tmp)?;
    for p in parts {
        // File to file: the kernel copies (copy_file_range), no bytes through user space.
        std::io::copy(&mut std::fs::File::open(p)?, &mut out)?;
    }
    drop(out);
    if let Some(dir) = dest.parent() {
        std::fs::create_dir_all(dir)?;
    }
    if create_new {
        let linked = std::fs::hard_link(tmp, dest);
        std::fs::remove_file(tmp)?;
        match linked {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
            r => r?,
        }
    } else {
        std::fs::rename(tmp, dest)?;
    }
    for p in parts {
        let _ = std::fs::remove_file(p);
    }
    Ok(true)
}

/// Calls of the operations s3s-fs implements, unchanged. Written in the form `async_trait`
/// gives the trait's methods, since it does not expand macros inside the impl.
macro_rules! pass {
    ($($op:ident($input:ident) -> $output:ident;)*) => {$(
        fn $op<'life0, 'async_trait>(
            &'life0 self,
            req: S3Request<$input>,
        ) -> Pin<Box<dyn Future<Output = S3Result<S3Response<$output>>> + Send + 'async_trait>>
        where
            'life0: 'async_trait,
            Self: 'async_trait,
        {
            self.fs.$op(req)
        }
    )*};
}

#[async_trait::async_trait]
impl S3 for Store {
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let path = self.path(&req.input.bucket, &req.input.key)?;
        let range = req.input.range;
        // s3s-fs answers everything but the body: errors, range checks, headers, ETag.
        let mut resp = self.fs.get_object(req).await?;
        let mut file = tokio::fs::File::open(&path)
            .await
            .map_err(|e| s3_error!(e, NoSuchKey))?;
        let file_len = file
            .metadata()
            .await
            .map_err(|e| s3_error!(e, InternalError))?
            .len();
        let start = match range {
            None => 0,
            Some(Range::Int { first, .. }) => first,
            Some(Range::Suffix { length }) => file_len.saturating_sub(length),
        };
        let len = resp.output.content_length.unwrap_or_default().max(0) as u64;
        file.seek(SeekFrom::Start(start))
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        let body = ReaderStream::with_capacity(file.take(len), PIECE);
        resp.output.body = Some(StreamingBlob::wrap(body));
        Ok(resp)
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        // Checksums sent as trailers (aws-chunked bodies) are s3s-fs's to read.
        if req.trailing_headers.is_some() {
            return self.fs.upload_part(req).await;
        }
        let input = req.input;
        if !(1..=10_000).contains(&input.part_number) {
            return Err(s3_error!(
                InvalidArgument,
                "Part number must be an integer between 1 and 10000, inclusive"
            ));
        }
        let upload = upload_id(&input.upload_id)?;
        self.owns(req.credentials.as_ref(), upload).await?;
        let body = input.body.ok_or_else(|| s3_error!(IncompleteBody))?;
        let stated = Checksum {
            checksum_crc32: input.checksum_crc32,
            checksum_crc32c: input.checksum_crc32c,
            checksum_sha1: input.checksum_sha1,
            checksum_sha256: input.checksum_sha256,
            checksum_crc64nvme: input.checksum_crc64nvme,
            ..Default::default()
        };
        write_body(
            self,
            body,
            self.part_path(upload, input.part_number),
            stated,
        )
        .await?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(random_etag())),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        if req.input.if_match.is_some() {
            return self.fs.complete_multipart_upload(req).await;
        }
        let cred = req.credentials;
        let CompleteMultipartUploadInput {
            multipart_upload,
            bucket,
            key,
            upload_id: id,
            if_none_match,
            ..
        } = req.input;
        let parts = multipart_upload.and_then(|m| m.parts).unwrap_or_default();
        if parts.is_empty() {
            return Err(s3_error!(InvalidPart, "You must specify at least one part"));
        }
        let upload = upload_id(&id)?;
        self.owns(cred.as_ref(), upload).await?;
        let object = self.path(&bucket, &key)?;
        let create_new = if_none_match.as_ref().is_some_and(|c| c.is_any());
        if create_new && object.exists() {
            return Err(s3_error!(PreconditionFailed, "Object already exists"));
        }
        let mut paths = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let n = i as i32 + 1;
            if part.part_number != Some(n) {
                return Err(s3_error!(InvalidPartOrder));
            }
            let path = self.part_path(upload, n);
            let size = tokio::fs::metadata(&path)
                .await
                .map_err(|_| s3_error!(InvalidPart))?
                .len();
            if i + 1 < parts.len() && size < MIN_PART {
                return Err(s3_error!(EntityTooSmall));
            }
            paths.push(path);
        }
        let tmp = self.temp_path();
        let dest = object.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let r = join_parts(&tmp, &paths, &dest, create_new);
            if r.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            r
        })
        .await
        .map_err(|e| s3_error!(InternalError, "{e}"))?;
        if !joined.map_err(|e| s3_error!(e, InternalError))? {
            return Err(s3_error!(PreconditionFailed, "Object already exists"));
        }
        let _ = tokio::fs::remove_file(self.upload_info_path(upload)).await;
        // The upload's user metadata becomes the object's.
        let meta = self.object_file(&bucket, &key, &format!(".upload-{upload}.metadata.json"));
        if meta.exists() {
            tokio::fs::rename(&meta, self.object_file(&bucket, &key, ".metadata.json"))
                .await
                .map_err(|e| s3_error!(e, InternalError))?;
        }
        let e_tag = format!("{}-{}", random_etag(), parts.len());
        let info = serde_json::json!({ "e_tag": e_tag });
        let info_tmp = self.temp_path();
        tokio::fs::write(&info_tmp, info.to_string())
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        tokio::fs::rename(&info_tmp, self.object_file(&bucket, &key, ".internal.json"))
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(bucket),
            key: Some(key),
            e_tag: Some(ETag::Strong(e_tag)),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        let prefix = input.prefix.clone().unwrap_or_default();
        // An open upload is its attributes file, `.bucket-<b>.object-<k>.upload-<id>.metadata.json`
        // (s3s-fs writes one for every upload it starts), while its `.upload-<id>.json` exists.
        let head = format!(
            ".bucket-{}.object-",
            base64_simd::URL_SAFE_NO_PAD.encode_to_string(&input.bucket)
        );
        let mut uploads = Vec::new();
        let mut dir = tokio::fs::read_dir(&self.root)
            .await
            .map_err(|e| s3_error!(e, InternalError))?;
        while let Some(entry) = dir
            .next_entry()
            .await
            .map_err(|e| s3_error!(e, InternalError))?
        {
            let name = entry.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(head.as_str())) else {
                continue;
            };
            let Some((key, id)) = rest
                .strip_suffix(".metadata.json")
                .and_then(|r| r.split_once(".upload-"))
            else {
                continue;
            };
            let (Ok(key), Ok(id)) = (
                base64_simd::URL_SAFE_NO_PAD.decode_to_vec(key),
                Uuid::parse_str(id),
            ) else {
                continue;
            };
            let Ok(key) = String::from_utf8(key) else {
                continue;
            };
            if !key.starts_with(&prefix) || !self.upload_info_path(id).exists() {
                continue;
            }
            let initiated = entry
                .metadata()
                .await
                .ok()
                .and_then(|m| m.modified().ok())
                .map(Timestamp::from);
            uploads.push(MultipartUpload {
                key: Some(key),
                upload_id: Some(id.to_string()),
                initiated,
                ..Default::default()
            });
        }
        uploads.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            is_truncated: Some(false),
            uploads: Some(uploads),
            ..Default::default()
        }))
    }

    pass! {
        create_bucket(CreateBucketInput) -> CreateBucketOutput;
        copy_object(CopyObjectInput) -> CopyObjectOutput;
        delete_bucket(DeleteBucketInput) -> DeleteBucketOutput;
        delete_object(DeleteObjectInput) -> DeleteObjectOutput;
        delete_objects(DeleteObjectsInput) -> DeleteObjectsOutput;
        get_bucket_location(GetBucketLocationInput) -> GetBucketLocationOutput;
        head_bucket(HeadBucketInput) -> HeadBucketOutput;
        head_object(HeadObjectInput) -> HeadObjectOutput;
        list_buckets(ListBucketsInput) -> ListBucketsOutput;
        list_objects(ListObjectsInput) -> ListObjectsOutput;
        list_objects_v2(ListObjectsV2Input) -> ListObjectsV2Output;
        put_object(PutObjectInput) -> PutObjectOutput;
        create_multipart_upload(CreateMultipartUploadInput) -> CreateMultipartUploadOutput;
        upload_part_copy(UploadPartCopyInput) -> UploadPartCopyOutput;
        list_parts(ListPartsInput) -> ListPartsOutput;
        abort_multipart_upload(AbortMultipartUploadInput) -> AbortMultipartUploadOutput;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let root = args.root.canonicalize()?;
    let store = Store {
        fs: FileSystem::new(&root).map_err(|e| format!("{}: {e:?}", root.display()))?,
        root,
    };
    let mut builder = S3ServiceBuilder::new(store);
    builder.set_auth(SimpleAuth::from_single(args.access_key, args.secret_key));
    let service = builder.build();
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port)).await?;
    eprintln!("bench-s3d: listening on {}", listener.local_addr()?);
    let http = Builder::new(TokioExecutor::new());
    loop {
        let (socket, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let conn = http
            .serve_connection(TokioIo::new(socket), service.clone())
            .into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}
