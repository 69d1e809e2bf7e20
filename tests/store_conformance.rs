//! The object store conformance suite against both backends, plus the errors users meet:
//! a missing bucket and an unreachable endpoint, and `[store]`'s S3 settings: encryption,
//! storage class and tags on every object, an assumed role (LocalStack with STS and KMS).
//! (LocalStack's community edition accepts any credentials and enforces no IAM, so refused
//! credentials and the actions named on AccessDenied are covered by the unit tests of
//! `store::s3` and `store::iam`.)

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

/// `[store]`'s encryption, storage class and tags reach S3 on every object strata creates:
/// one PutObject, one multipart upload, and the conformance suite's objects, as HeadObject and
/// GetObjectTagging show them (LocalStack with KMS: it checks the key exists).
#[tokio::test]
async fn s3_objects_carry_encryption_class_and_tags() {
    let key_arn = localstack_kms_key().await;
    let prefix = unique("settings");
    let toml = format!(
        "{}sse = \"aws:kms\"\nsse_kms_key_id = \"{key_arn}\"\nstorage_class = \"STANDARD_IA\"\ntags = {{ team = \"data\", \"cost center\" = \"kafka/archive\" }}\nacl = \"bucket-owner-full-control\"\n",
        s3_toml(&prefix)
    );
    let store = strata::store::open(&config(&toml).store).await.unwrap();
    store.check().await.unwrap();
    store
        .put("small.jsonl", bytes::Bytes::from_static(b"{}\n"))
        .await
        .unwrap();
    let big: Vec<u8> = (0..(5 << 20) + 3).map(|i| (i % 251) as u8).collect();
    let mut up = store.put_multipart("big.jsonl").await.unwrap();
    up.write(bytes::Bytes::from(big.clone())).await.unwrap();
    up.finish(strata::store::Finish::Replace).await.unwrap();
    assert_eq!(
        store.get("big.jsonl").await.unwrap(),
        big,
        "SSE-KMS reads back"
    );

    let want = StoredAs {
        sse: Some("aws:kms".into()),
        kms_key: Some(key_arn.clone()),
        storage_class: Some("STANDARD_IA".into()),
        tags: vec![
            ("cost center".into(), "kafka/archive".into()),
            ("team".into(), "data".into()),
        ],
    };
    for key in ["small.jsonl", "big.jsonl"] {
        assert_eq!(
            stored_as(TEST_BUCKET, &format!("{prefix}/{key}")).await,
            want,
            "{key}"
        );
    }
    // What a store without those settings writes carries none of it: the values above are
    // strata's, not LocalStack's defaults.
    let plain = s3_store(&unique("plain")).await;
    plain
        .put("p", bytes::Bytes::from_static(b"x"))
        .await
        .unwrap();
    let plain_key = plain.location("p");
    let plain_key = plain_key.trim_start_matches(&format!("s3://{TEST_BUCKET}/"));
    let stored = stored_as(TEST_BUCKET, plain_key).await;
    assert_ne!(stored.sse.as_deref(), Some("aws:kms"), "{stored:?}");
    assert_eq!(stored.storage_class, None, "{stored:?}");
    assert!(stored.tags.is_empty(), "{stored:?}");

    store_suite::run(store.as_ref(), "suite", 12 << 20).await;
    for o in store.list("").await.unwrap() {
        assert_eq!(
            stored_as(TEST_BUCKET, &format!("{prefix}/{}", o.key)).await,
            want,
            "{}",
            o.key
        );
    }
}

/// With `store.role_arn`, strata's requests are made with the role's credentials from STS:
/// LocalStack files a bucket strata creates under the role's account (111111111111), which
/// the static keys ("test": account 000000000000) do not own.
#[tokio::test]
async fn s3_requests_use_the_assumed_role() {
    let bucket = unique("strata-it-role");
    let toml = format!(
        "[store]\nurl = \"s3://{bucket}/p\"\nendpoint = \"{}\"\naccess_key = \"test\"\nsecret_key = \"test\"\ncreate_bucket = true\nrole_arn = \"arn:aws:iam::111111111111:role/strata-writer\"\nexternal_id = \"strata-it-ext\"\nrole_session_name = \"strata-it\"\n",
        s3_endpoint()
    );
    let store = strata::store::open(&config(&toml).store).await.unwrap();
    store.check().await.unwrap();
    store
        .put("k", bytes::Bytes::from_static(b"through the role"))
        .await
        .unwrap();
    assert_eq!(store.get("k").await.unwrap(), &b"through the role"[..]);
    let owns = |access_key: &'static str| {
        let bucket = bucket.clone();
        async move {
            sdk_client_as(access_key)
                .list_buckets()
                .send()
                .await
                .unwrap()
                .buckets
                .unwrap_or_default()
                .into_iter()
                .any(|b| b.name.as_deref() == Some(bucket.as_str()))
        }
    };
    let (role_owns, keys_own) = (owns("111111111111").await, owns("test").await);
    store.delete("k").await.unwrap();
    sdk_client_as("111111111111")
        .delete_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    assert!(role_owns, "the role's account owns the bucket");
    assert!(!keys_own, "the static keys' account does not");
}
