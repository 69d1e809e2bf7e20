//! Where an open file's bytes go while it is written: straight into a staging file beside the
//! object when the store is a local directory (no copy held in memory), or into memory for
//! remote stores. A finished file becomes a [`Payload`] the store takes.

use crate::format::Output;
use crate::store::{ObjectStore, StoreError};
use bytes::Bytes;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

/// Write buffer of a staging file: big enough for few syscalls, small enough to not matter.
const FILE_BUFFER: usize = 256 << 10;

/// A staging file, removed when the last handle is dropped unless it was moved into place
/// (then the removal finds nothing). Revoked or failed files thus leave no litter.
#[derive(Debug)]
pub(super) struct StagedFile(PathBuf);

impl StagedFile {
    pub(super) fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

pub(super) enum Staging {
    Memory(Vec<u8>),
    File {
        out: BufWriter<File>,
        file: Arc<StagedFile>,
        /// Bytes written so far: the object's exact size once finished.
        written: u64,
    },
}

impl Staging {
    /// Staging for the object `key`: a file when the store offers one, else memory.
    pub(super) fn for_key(store: &dyn ObjectStore, key: &str) -> Result<Self, StoreError> {
        match store.staging_path(key)? {
            None => Ok(Staging::Memory(Vec::new())),
            Some(path) => {
                let f = File::create(&path).map_err(|e| {
                    StoreError::new(
                        crate::store::ErrorKind::Io,
                        path.display().to_string(),
                        format!("cannot create the staging file: {e}"),
                    )
                })?;
                Ok(Staging::File {
                    out: BufWriter::with_capacity(FILE_BUFFER, f),
                    file: Arc::new(StagedFile(path)),
                    written: 0,
                })
            }
        }
    }

    /// Completes writing; the result is what the store is given, and its exact size.
    pub(super) fn into_payload(self) -> io::Result<(Payload, u64)> {
        match self {
            Staging::Memory(mut v) => {
                // The spare capacity (up to half of it, from doubling) would live as long as
                // the payload while the budget counts only its length.
                v.shrink_to_fit();
                let len = v.len() as u64;
                Ok((Payload::Memory(Bytes::from(v)), len))
            }
            Staging::File { out, file, written } => {
                out.into_inner().map_err(io::IntoInnerError::into_error)?;
                Ok((Payload::Staged(file), written))
            }
        }
    }
}

impl Write for Staging {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Staging::Memory(v) => {
                v.extend_from_slice(buf);
                Ok(buf.len())
            }
            Staging::File { out, written, .. } => {
                let n = out.write(buf)?;
                *written += n as u64;
                Ok(n)
            }
        }
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Staging::Memory(v) => {
                v.extend_from_slice(buf);
                Ok(())
            }
            Staging::File { out, written, .. } => {
                out.write_all(buf)?;
                *written += buf.len() as u64;
                Ok(())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Staging::Memory(_) => Ok(()),
            Staging::File { out, .. } => out.flush(),
        }
    }
}

impl Output for Staging {
    fn memory_bytes(&self) -> usize {
        match self {
            Staging::Memory(v) => v.capacity(),
            Staging::File { out, .. } => out.capacity(),
        }
    }
}

/// A finished object waiting to be stored.
#[derive(Debug, Clone)]
pub(super) enum Payload {
    Memory(Bytes),
    Staged(Arc<StagedFile>),
}

impl Payload {
    /// Memory this payload holds until it is stored.
    pub(super) fn memory_bytes(&self) -> usize {
        match self {
            Payload::Memory(b) => b.len(),
            Payload::Staged(_) => 0,
        }
    }

    /// Stores it under `key`; durable when this returns `Ok`.
    pub(super) async fn store(&self, store: &dyn ObjectStore, key: &str) -> Result<(), StoreError> {
        match self {
            Payload::Memory(b) => store.put(key, b.clone()).await,
            Payload::Staged(f) => store.put_staged(key, f.path()).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::FsStore;

    fn fill(mut s: Staging) -> (Payload, u64) {
        s.write_all(b"hello ").unwrap();
        let n = s.write(b"world").unwrap();
        assert_eq!(n, 5);
        s.flush().unwrap();
        s.into_payload().unwrap()
    }

    #[test]
    fn file_staging_reports_the_exact_size_and_holds_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::new(dir.path().to_path_buf());
        let staging = Staging::for_key(&store, "a/b/c.txt").unwrap();
        assert!(matches!(staging, Staging::File { .. }));
        let (payload, size) = fill(staging);
        assert_eq!(size, 11);
        let Payload::Staged(file) = &payload else {
            panic!("a local store stages in a file");
        };
        assert_eq!(std::fs::read(file.path()).unwrap(), b"hello world");
        assert_eq!(payload.memory_bytes(), 0);
    }

    #[test]
    fn memory_staging_reports_the_exact_size() {
        let (payload, size) = fill(Staging::Memory(Vec::with_capacity(1024)));
        assert_eq!(size, 11);
        assert!(matches!(&payload, Payload::Memory(b) if &b[..] == b"hello world"));
    }
}
