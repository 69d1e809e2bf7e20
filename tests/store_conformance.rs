//! The object store conformance suite against both backends, plus the errors users meet:
//! a missing bucket and an unreachable endpoint. (LocalStack's community edition accepts any
//! credentials, so refused credentials are covered by the unit test of `store::s3`'s error
//! mapping.)

mod common;

use common::*;
use strata::store::{ErrorKind, FsStore, ObjectStore};

#[tokio::test]
async fn fs_backend_conforms() {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::new(dir.path().to_path_buf());
    store.check().await.unwrap();
    store_suite::run(&store, "suite", 12 << 20).await;
    // no temp files are left behind
    let leftovers: Vec<_> = walk(dir.path())
        .into_iter()
        .filter(|p| p.contains(".strata-tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn walk(p: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&e.path()));
        } else {
            out.push(e.path().display().to_string());
        }
    }
    out
}

#[tokio::test]
async fn s3_backend_conforms() {
    let prefix = unique("conformance");
    let store = s3_store(&prefix).await;
    store_suite::run(store.as_ref(), "suite", 12 << 20).await;
    assert!(store
        .location("x")
        .starts_with(&format!("s3://{TEST_BUCKET}/{prefix}/")));
}

/// s3d, the faster S3 server of the benchmarks, writes parts and joins them itself (not s3s-fs):
/// it must behave like S3 for everything strata does, and leave no part or temp file behind.
#[tokio::test]
async fn s3d_conforms() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("strata-s3d")).unwrap();
    let port = free_port();
    let _server = S3d::start(dir.path(), port, "strata", "s3d-secret").await;
    let toml = format!(
        "[store]\nurl = \"s3://strata-s3d/p\"\nendpoint = \"http://127.0.0.1:{port}\"\naccess_key = \"strata\"\nsecret_key = \"s3d-secret\"\npart_size = \"5MiB\"\n"
    );
    let store = strata::store::open(&config(&toml).store).await.unwrap();
    store.check().await.unwrap();
    store_suite::run(store.as_ref(), "suite", 12 << 20).await;
    let left: Vec<String> = walk(dir.path())
        .into_iter()
        .filter(|p| p.contains(".upload_id-") || p.contains(".tmp."))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn missing_bucket_is_named_with_the_fix() {
    let toml = s3_toml("p")
        .replace(TEST_BUCKET, "strata-no-such-bucket")
        .replace("create_bucket = true", "create_bucket = false");
    let store = strata::store::open(&config(&toml).store).await.unwrap();
    let e = store.check().await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NoSuchBucket, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("strata-no-such-bucket") && msg.contains("store.create_bucket"),
        "{msg}"
    );
}

#[tokio::test]
async fn unreachable_endpoint_says_so() {
    let toml = s3_toml("p")
        .replace(&s3_endpoint(), "http://127.0.0.1:9")
        .replace("[store]", "[store]\nmax_attempts = 1");
    let store = strata::store::open(&config(&toml).store).await.unwrap();
    let e = store.check().await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(
        e.to_string()
            .contains("cannot reach the store at http://127.0.0.1:9"),
        "{e}"
    );
}

#[tokio::test]
async fn requests_the_store_rejects_fail_at_once_with_the_answer() {
    // S3 caps keys at 1024 bytes and answers a longer one with 400 KeyTooLongError: retrying
    // cannot help, so the error is not transient and names what to shorten.
    let prefix = unique("rejected");
    let store = s3_store(&prefix).await;
    let key = format!("long/{}", "k".repeat(1100));
    let e = store
        .put(&key, bytes::Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
    assert!(!e.is_transient(), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("KeyTooLongError")
            && msg.contains("the prefix of store.url, tasks[].directory"),
        "{msg}"
    );
}
