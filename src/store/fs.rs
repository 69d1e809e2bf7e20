//! `file://` backend: a directory tree. Writes go to a hidden temp file that is fsynced and
//! renamed into place (then the directory is fsynced), so readers never see partial objects
//! and a completed `put` survives a crash.

use super::{
    check_key, ErrorKind, Finish, Finished, Incomplete, MultipartUpload, ObjectMeta, ObjectStore,
    StoreError,
};
use async_trait::async_trait;
use bytes::Bytes;
use std::io::{self, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// Temp files of `put` carry this prefix.
const TMP_PREFIX: &str = ".strata-tmp-";
/// Staging files of strata versions before streaming uploads; only ever removed.
const STAGING_PREFIX: &str = ".strata-staging-";

#[derive(Debug, Clone)]
pub struct FsStore {
    root: PathBuf,
}

impl FsStore {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    fn path(&self, key: &str) -> Result<PathBuf, StoreError> {
        check_key(|| self.location(key), key)?;
        Ok(self.root.join(key))
    }

    fn io_err(&self, key: &str, e: io::Error) -> StoreError {
        let kind = match e.kind() {
            io::ErrorKind::NotFound => ErrorKind::NotFound,
            io::ErrorKind::PermissionDenied => ErrorKind::Unauthorized,
            io::ErrorKind::InvalidFilename => ErrorKind::Rejected,
            _ => ErrorKind::Io,
        };
        let hint = match kind {
            ErrorKind::NotFound => "no such object".to_string(),
            ErrorKind::Unauthorized => format!(
                "permission denied: {e}; check the rights on {}",
                self.root.display()
            ),
            ErrorKind::Rejected => format!(
                "{e}; a name in the key is longer than the filesystem allows, shorten the \
                 directory (tasks[].directory, tier.prefix) or the topic name"
            ),
            _ => format!("{e}"),
        };
        StoreError::new(kind, self.location(key), hint)
    }
}

fn temp_path(dest: &Path) -> PathBuf {
    let name = dest
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("object");
    dest.with_file_name(format!(
        "{TMP_PREFIX}{}-{name}",
        uuid::Uuid::new_v4().simple()
    ))
}

/// Whether a listing hides a name: temp files (`.strata-tmp-<32 hex>-<name>`) and old staging
/// files. Anything else stays visible, archives of topics named `.strata-...` included.
fn is_hidden(name: &str) -> bool {
    let temp = name.strip_prefix(TMP_PREFIX).is_some_and(|rest| {
        rest.len() > 33
            && rest.as_bytes()[32] == b'-'
            && rest.as_bytes()[..32].iter().all(u8::is_ascii_hexdigit)
    });
    temp || name.starts_with(STAGING_PREFIX)
}

/// Creates `dir` and any missing parents, fsyncing each new level into its parent, so the path
/// of a durable object survives a crash as well as its bytes.
fn create_dir_durable(dir: &Path) -> io::Result<()> {
    // "" is the working directory (the parent of a relative root such as `file://archive`).
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durable(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        // Another writer created it first; it fsyncs it.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} exists and is not a directory", dir.display()),
            ))
        }
        Err(e) => return Err(e),
    }
    if let Some(parent) = dir.parent() {
        std::fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Creates `dest`'s directory, then returns an open temp file beside it.
fn create_temp(dest: &Path) -> io::Result<(PathBuf, std::fs::File)> {
    if let Some(dir) = dest.parent() {
        create_dir_durable(dir)?;
    }
    let tmp = temp_path(dest);
    let f = std::fs::File::create(&tmp)?;
    Ok((tmp, f))
}

/// fsync the file, rename it over `dest`, fsync the directory: durable and atomic.
fn commit_temp(tmp: &Path, f: std::fs::File, dest: &Path) -> io::Result<()> {
    f.sync_all()?;
    drop(f);
    std::fs::rename(tmp, dest)?;
    if let Some(dir) = dest.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

fn write_atomic(dest: &Path, data: &[u8]) -> io::Result<()> {
    let (tmp, mut f) = create_temp(dest)?;
    let r = super::write_in_pieces(&mut f, data).and_then(|_| commit_temp(&tmp, f, dest));
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

fn walk(dir: &Path, rel: &str, prefix: &str, out: &mut Vec<ObjectMeta>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if is_hidden(name) {
            continue;
        }
        let key = if rel.is_empty() {
            name.to_string()
        } else {
            format!("{rel}/{name}")
        };
        // Descend only where the key can still match the prefix.
        let could_match = key.starts_with(prefix) || prefix.starts_with(&format!("{key}/"));
        if !could_match {
            continue;
        }
        let meta = entry.metadata()?;
        if meta.is_dir() {
            walk(&entry.path(), &key, prefix, out)?;
        } else if key.starts_with(prefix) {
            out.push(ObjectMeta {
                key,
                size: meta.len(),
                last_modified: meta.modified().ok().map(Into::into),
            });
        }
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(io::Error::other(format!("file task failed: {e}"))))
}

#[async_trait]
impl ObjectStore for FsStore {
    async fn put(&self, key: &str, data: Bytes) -> Result<(), StoreError> {
        let dest = self.path(key)?;
        blocking(move || write_atomic(&dest, &data))
            .await
            .map_err(|e| self.io_err(key, e))
    }

    async fn put_multipart(&self, key: &str) -> Result<Box<dyn MultipartUpload>, StoreError> {
        use std::os::unix::fs::MetadataExt;
        let dest = self.path(key)?;
        let d = dest.clone();
        let (tmp, file, ino) = blocking(move || {
            let (tmp, file) = create_temp(&d)?;
            let ino = file.metadata()?.ino();
            Ok((tmp, file, ino))
        })
        .await
        .map_err(|e| self.io_err(key, e))?;
        Ok(Box::new(FsUpload {
            file: Some(file),
            tmp,
            dest,
            location: self.location(key),
            tag: inode_tag(ino),
            ended: false,
        }))
    }

    async fn tag_of(&self, key: &str) -> Result<Option<String>, StoreError> {
        use std::os::unix::fs::MetadataExt;
        let p = self.path(key)?;
        let m = tokio::fs::metadata(&p)
            .await
            .map_err(|e| self.io_err(key, e))?;
        Ok(Some(inode_tag(m.ino())))
    }

    fn part_size(&self) -> usize {
        PART_SIZE
    }

    async fn incomplete(&self, prefix: &str) -> Result<Vec<Incomplete>, StoreError> {
        let root = self.root.clone();
        let p = prefix.to_string();
        blocking(move || {
            let mut out = Vec::new();
            find_temps(&root, "", &p, &mut out)?;
            Ok(out)
        })
        .await
        .map_err(|e| self.io_err(prefix, e))
    }

    async fn abort_incomplete(&self, write: &Incomplete) -> Result<(), StoreError> {
        check_key(|| self.location(&write.handle), &write.handle)?;
        match tokio::fs::remove_file(self.root.join(&write.handle)).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io_err(&write.key, e)),
        }
    }

    async fn get(&self, key: &str) -> Result<Bytes, StoreError> {
        let p = self.path(key)?;
        tokio::fs::read(&p)
            .await
            .map(Bytes::from)
            .map_err(|e| self.io_err(key, e))
    }

    async fn get_range(&self, key: &str, range: Range<u64>) -> Result<Bytes, StoreError> {
        let p = self.path(key)?;
        let mut f = tokio::fs::File::open(&p)
            .await
            .map_err(|e| self.io_err(key, e))?;
        let size = f.metadata().await.map_err(|e| self.io_err(key, e))?.len();
        if range.start >= size || range.end <= range.start {
            return Err(StoreError::new(
                ErrorKind::InvalidInput,
                self.location(key),
                format!(
                    "range {}..{} is outside the object's {size} bytes",
                    range.start, range.end
                ),
            ));
        }
        let end = range.end.min(size);
        let mut buf = vec![0u8; (end - range.start) as usize];
        f.seek(SeekFrom::Start(range.start))
            .await
            .map_err(|e| self.io_err(key, e))?;
        f.read_exact(&mut buf)
            .await
            .map_err(|e| self.io_err(key, e))?;
        Ok(Bytes::from(buf))
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        let p = self.path(key)?;
        let m = tokio::fs::metadata(&p)
            .await
            .map_err(|e| self.io_err(key, e))?;
        if !m.is_file() {
            return Err(StoreError::new(
                ErrorKind::NotFound,
                self.location(key),
                "no such object",
            ));
        }
        Ok(ObjectMeta {
            key: key.to_string(),
            size: m.len(),
            last_modified: m.modified().ok().map(Into::into),
        })
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let root = self.root.clone();
        let p = prefix.to_string();
        let mut out = blocking(move || {
            let mut out = Vec::new();
            walk(&root, "", &p, &mut out)?;
            Ok(out)
        })
        .await
        .map_err(|e| self.io_err(prefix, e))?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let p = self.path(key)?;
        match tokio::fs::remove_file(&p).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io_err(key, e)),
        }
    }

    async fn check(&self) -> Result<(), StoreError> {
        let probe = temp_path(&self.root.join("check"));
        let root = self.root.clone();
        blocking(move || {
            create_dir_durable(&root)?;
            write_atomic(&probe, b"strata write check")?;
            std::fs::remove_file(&probe)
        })
        .await
        .map_err(|e| {
            let unauthorized = e.kind() == io::ErrorKind::PermissionDenied;
            StoreError::new(
                if unauthorized {
                    ErrorKind::Unauthorized
                } else {
                    ErrorKind::Io
                },
                self.location(""),
                if unauthorized {
                    format!("cannot write here: {e}; fix the directory's permissions or change store.url")
                } else {
                    format!("cannot write here: {e}; create the directory (a writable one, on a mounted file system) or change store.url")
                },
            )
        })
    }

    fn location(&self, key: &str) -> String {
        let root = self.root.display().to_string();
        let sep = if root.ends_with('/') || key.is_empty() {
            ""
        } else {
            "/"
        };
        format!("file://{root}{sep}{key}")
    }
}

