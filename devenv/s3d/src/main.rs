//! s3d: the dev environment's second S3 server, on loopback only. Tests use it because it checks
//! request signatures (LocalStack's community edition does not); benchmarks use it where
//! LocalStack's own CPU would hide strata's. It is s3s-fs's file system backend (objects are plain
//! files under ROOT, signatures checked by s3s) with one change: a GetObject body is read in 1 MiB
//! pieces. s3s-fs 0.14 streams bodies in 4 KiB reads, each a hop to tokio's blocking pool, which
//! made it cost more CPU per GiB served than LocalStack (bench/README.md). Every other operation
//! is s3s-fs's own.

use std::future::Future;
use std::io::SeekFrom;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;

use clap::Parser;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use s3s::auth::SimpleAuth;
use s3s::dto::*;
use s3s::service::S3ServiceBuilder;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};
use s3s_fs::FileSystem;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;

/// Bytes per read of an object body.
const PIECE: usize = 1 << 20;

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
        upload_part(UploadPartInput) -> UploadPartOutput;
        upload_part_copy(UploadPartCopyInput) -> UploadPartCopyOutput;
        list_parts(ListPartsInput) -> ListPartsOutput;
        complete_multipart_upload(CompleteMultipartUploadInput) -> CompleteMultipartUploadOutput;
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
