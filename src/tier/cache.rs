//! A size-bounded LRU cache of verified, decompressed chunks, in memory or in files under
//! `tier.cache_dir`. One load per chunk at a time (single flight): readers of a chunk that is
//! being fetched wait for that fetch instead of starting their own. Loads run as tasks of their
//! own, so a reader that hangs up does not cancel a fetch others (or a prefetch) wait for.
//!
//! Disk entries are checked against the chunk's CRC-32C on every read: a damaged cache file is
//! dropped and the chunk fetched again. The cache directory is emptied at start (a cold cache).
//! In front of the disk, a small in-memory set of recently used chunks spares the file reads
//! of a sequential reader, which asks for the same chunk several times in a row.
//!
//! Disk entries can be handed to the bridge to read itself ([`ChunkCache::file`]): a file is
//! written once under a name never used before (this process's random id and a counter), never
//! rewritten, only unlinked, and comes with the CRC-32C of each [`BLOCK`] of its verified bytes.

use super::error::TierError;
use super::stats;
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use lru::LruCache;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// One chunk of one stored `.log` object.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChunkKey {
    pub object: Arc<str>,
    pub index: u64,
    /// Expected CRC-32C and length of the original bytes. Part of the key, so a segment copied
    /// again with other content never hits stale entries, and disk entries can be verified.
    pub crc32c: u32,
    pub len: u64,
}

type Load = Shared<BoxFuture<'static, Result<Bytes, TierError>>>;
type Promotion = Shared<BoxFuture<'static, Option<Bytes>>>;

#[derive(Clone)]
pub struct ChunkCache {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ChunkCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkCache")
            .field("capacity", &self.inner.capacity)
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

struct Inner {
    state: Mutex<State>,
    capacity: u64,
    /// Bytes of recently used chunks kept in memory in front of the disk (0 in memory mode).
    hot_capacity: u64,
    /// `None`: entries live in memory.
    dir: Option<PathBuf>,
    /// Mode of new cache files: readable by the directory's group when the broker is in it.
    file_mode: u32,
    /// Random per cache: file names `<id>-<n>.chunk` are never reused, even across restarts.
    id: u64,
}

struct State {
    entries: LruCache<ChunkKey, Place>,
    /// Bytes held by `entries`.
    used: u64,
    loading: HashMap<ChunkKey, Load>,
    /// Disk entries being read into `hot` ahead of a reader: readers wait for these reads
    /// rather than reading the file again (`None`: the file was unusable).
    promoting: HashMap<ChunkKey, Promotion>,
    next_file: u64,
    hot: LruCache<ChunkKey, Bytes>,
    hot_used: u64,
}

#[derive(Clone)]
enum Place {
    Memory(Bytes),
    File(Arc<ChunkFile>),
}

/// Bytes per checksummed block of a cache file handed to the bridge: it verifies whole blocks,
/// so a small read costs at most two blocks of extra reading.
pub const BLOCK: u64 = 64 << 10;

/// A verified chunk's cache file.
#[derive(Debug)]
pub struct ChunkFile {
    pub path: PathBuf,
    /// The file's name inside the cache directory (unique for the life of the directory).
    pub name: String,
    pub len: u64,
    /// CRC-32C of each [`BLOCK`] of the file (the last one may be shorter), computed from the
    /// bytes after they were verified against the manifest and before they were written.
    pub blocks: Vec<u32>,
}

/// CRC-32C of each [`BLOCK`] of `data`.
pub fn block_crcs(data: &[u8]) -> Vec<u32> {
    data.chunks(BLOCK as usize).map(crc32c::crc32c).collect()
}

enum Found {
    Ready(Place),
    Loading(Load),
    /// On disk, and being read into memory by a prefetch.
    Promoting(Promotion),
    Absent,
}

/// Name of the folder strata owns inside `tier.cache_dir` (and empties at start).
const CHUNK_DIR: &str = "strata-chunks";

impl ChunkCache {
    pub fn memory(capacity: u64) -> Self {
        Self::with_dir(capacity, None, 0, 0o600)
    }