/// What a `file://` upload writes at once: there is no part minimum, so the writer holds
/// little per open object.
const PART_SIZE: usize = 1 << 20;

/// An object's tag on `file://`: its inode, which a hard link into place keeps.
fn inode_tag(ino: u64) -> String {
    format!("ino-{ino}")
}

struct FsUpload {
    file: Option<std::fs::File>,
    tmp: PathBuf,
    dest: PathBuf,
    location: String,
    tag: String,
    /// Moved into place or removed.
    ended: bool,
}

impl Drop for FsUpload {
    /// A cancelled writer leaves no temp file behind.
    fn drop(&mut self) {
        if !self.ended {
            self.file.take();
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Temp and staging files in directories under `dir` whose keys start with `prefix` (a temp
/// file sits beside its object, so its directory decides).
fn find_temps(dir: &Path, rel: &str, prefix: &str, out: &mut Vec<Incomplete>) -> io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let dir_key = if rel.is_empty() {
        String::new()
    } else {
        format!("{rel}/")
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let meta = entry.metadata()?;
        if meta.is_dir() {
            let key = format!("{dir_key}{name}");
            if key.starts_with(prefix) || prefix.starts_with(&format!("{key}/")) {
                find_temps(&entry.path(), &key, prefix, out)?;
            }
            continue;
        }
        // The listing's rule: what it hides is a write in progress, nothing else.
        let object = is_hidden(name)
            .then(|| {
                name.strip_prefix(TMP_PREFIX)
                    .and_then(|rest| rest.split_once('-').map(|(_, n)| n))
                    .or_else(|| name.strip_prefix(STAGING_PREFIX))
            })
            .flatten();
        if let (Some(object), true) = (object, dir_key.starts_with(prefix)) {
            out.push(Incomplete {
                key: format!("{dir_key}{object}"),
                started: meta.modified().ok().map(Into::into),
                handle: format!("{dir_key}{name}"),
            });
        }
    }
    Ok(())
}

/// fsync the file, hard-link it to `dest` unless `dest` exists (first writer wins), fsync the
/// directory.
fn link_new(tmp: &Path, f: std::fs::File, dest: &Path) -> io::Result<Finished> {
    f.sync_all()?;
    drop(f);
    match std::fs::hard_link(tmp, dest) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(Finished::Exists),
        Err(e) => return Err(e),
    }
    if let Some(dir) = dest.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(Finished::Stored)
}

impl FsUpload {
    fn err(&self, e: io::Error) -> StoreError {
        StoreError::new(ErrorKind::Io, self.location.clone(), e.to_string())
    }
}

#[async_trait]
impl MultipartUpload for FsUpload {
    async fn write(&mut self, data: Bytes) -> Result<(), StoreError> {
        let mut f = self
            .file
            .take()
            .ok_or_else(|| self.err(io::Error::other("upload already closed")))?;
        let (f, r) = tokio::task::spawn_blocking(move || {
            let r = super::write_in_pieces(&mut f, &data);
            (f, r)
        })
        .await
        .map_err(|e| self.err(io::Error::other(e.to_string())))?;
        self.file = Some(f);
        r.map_err(|e| self.err(e))
    }

    async fn finish(mut self: Box<Self>, mode: Finish) -> Result<Finished, StoreError> {
        let f = self
            .file
            .take()
            .ok_or_else(|| self.err(io::Error::other("upload already closed")))?;
        let (tmp, dest) = (self.tmp.clone(), self.dest.clone());
        self.ended = true;
        blocking(move || {
            let r = match mode {
                Finish::Replace => commit_temp(&tmp, f, &dest).map(|()| Finished::Stored),
                Finish::CreateNew => link_new(&tmp, f, &dest),
            };
            // After a link (or a failure) the temp name goes; after a rename it is gone.
            let _ = std::fs::remove_file(&tmp);
            r
        })
        .await
        .map_err(|e| self.err(e))
    }

    async fn abort(mut self: Box<Self>) -> Result<(), StoreError> {
        self.ended = true;
        self.file.take();
        match tokio::fs::remove_file(&self.tmp).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.err(e)),
        }
    }

