//! The conformance suite every object store backend must pass, run against the `file://`
//! backend (a temp dir) and S3 (LocalStack): same calls, same answers.

use bytes::Bytes;
use strata::store::{ErrorKind, Finish, Finished, ObjectStore};

fn pattern(n: usize, seed: u8) -> Bytes {
    Bytes::from(
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect::<Vec<u8>>(),
    )
}

/// Runs every check under `base/` of `store`. `multipart_size` should span several parts.
pub async fn run(store: &dyn ObjectStore, base: &str, multipart_size: usize) {
    let k = |s: &str| format!("{base}/{s}");

    // put / get / head, including an empty object
    store.put(&k("a/one.bin"), pattern(1000, 1)).await.unwrap();
    assert_eq!(store.get(&k("a/one.bin")).await.unwrap(), pattern(1000, 1));
    assert_eq!(store.head(&k("a/one.bin")).await.unwrap().size, 1000);
    store.put(&k("a/empty"), Bytes::new()).await.unwrap();
    assert_eq!(store.get(&k("a/empty")).await.unwrap().len(), 0);

    // overwrite replaces the whole object
    store.put(&k("a/one.bin"), pattern(10, 2)).await.unwrap();
    assert_eq!(store.get(&k("a/one.bin")).await.unwrap(), pattern(10, 2));

    // ranged reads: middle, up to the end, clamped past the end
    let big = pattern(4096, 3);
    store.put(&k("b/range.bin"), big.clone()).await.unwrap();
    assert_eq!(
        store.get_range(&k("b/range.bin"), 100..200).await.unwrap(),
        big.slice(100..200)
    );
    assert_eq!(
        store
            .get_range(&k("b/range.bin"), 4000..4096)
            .await
            .unwrap(),
        big.slice(4000..)
    );
    assert_eq!(
        store
            .get_range(&k("b/range.bin"), 4090..9999)
            .await
            .unwrap(),
        big.slice(4090..)
    );
    assert_eq!(
        store.get_range(&k("b/range.bin"), 0..1).await.unwrap(),
        big.slice(0..1)
    );
    let past = store
        .get_range(&k("b/range.bin"), 5000..5001)
        .await
        .unwrap_err();
    assert_eq!(past.kind, ErrorKind::InvalidInput, "{past}");

    // list: sorted, filtered by prefix (not just by directory)
    store
        .put(&k("b/x+0+00000000000000000010.txt"), pattern(1, 0))
        .await
        .unwrap();
    store
        .put(&k("b/x+0+00000000000000000002.txt"), pattern(2, 0))
        .await
        .unwrap();
    store.put(&k("bb/other"), pattern(3, 0)).await.unwrap();
    let listed: Vec<String> = store
        .list(&k("b/"))
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(
        listed,
        vec![
            k("b/range.bin"),
            k("b/x+0+00000000000000000002.txt"),
            k("b/x+0+00000000000000000010.txt")
        ]
    );
    let listed: Vec<String> = store
        .list(&k("b/x+"))
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(listed.len(), 2);
    let all = store.list(&format!("{base}/")).await.unwrap();
    assert_eq!(all.len(), 6, "{all:?}");
    assert_eq!(all.iter().find(|o| o.key == k("bb/other")).unwrap().size, 3);
    assert!(store.list(&k("nothing-here/")).await.unwrap().is_empty());

    // list_page: one page after a key, within the prefix only
    let page = |after: Option<String>, max| {
        let p = k("b/");
        async move {
            store
                .list_page(&p, after.as_deref(), max)
                .await
                .unwrap()
                .into_iter()
                .map(|o| o.key)
                .collect::<Vec<String>>()
        }
    };
    assert_eq!(page(None, 1).await, vec![k("b/range.bin")]);
    assert_eq!(
        page(Some(k("b/range.bin")), 10).await,
        vec![
            k("b/x+0+00000000000000000002.txt"),
            k("b/x+0+00000000000000000010.txt")
        ]
    );
    // A start between keys, and one that is a prefix of the next key.
    assert_eq!(
        page(Some(k("b/x+0+00000000000000000005")), 10).await,
        vec![k("b/x+0+00000000000000000010.txt")]
    );
    assert_eq!(
        page(Some(k("b/x+0+00000000000000000010")), 10).await,
        vec![k("b/x+0+00000000000000000010.txt")]
    );
    assert!(page(Some(k("b/z")), 10).await.is_empty());

    // missing objects
    let e = store.get(&k("missing")).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound, "{e}");
    assert!(
        e.to_string().contains("missing"),
        "error names the object: {e}"
    );
    assert_eq!(
        store.head(&k("missing")).await.unwrap_err().kind,
        ErrorKind::NotFound
    );

    // delete is idempotent
    store.delete(&k("bb/other")).await.unwrap();
    store.delete(&k("bb/other")).await.unwrap();
    assert_eq!(
        store.get(&k("bb/other")).await.unwrap_err().kind,
        ErrorKind::NotFound
    );

    // multipart: several parts, odd sizes, visible only after finish
    let data = pattern(multipart_size, 7);
    let mut up = store.put_multipart(&k("m/big.bin")).await.unwrap();
    for chunk in data.chunks(1_000_003) {
        up.write(Bytes::copy_from_slice(chunk)).await.unwrap();
    }
    assert_eq!(
        store.head(&k("m/big.bin")).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    up.finish(Finish::Replace).await.unwrap();
    assert_eq!(store.get(&k("m/big.bin")).await.unwrap(), data);
    assert_eq!(
        store
            .get_range(&k("m/big.bin"), 5_000_000..5_000_100)
            .await
            .unwrap(),
        data.slice(5_000_000..5_000_100)
    );

    // a large single put goes through the same path
    store.put(&k("m/put-big.bin"), data.clone()).await.unwrap();
    assert_eq!(
        store.head(&k("m/put-big.bin")).await.unwrap().size,
        data.len() as u64
    );

    // abort leaves nothing behind
    let mut up = store.put_multipart(&k("m/aborted.bin")).await.unwrap();
    up.write(pattern(100, 9)).await.unwrap();
    up.abort().await.unwrap();
    assert_eq!(
        store.head(&k("m/aborted.bin")).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    let listed: Vec<String> = store
        .list(&k("m/"))
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(listed, vec![k("m/big.bin"), k("m/put-big.bin")]);

    // an upload dropped unfinished (a cancelled writer) aborts itself
    let mut up = store.put_multipart(&k("d/dropped.bin")).await.unwrap();
    up.write(pattern(multipart_size, 5)).await.unwrap();
    let open: Vec<String> = store
        .incomplete(&k("d/"))
        .await
        .unwrap()
        .into_iter()
        .map(|w| w.key)
        .collect();
    assert_eq!(open, vec![k("d/dropped.bin")], "a live upload is listed");
    drop(up);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !store.incomplete(&k("d/")).await.unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "a dropped upload was not aborted within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // one whose writer vanished without dropping it (a crash) stays until removed at start,
    // and only once it is older than asked
    let mut up = store.put_multipart(&k("d/crashed.bin")).await.unwrap();
    up.write(pattern(multipart_size, 6)).await.unwrap();
    std::mem::forget(up);
    let hour = std::time::Duration::from_secs(3600);
    assert_eq!(store.remove_incomplete(&k("d/"), hour).await.unwrap(), 0);
    assert_eq!(store.incomplete(&k("d/")).await.unwrap().len(), 1);
    assert_eq!(
        store.incomplete(&k("other/")).await.unwrap(),
        vec![],
        "scoped by prefix"
    );
    assert_eq!(
        store
            .remove_incomplete(&k("d/"), std::time::Duration::ZERO)
            .await
            .unwrap(),
        1
    );
    assert!(store.incomplete(&k("d/")).await.unwrap().is_empty());
    assert_eq!(
        store.head(&k("d/crashed.bin")).await.unwrap_err().kind,
        ErrorKind::NotFound
    );

    // first writer wins: a create-new finish of a taken key stores nothing, and the tag of
    // what is stored names the winner's upload
    let mut first = store.put_multipart(&k("c/once.bin")).await.unwrap();
    let mut second = store.put_multipart(&k("c/once.bin")).await.unwrap();
    assert_ne!(first.tag(), second.tag());
    let winner = first.tag().to_string();
    first.write(pattern(multipart_size, 12)).await.unwrap();
    second.write(pattern(10, 13)).await.unwrap();
    assert_eq!(
        first.finish(Finish::CreateNew).await.unwrap(),
        Finished::Stored
    );
    assert_eq!(
        second.finish(Finish::CreateNew).await.unwrap(),
        Finished::Exists
    );
    assert_eq!(
        store.get(&k("c/once.bin")).await.unwrap(),
        pattern(multipart_size, 12)
    );
    assert_eq!(store.tag_of(&k("c/once.bin")).await.unwrap(), Some(winner));
    // a small object (one PUT) too, and the refused upload leaves nothing open
    let mut small = store.put_multipart(&k("c/small.bin")).await.unwrap();
    small.write(pattern(100, 14)).await.unwrap();
    assert_eq!(
        small.finish(Finish::CreateNew).await.unwrap(),
        Finished::Stored
    );
    let mut again = store.put_multipart(&k("c/small.bin")).await.unwrap();
    again.write(pattern(multipart_size, 15)).await.unwrap();
    assert_eq!(
        again.finish(Finish::CreateNew).await.unwrap(),
        Finished::Exists
    );
    assert_eq!(
        store.get(&k("c/small.bin")).await.unwrap(),
        pattern(100, 14)
    );
    assert!(
        store.incomplete(&k("c/")).await.unwrap().is_empty(),
        "a refused create leaves no upload open"
    );
    // the store's own answer to "does it refuse taken keys" agrees, and leaves nothing
    assert!(store.refuses_taken_keys(&k("c/probe")).await.unwrap());
    assert_eq!(
        store.head(&k("c/probe")).await.unwrap_err().kind,
        ErrorKind::NotFound
    );
    // replace overwrites whatever is there
    let mut over = store.put_multipart(&k("c/small.bin")).await.unwrap();
    over.write(pattern(7, 16)).await.unwrap();
    assert_eq!(
        over.finish(Finish::Replace).await.unwrap(),
        Finished::Stored
    );
    assert_eq!(store.get(&k("c/small.bin")).await.unwrap(), pattern(7, 16));

    // keys that could escape the root are refused before any I/O
    for bad in ["../escape", "a//b", "/abs"] {
        let e = store
            .put(&format!("{base}/{bad}"), Bytes::new())
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput, "{bad}: {e}");
    }

    // location names the backend and key
    assert!(store.location(&k("a/one.bin")).ends_with(&k("a/one.bin")));
}