    /// A cache in files under `dir/strata-chunks/`, emptied first, with up to `hot` bytes of
    /// recently used chunks also kept in memory. `dir` must not be writable by other users (the
    /// broker reads the files strata names); its group, if it can read `dir`, can read the files.
    pub async fn on_disk(dir: &Path, capacity: u64, hot: u64) -> Result<Self, TierError> {
        let chunks = dir.join(CHUNK_DIR);
        let (root, path) = (dir.to_path_buf(), chunks.clone());
        let file_mode = tokio::task::spawn_blocking(move || prepare_dir(&root, &path))
            .await
            .map_err(|e| TierError::Internal(format!("cache setup task failed: {e}")))??;
        Ok(Self::with_dir(
            capacity,
            Some(chunks),
            hot.min(capacity),
            file_mode,
        ))
    }

    fn with_dir(capacity: u64, dir: Option<PathBuf>, hot_capacity: u64, file_mode: u32) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    entries: LruCache::unbounded(),
                    used: 0,
                    loading: HashMap::new(),
                    promoting: HashMap::new(),
                    next_file: 0,
                    hot: LruCache::unbounded(),
                    hot_used: 0,
                }),
                capacity,
                hot_capacity,
                dir,
                file_mode,
                id: unique_id(),
            }),
        }
    }

    /// Bytes and entries held now (for tests and logs).
    pub fn usage(&self) -> (u64, usize) {
        let s = self.inner.lock();
        (s.used, s.entries.len())
    }

    /// The chunk from the cache, from a load already running, or from `load` (whose result
    /// must already be verified).
    pub async fn get<F>(&self, key: &ChunkKey, load: F) -> Result<Bytes, TierError>
    where
        F: FnOnce() -> BoxFuture<'static, Result<Bytes, TierError>>,
    {
        match self.find(key) {
            Found::Ready(Place::Memory(b)) => {
                stats::cache_hit();
                return Ok(b);
            }
            Found::Ready(Place::File(file)) => match read_verified(&file.path, key).await {
                Ok(b) => {
                    stats::cache_hit();
                    self.keep_hot(key, &b);
                    return Ok(b);
                }
                Err(why) => {
                    tracing::warn!(file = %file.path.display(), object = %key.object, chunk = key.index, %why, "dropping a bad chunk cache file; fetching the chunk again");
                    self.forget(key);
                }
            },
            Found::Loading(load) => {
                stats::cache_hit();
                return load.await;
            }
            Found::Promoting(promotion) => {
                if let Some(b) = promotion.await {
                    stats::cache_hit();
                    return Ok(b);
                }
                // The file was unusable: load the chunk as if it was not cached.
                self.forget(key);
            }
            Found::Absent => {}
        }
        stats::cache_miss();
        self.start(key, load).await
    }

    /// Starts loading a chunk a sequential reader will soon want, unless it is cached or on its
    /// way; with `promote`, a chunk cached on disk only is read into memory ahead of the reader
    /// (not when the bridge reads the files itself). Returns at once.
    pub fn prefetch<F>(&self, key: &ChunkKey, load: F, promote: bool)
    where
        F: FnOnce() -> BoxFuture<'static, Result<Bytes, TierError>>,
    {
        match self.find(key) {
            Found::Absent => {
                stats::prefetch();
                drop(self.start(key, load));
            }
            Found::Ready(Place::File(file)) if promote => self.promote(key, file.path.clone()),
            _ => {}
        }
    }

    /// The chunk's cache file, if the chunk is on disk now (a use, for the LRU order).
    pub fn file(&self, key: &ChunkKey) -> Option<Arc<ChunkFile>> {
        match self.inner.lock().entries.get(key) {
            Some(Place::File(f)) => Some(f.clone()),
            _ => None,
        }
    }

    /// The directory of the cache files, if on disk.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// Drops the entry whose file is named `name` (the bridge found its bytes damaged), so the
    /// chunk is fetched again. Returns whether there was one.
    pub fn distrust(&self, name: &str) -> bool {
        let key = {
            let s = self.inner.lock();
            s.entries.iter().find_map(|(k, p)| match p {
                Place::File(f) if f.name == name => Some(k.clone()),
                _ => None,
            })
        };
        match key {
            Some(k) => {
                tracing::warn!(file = name, object = %k.object, chunk = k.index, "the bridge found a chunk cache file damaged; dropping it, the chunk is fetched again");
                self.forget(&k);
                true
            }
            None => false,
        }
    }

    /// Reads a disk entry into the in-memory layer in the background, so that the reader does
    /// not wait for the file read and its check (a few ms for a 4 MiB chunk). A reader that
    /// comes first reads the file itself; a damaged file is left for that reader to notice.
    fn promote(&self, key: &ChunkKey, path: PathBuf) {
        let mut s = self.inner.lock();
        if s.promoting.contains_key(key) {
            return;
        }
        let cache = self.clone();
        let k = key.clone();
        let task = tokio::spawn(async move {
            let read = read_verified(&path, &k).await.ok();
            if let Some(bytes) = &read {
                // Not if the entry went meanwhile (evicted, or its segment copied again).
                if cache.inner.lock().entries.contains(&k) {
                    cache.keep_hot(&k, bytes);
                }
            }
            cache.inner.lock().promoting.remove(&k);
            read
        });
        let promotion: Promotion = task.map(|joined| joined.ok().flatten()).boxed().shared();
        s.promoting.insert(key.clone(), promotion);
    }

    fn find(&self, key: &ChunkKey) -> Found {
        let mut s = self.inner.lock();
        if let Some(p) = s.entries.get(key) {
            let p = p.clone();
            if let Some(b) = s.hot.get(key) {
                return Found::Ready(Place::Memory(b.clone()));
            }
            if let Some(promotion) = s.promoting.get(key) {
                return Found::Promoting(promotion.clone());
            }
            return Found::Ready(p);
        }
        match s.loading.get(key) {
            Some(l) => Found::Loading(l.clone()),
            None => Found::Absent,
        }
    }

    /// Runs `load` as a task and registers it, unless one is running already.
    fn start<F>(&self, key: &ChunkKey, load: F) -> Load
    where
        F: FnOnce() -> BoxFuture<'static, Result<Bytes, TierError>>,
    {
        let mut s = self.inner.lock();
        if let Some(l) = s.loading.get(key) {
            return l.clone();
        }
        let fut = load();
        let cache = self.clone();
        let k = key.clone();
        // The task settles the entry itself (under the lock this function holds until the
        // load is registered), so it completes even when every reader has gone.
        let task = tokio::spawn(async move {
            let r = fut.await;
            cache.settle(k, &r);
            r
        });
        let load: Load = task
            .map(|joined| {
                joined.unwrap_or_else(|e| Err(TierError::Internal(format!("chunk load task: {e}"))))
            })
            .boxed()
            .shared();
        s.loading.insert(key.clone(), load.clone());
        load
    }

    /// Files a finished load: memory entries at once; disk entries once their file is written
    /// (until then, readers get the bytes from the finished load).
    fn settle(&self, key: ChunkKey, r: &Result<Bytes, TierError>) {
        let bytes = match r {
            Ok(b) if (b.len() as u64) <= self.inner.capacity => b.clone(),
            _ => {
                self.inner.lock().loading.remove(&key);
                return;
            }
        };
        let Some(dir) = self.inner.dir.clone() else {
            let evicted = self.insert(key, Place::Memory(bytes));
            debug_assert!(evicted.is_empty());
            return;
        };
        let n = {
            let mut s = self.inner.lock();
            s.next_file += 1;
            s.next_file
        };
        let name = format!("{:016x}-{n}.chunk", self.inner.id);
        let path = dir.join(&name);
        self.keep_hot(&key, &bytes);
        let cache = self.clone();
        let mode = self.inner.file_mode;
        tokio::task::spawn_blocking(move || match write_new(&path, &bytes, mode) {
            Ok(()) => {
                let file = ChunkFile {
                    path,
                    name,
                    len: bytes.len() as u64,
                    blocks: block_crcs(&bytes),
                };
                for old in cache.insert(key, Place::File(Arc::new(file))) {
                    let _ = std::fs::remove_file(old);
                }
            }
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot write to the chunk cache; serving without caching (check tier.cache_dir's free space)");
                let _ = std::fs::remove_file(&path);
                cache.inner.lock().loading.remove(&key);
            }
        });
    }

    /// Adds an entry, ends its load, evicts least recently used entries beyond the capacity.
    /// Returns the files of evicted disk entries, for the caller to remove.
    fn insert(&self, key: ChunkKey, place: Place) -> Vec<PathBuf> {
        let mut s = self.inner.lock();
        s.loading.remove(&key);
        let len = key.len;
        if let Some((_, old)) = s.entries.push(key.clone(), place) {
            // Same key again (a load raced a forget): the old copy is replaced, not added.
            s.used -= len;
            if let Place::File(f) = old {
                drop(s);
                let _ = std::fs::remove_file(&f.path);
                s = self.inner.lock();
            }
        }
        s.used += len;
        let mut evicted = Vec::new();
        while s.used > self.inner.capacity {
            let Some((k, old)) = s.entries.pop_lru() else {
                break;
            };
            s.used -= k.len;
            if s.hot.pop(&k).is_some() {
                s.hot_used -= k.len;
            }
            if let Place::File(f) = old {
                evicted.push(f.path.clone());
            }
        }
        evicted
    }

    /// Keeps a disk entry's bytes in memory too, dropping the least recently used beyond the
    /// hot capacity.
    fn keep_hot(&self, key: &ChunkKey, bytes: &Bytes) {
        let cap = self.inner.hot_capacity;
        if key.len > cap {
            return;
        }
        let mut s = self.inner.lock();
        if s.hot
            .push(key.clone(), bytes.clone())
            .is_some_and(|(k, _)| k == *key)
        {
            s.hot_used -= key.len;
        }
        s.hot_used += key.len;
        while s.hot_used > cap {
            match s.hot.pop_lru() {
                Some((k, _)) => s.hot_used -= k.len,
                None => break,
            }
        }
    }

    fn forget(&self, key: &ChunkKey) {
        let mut s = self.inner.lock();
        if s.hot.pop(key).is_some() {
            s.hot_used -= key.len;
        }
        if let Some(place) = s.entries.pop(key) {
            s.used -= key.len;
            if let Place::File(f) = place {
                drop(s);
                let _ = std::fs::remove_file(&f.path);
            }
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (every update is one step).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Checks `root` (not writable by others, ours or root's), then empties `chunks` and creates it
/// `0700`, or `0750` when `root`'s group may read it (the broker's user reaches the files
/// through that group). Returns the mode for new files.
fn prepare_dir(root: &Path, chunks: &Path) -> Result<u32, TierError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |e: std::io::Error| TierError::CacheDir {
            path,
            source: TierError::io(e),
        }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(io(root))?;
    let meta = std::fs::metadata(root).map_err(io(root))?;
    let me = rustix::process::geteuid().as_raw();
    check_root(meta.uid(), meta.mode(), me).map_err(|message| TierError::CacheDirUnsafe {
        path: root.to_path_buf(),
        message,
    })?;
    match std::fs::remove_dir_all(chunks) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(chunks)(e)),
        _ => {}
    }
    let (dir_mode, file_mode) = if meta.mode() & 0o050 == 0o050 {
        (0o750, 0o640)
    } else {
        (0o700, 0o600)
    };
    std::fs::DirBuilder::new()
        .mode(dir_mode)
        .create(chunks)
        .map_err(io(chunks))?;
    std::fs::set_permissions(chunks, std::fs::Permissions::from_mode(dir_mode))
        .map_err(io(chunks))?;
    Ok(file_mode)
}