    fn tag(&self) -> &str {
        &self.tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_temp_and_staging_names_are_hidden() {
        let temp = temp_path(Path::new("/x/orders+0+00000000000000000000.jsonl"));
        let temp = temp.file_name().unwrap().to_str().unwrap();
        assert!(is_hidden(temp), "{temp}");
        assert!(is_hidden(
            ".strata-staging-orders+0+00000000000000000000.jsonl"
        ));
        for visible in [
            ".strata-audit+0+00000000000000000000.jsonl",
            ".strata-tmp-audit+0+00000000000000000000.jsonl",
            ".strata-tmp-",
            "orders+0+00000000000000000000.jsonl",
        ] {
            assert!(!is_hidden(visible), "{visible}");
        }
    }

    #[tokio::test]
    async fn archives_of_dot_strata_topics_are_listed() {
        let root = tempfile::tempdir().unwrap();
        let store = FsStore::new(root.path().to_path_buf());
        let key = "d/2026/12/02/.strata-audit+0+00000000000000000000.jsonl";
        store.put(key, Bytes::from_static(b"{}\n")).await.unwrap();
        let keys: Vec<String> = store
            .list("d/")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .collect();
        assert_eq!(keys, vec![key.to_string()]);
    }

    #[tokio::test]
    async fn names_longer_than_the_filesystem_allows_are_rejected_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::new(dir.path().to_path_buf());
        let key = format!("d/{}", "n".repeat(300));
        let e = store.put(&key, Bytes::from_static(b"x")).await.unwrap_err();
        assert_eq!(e.kind, ErrorKind::Rejected, "{e}");
        assert!(!e.is_transient(), "{e}");
        assert!(
            e.to_string()
                .contains("shorten the directory (tasks[].directory, tier.prefix)"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn check_reports_the_real_cause() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let e = FsStore::new(file.join("archive"))
            .check()
            .await
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Io, "{e}");
        assert!(
            e.to_string()
                .contains("not-a-dir exists and is not a directory"),
            "{e}"
        );
        assert!(!e.to_string().contains("permission"), "{e}");
    }

    #[test]
    fn a_relative_root_works() {
        // The working directory's parent is "": nothing to create there.
        create_dir_durable(Path::new("")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let rel = Path::new("archive");
        let abs = dir.path().join(rel);
        create_dir_durable(&abs).unwrap();
        assert!(abs.is_dir());
    }

    #[test]
    fn new_directories_are_created_level_by_level() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a/b/c");
        create_dir_durable(&deep).unwrap();
        assert!(deep.is_dir());
        create_dir_durable(&deep).unwrap();
    }
}
