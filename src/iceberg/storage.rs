//! Iceberg's storage over strata's object store: catalogs and commits read and write table
//! metadata and manifests through the task's own store, so its settings (S3 endpoint,
//! credentials, role, encryption, `file://`) apply to them as to the data files. A path is an
//! absolute URL inside the store's root; anything else is refused.

use crate::store::{ErrorKind as StoreKind, ObjectStore, StoreError};
use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::sync::Arc;

/// The store, and the URL prefix (`s3://bucket/prefix/`, `file:///root/`) its keys sit under.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreStorage {
    /// Not serialisable: a storage sent elsewhere (which strata never does) has no store.
    #[serde(skip)]
    store: Option<Arc<dyn ObjectStore>>,
    root: String,
}

impl StoreStorage {
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        let root = root_of(store.as_ref());
        Self {
            store: Some(store),
            root,
        }
    }

    fn store(&self) -> Result<&Arc<dyn ObjectStore>> {
        self.store.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Unexpected,
                "a strata store storage was deserialised without its store",
            )
        })
    }

    /// The store key of an absolute path.
    fn key<'a>(&self, path: &'a str) -> Result<std::borrow::Cow<'a, str>> {
        key_in(&self.root, path).ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "{path} is outside the task's store ({}): strata reads and writes Iceberg files through the task's store only; place the table (the warehouse) inside it",
                    self.root
                ),
            )
        })
    }
}

/// The URL prefix of a store's keys, ending in `/`.
pub fn root_of(store: &dyn ObjectStore) -> String {
    let probe = store.location("k");
    probe[..probe.len() - 1].to_string()
}

/// `path` below `root` as a store key; `file:/x` is taken as `file:///x`.
pub(super) fn key_in<'a>(root: &str, path: &'a str) -> Option<std::borrow::Cow<'a, str>> {
    if let Some(rest) = path.strip_prefix(root) {
        return (!rest.is_empty()).then_some(std::borrow::Cow::Borrowed(rest));
    }
    let single = path
        .strip_prefix("file:/")
        .filter(|p| !p.starts_with('/'))?;
    let full = format!("file:///{single}");
    let rest = full.strip_prefix(root)?;
    (!rest.is_empty()).then(|| std::borrow::Cow::Owned(rest.to_string()))
}

fn err(e: StoreError) -> Error {
    let transient = e.is_transient();
    Error::new(ErrorKind::Unexpected, e.to_string()).with_retryable(transient)
}

#[async_trait]
#[typetag::serde]
impl Storage for StoreStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.store()?.head(&self.key(path)?).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind == StoreKind::NotFound => Ok(false),
            Err(e) => Err(err(e)),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let meta = self.store()?.head(&self.key(path)?).await.map_err(err)?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        self.store()?.get(&self.key(path)?).await.map_err(err)
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        Ok(Box::new(RangeReader {
            store: self.store()?.clone(),
            key: self.key(path)?.into_owned(),
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        self.store()?.put(&self.key(path)?, bs).await.map_err(err)
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        Ok(Box::new(WholeWriter {
            store: self.store()?.clone(),
            key: self.key(path)?.into_owned(),
            data: Vec::new(),
            closed: false,
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        self.store()?.delete(&self.key(path)?).await.map_err(err)
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let store = self.store()?;
        let mut prefix = self.key(path)?.into_owned();
        if !prefix.ends_with('/') {
            prefix.push('/');
        }
        for o in store.list(&prefix).await.map_err(err)? {
            store.delete(&o.key).await.map_err(err)?;
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        while let Some(p) = paths.next().await {
            self.delete(&p).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Ranged reads of one object.
struct RangeReader {
    store: Arc<dyn ObjectStore>,
    key: String,
}

#[async_trait]
impl FileRead for RangeReader {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        self.store.get_range(&self.key, range).await.map_err(err)
    }
}

/// Metadata and manifest files are small: gathered, then stored in one put at close.
struct WholeWriter {
    store: Arc<dyn ObjectStore>,
    key: String,
    data: Vec<u8>,
    closed: bool,
}

#[async_trait]
impl FileWrite for WholeWriter {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        self.data.extend_from_slice(&bs);
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        if self.closed {
            return Err(Error::new(ErrorKind::Unexpected, "file closed twice"));
        }
        self.closed = true;
        let data = Bytes::from(std::mem::take(&mut self.data));
        self.store.put(&self.key, data).await.map_err(err)
    }
}

/// Hands the catalog a [`StoreStorage`] whatever its configuration says: the task's store is
/// where its tables are.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoreStorageFactory {
    pub storage: StoreStorage,
}

#[typetag::serde]
impl StorageFactory for StoreStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        self.storage.store()?;
        Ok(Arc::new(self.storage.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_keys_inside_the_root_only() {
        let root = "file:///data/archive/";
        assert_eq!(
            key_in(root, "file:///data/archive/lake/kafka/t/metadata/v1.json").as_deref(),
            Some("lake/kafka/t/metadata/v1.json")
        );
        assert_eq!(
            key_in(root, "file:/data/archive/lake/x").as_deref(),
            Some("lake/x")
        );
        assert_eq!(key_in(root, "file:///data/other/x"), None);
        assert_eq!(key_in(root, "file:///data/archive/"), None);
        assert_eq!(key_in("s3://b/p/", "s3://b/p/k").as_deref(), Some("k"));
        assert_eq!(key_in("s3://b/p/", "s3://c/p/k"), None);
    }

    #[tokio::test]
    async fn files_written_are_read_back_whole_and_in_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ObjectStore> =
            Arc::new(crate::store::FsStore::new(dir.path().to_path_buf()));
        let s = StoreStorage::new(store);
        let path = format!("{}t/metadata/m.json", s.root);
        assert!(!s.exists(&path).await.unwrap());
        let mut w = s.writer(&path).await.unwrap();
        w.write(Bytes::from_static(b"hello ")).await.unwrap();
        w.write(Bytes::from_static(b"world")).await.unwrap();
        w.close().await.unwrap();
        assert!(w.close().await.is_err());
        assert_eq!(
            s.read(&path).await.unwrap(),
            Bytes::from_static(b"hello world")
        );
        assert_eq!(s.metadata(&path).await.unwrap().size, 11);
        let r = s.reader(&path).await.unwrap();
        assert_eq!(r.read(6..11).await.unwrap(), Bytes::from_static(b"world"));
        s.delete_prefix(&format!("{}t", s.root)).await.unwrap();
        assert!(!s.exists(&path).await.unwrap());
        let e = s.read("file:///elsewhere/x").await.unwrap_err();
        assert!(e.to_string().contains("outside the task's store"), "{e}");
    }
}