/// `tier.cache_dir` may be shared with the broker's group but written only by its owner, who
/// is this user or root.
fn check_root(owner: u32, mode: u32, me: u32) -> Result<(), String> {
    if owner != me && owner != 0 {
        return Err(format!(
            "is owned by uid {owner}; it must belong to this user (uid {me}) or root, so no one else can replace the files the broker reads"
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "has mode {:04o}: other users could replace the chunk files the broker reads; run chmod 0750 (broker in the directory's group) or 0700 on it",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// A random id for this cache's file names (the clock if the system has no random source).
fn unique_id() -> u64 {
    getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    })
}

/// Writes a new file (never an existing one) with `mode`.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)?;
    // Exactly `mode`, whatever the umask: the broker's group must be able to read it.
    f.set_permissions(std::fs::Permissions::from_mode(mode))?;
    crate::io::write_in_pieces(&mut f, bytes)
}

/// A cache file's bytes, if they are the chunk's.
async fn read_verified(path: &Path, key: &ChunkKey) -> Result<Bytes, String> {
    let data = tokio::fs::read(path).await.map_err(|e| e.to_string())?;
    if data.len() as u64 != key.len {
        return Err(format!("{} bytes, expected {}", data.len(), key.len));
    }
    let crc = crc32c::crc32c(&data);
    if crc != key.crc32c {
        return Err(format!("crc32c {crc:08x}, expected {:08x}", key.crc32c));
    }
    Ok(Bytes::from(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn chunk(i: u8, len: usize) -> (ChunkKey, Bytes) {
        let data = Bytes::from(vec![i; len]);
        let key = ChunkKey {
            object: Arc::from("t/0/x.log"),
            index: i as u64,
            crc32c: crc32c::crc32c(&data),
            len: len as u64,
        };
        (key, data)
    }

    fn loader(
        data: Bytes,
        calls: Arc<AtomicUsize>,
    ) -> impl FnOnce() -> BoxFuture<'static, Result<Bytes, TierError>> {
        move || {
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                Ok(data)
            }
            .boxed()
        }
    }

    async fn settled(c: &ChunkCache, entries: usize) {
        for _ in 0..200 {
            if c.usage().1 == entries && c.inner.lock().loading.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("cache did not settle at {entries} entries: {:?}", c.usage());
    }

    /// The path of a chunk file in the cache directory `root`.
    fn first_chunk_file(root: &Path) -> PathBuf {
        std::fs::read_dir(root.join(CHUNK_DIR))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
    }

    #[tokio::test]
    async fn concurrent_readers_share_one_load() {
        let c = ChunkCache::memory(1 << 20);
        let calls = Arc::new(AtomicUsize::new(0));
        let (k, d) = chunk(1, 1000);
        let gets = (0..8).map(|_| c.get(&k, loader(d.clone(), calls.clone())));
        for r in futures::future::join_all(gets).await {
            assert_eq!(r.unwrap(), d);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(
            c.get(&k, loader(d.clone(), calls.clone())).await.unwrap(),
            d
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "second read is a hit");
    }

    #[tokio::test]
    async fn least_recently_used_chunks_leave_first() {
        let c = ChunkCache::memory(2500);
        let calls = Arc::new(AtomicUsize::new(0));
        let (k1, d1) = chunk(1, 1000);
        let (k2, d2) = chunk(2, 1000);
        let (k3, d3) = chunk(3, 1000);
        c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap();
        c.get(&k2, loader(d2.clone(), calls.clone())).await.unwrap();
        c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap(); // k1 now most recent
        c.get(&k3, loader(d3.clone(), calls.clone())).await.unwrap(); // evicts k2
        assert_eq!(c.usage(), (2000, 2));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 3, "k1 stayed");
        c.get(&k2, loader(d2.clone(), calls.clone())).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 4, "k2 was evicted");
    }

    #[tokio::test]
    async fn failed_loads_are_not_cached_and_chunks_larger_than_the_cache_pass_through() {
        let c = ChunkCache::memory(500);
        let (k, d) = chunk(1, 1000);
        let err = c
            .get(&k, || {
                async { Err(TierError::Internal("boom".into())) }.boxed()
            })
            .await
            .unwrap_err();
        assert!(err.to_string().contains("boom"));
        let calls = Arc::new(AtomicUsize::new(0));
        assert_eq!(
            c.get(&k, loader(d.clone(), calls.clone())).await.unwrap(),
            d
        );
        assert_eq!(
            c.get(&k, loader(d.clone(), calls.clone())).await.unwrap(),
            d
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(c.usage(), (0, 0));
    }

    #[tokio::test]
    async fn a_prefetched_chunk_is_a_hit() {
        let c = ChunkCache::memory(1 << 20);
        let calls = Arc::new(AtomicUsize::new(0));
        let (k, d) = chunk(4, 100);
        c.prefetch(&k, loader(d.clone(), calls.clone()), true);
        c.prefetch(&k, loader(d.clone(), calls.clone()), true);
        assert_eq!(
            c.get(&k, loader(d.clone(), calls.clone())).await.unwrap(),
            d
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn disk_entries_are_verified_and_evicted_files_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(CHUNK_DIR)).unwrap();
        std::fs::write(dir.path().join(CHUNK_DIR).join("stale"), b"x").unwrap();
        // No hot layer: every read goes to the file.
        let c = ChunkCache::on_disk(dir.path(), 2000, 0).await.unwrap();
        let files = || {
            std::fs::read_dir(dir.path().join(CHUNK_DIR))
                .unwrap()
                .count()
        };
        assert_eq!(files(), 0, "the cache starts cold");
        let calls = Arc::new(AtomicUsize::new(0));
        let (k1, d1) = chunk(1, 1000);
        let (k2, d2) = chunk(2, 1000);
        c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap();
        settled(&c, 1).await;
        // Damage the file: the next read notices, drops it and loads again.
        let path = first_chunk_file(dir.path());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[10] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(
            c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap(),
            d1
        );
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        settled(&c, 1).await;
        assert_eq!(
            c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap(),
            d1
        );
        assert_eq!(
            calls.load(Ordering::SeqCst),
            2,
            "the rewritten file is a hit"
        );
        c.get(&k2, loader(d2.clone(), calls.clone())).await.unwrap();
        settled(&c, 2).await;
        let (k3, d3) = chunk(3, 1000);
        c.get(&k3, loader(d3.clone(), calls.clone())).await.unwrap();
        settled(&c, 2).await;
        assert_eq!(files(), 2, "the evicted chunk's file is gone");
        assert_eq!(c.usage().0, 2000);
    }

    #[tokio::test]
    async fn handed_off_files_are_private_never_renamed_and_can_be_distrusted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let c = ChunkCache::on_disk(dir.path(), 1 << 20, 0).await.unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join(CHUNK_DIR)), 0o700);
        let calls = Arc::new(AtomicUsize::new(0));
        let (k1, d1) = chunk(1, 200_000);
        assert!(c.file(&k1).is_none(), "not cached yet");
        c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap();
        settled(&c, 1).await;
        let f = c.file(&k1).expect("on disk");
        assert_eq!(mode(&f.path), 0o600);
        assert_eq!(f.len, 200_000);
        assert_eq!(std::fs::read(&f.path).unwrap(), d1);
        assert_eq!(f.blocks.len(), 4, "200000 bytes in 64 KiB blocks");
        assert_eq!(f.blocks[3], crc32c::crc32c(&d1[3 * BLOCK as usize..]));
        let id = f.name.split('-').next().unwrap();
        assert_eq!(id.len(), 16, "{}", f.name);
        // Dropped on the bridge's word: the file goes, the next read loads the chunk again,
        // into a file of another name.
        assert!(
            !c.distrust("0000000000000000-1.chunk"),
            "unknown names change nothing"
        );
        assert!(c.distrust(&f.name));
        assert!(!f.path.exists() && c.file(&k1).is_none());
        c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap();
        settled(&c, 1).await;
        let again = c.file(&k1).unwrap();
        assert_ne!(again.name, f.name);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // A new cache (a restart) never reuses the names either.
        drop(c);
        let c2 = ChunkCache::on_disk(dir.path(), 1 << 20, 0).await.unwrap();
        c2.get(&k1, loader(d1.clone(), calls.clone()))
            .await
            .unwrap();
        settled(&c2, 1).await;
        let third = c2.file(&k1).unwrap();
        assert!(third.name != again.name && third.name != f.name);
    }

    #[tokio::test]
    async fn the_cache_directory_must_not_be_writable_by_others() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("c");
        std::fs::create_dir(&root).unwrap();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = ChunkCache::on_disk(&root, 1000, 0)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("0777") && e.contains("chmod"), "{e}");
        // Shared with the broker's group: files the group can read, nothing it can write.
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o750)).unwrap();
        let c = ChunkCache::on_disk(&root, 1000, 0).await.unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&root.join(CHUNK_DIR)), 0o750);
        let calls = Arc::new(AtomicUsize::new(0));
        let (k, d) = chunk(2, 100);
        c.get(&k, loader(d, calls)).await.unwrap();
        settled(&c, 1).await;
        assert_eq!(mode(&c.file(&k).unwrap().path), 0o640);
        assert!(check_root(4242, 0o40700, 7)
            .unwrap_err()
            .contains("uid 4242"));
        assert!(
            check_root(0, 0o40755, 7).is_ok(),
            "root's directory is fine"
        );
        assert!(check_root(7, 0o40720, 7).is_err());
    }

    #[tokio::test]
    async fn recent_disk_chunks_are_served_from_memory() {
        let dir = tempfile::tempdir().unwrap();
        let c = ChunkCache::on_disk(dir.path(), 10_000, 1000).await.unwrap();
        let calls = Arc::new(AtomicUsize::new(0));
        let (k1, d1) = chunk(1, 1000);
        let (k2, d2) = chunk(2, 1000);
        c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap();
        settled(&c, 1).await;
        // Damage the file: a memory hit does not read it.
        let path = first_chunk_file(dir.path());
        std::fs::write(&path, vec![0u8; 1000]).unwrap();
        assert_eq!(
            c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap(),
            d1
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "served from memory");
        // A second chunk pushes the first out of memory (hot capacity is one chunk): the
        // next read of the first goes to the (damaged) file, notices, and loads again.
        c.get(&k2, loader(d2.clone(), calls.clone())).await.unwrap();
        settled(&c, 2).await;
        assert_eq!(
            c.get(&k1, loader(d1.clone(), calls.clone())).await.unwrap(),
            d1
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert!(c.inner.lock().hot_used <= 1000);
    }
}
