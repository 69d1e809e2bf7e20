//! The Unix socket of the tier API, in a private runtime directory: created `0700` when
//! missing, refused when another user owns it or others can write to it (they could plant
//! their own socket there), and refused when something else still answers at the path.

use super::error::TierError;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The socket's file name inside `tier.socket_dir`.
pub const SOCKET_NAME: &str = "tier.sock";

/// Bytes a Unix socket may queue towards the bridge: a whole 1 MiB fetch window and then some.
/// A Unix stream socket holds only what its sender's buffer allows (208 KiB by default), and a
/// window larger than that is handed over in turns, each waiting for the broker's reader thread
/// to be scheduled (measured: 1 MiB windows read slower than over TCP, whose buffers grow by
/// themselves). The kernel caps this at `net.core.wmem_max`.
const SEND_BUFFER: usize = 4 << 20;

/// A bound socket; its path is removed when dropped.
pub struct PrivateSocket {
    pub path: PathBuf,
    listener: Option<tokio::net::UnixListener>,
}

impl PrivateSocket {
    /// The listener, for serving (once).
    pub fn take_listener(&mut self) -> Option<Listener> {
        self.listener.take().map(Listener)
    }
}

impl Drop for PrivateSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Accepts connections with a send buffer wide enough for a fetch window.
pub struct Listener(tokio::net::UnixListener);

impl crate::listen::Listener for Listener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<Self::Io> {
        let (s, _) = self.0.accept().await?;
        if let Err(e) = rustix::net::sockopt::set_socket_send_buffer_size(&s, SEND_BUFFER) {
            tracing::debug!(error = %e, "cannot widen a Unix socket's send buffer");
        }
        Ok(s)
    }
}

/// Binds `<dir>/tier.sock` after checking `dir` (see the module docs).
pub fn bind_private(dir: &Path) -> Result<PrivateSocket, TierError> {
    let path = dir.join(SOCKET_NAME);
    let fail = |message: String| TierError::Socket {
        path: path.clone(),
        message,
    };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(fail(format!(
                "cannot create the directory {}: {e}; create it (owned by this user, mode 0700 or 0750) or pick another tier.socket_dir",
                dir.display()
            )))
        }
    }
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| fail(format!("cannot inspect {}: {e}", dir.display())))?;
    check_dir(
        meta.file_type().is_dir(),
        meta.uid(),
        meta.mode(),
        rustix::process::geteuid().as_raw(),
    )
    .map_err(|m| fail(format!("{}: {m}", dir.display())))?;
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(format!("cannot inspect it: {e}"))),
        Ok(m) if !m.file_type().is_socket() => {
            return Err(fail(
                "exists and is not a socket; remove it, or pick another tier.socket_dir".into(),
            ))
        }
        Ok(_) => {
            if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                return Err(fail(
                    "another process listens on it (a second strata tier with this tier.socket_dir?); stop it first".into(),
                ));
            }
            // A socket a stopped strata tier left behind.
            std::fs::remove_file(&path).map_err(|e| {
                fail(format!(
                    "a stale socket is in the way and cannot be removed: {e}"
                ))
            })?;
        }
    }
    let listener = tokio::net::UnixListener::bind(&path)
        .map_err(|e| fail(format!("cannot listen on it: {e}")))?;
    // The broker's user reaches the socket through the directory's group, if it has one.
    let mode = if meta.mode() & 0o070 != 0 {
        0o660
    } else {
        0o600
    };
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| fail(format!("cannot set its mode: {e}")))?;
    Ok(PrivateSocket {
        path,
        listener: Some(listener),
    })
}

/// The runtime directory must be a real directory of this user that no one else can write.
fn check_dir(is_dir: bool, owner: u32, mode: u32, me: u32) -> Result<(), String> {
    if !is_dir {
        return Err(
            "is not a directory (symbolic links are refused); point tier.socket_dir at a directory"
                .into(),
        );
    }
    if owner != me {
        return Err(format!(
            "is owned by uid {owner}, not by this user (uid {me}); strata tier needs a runtime directory of its own"
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "has mode {:04o}: other users could place their own socket there; run chmod 0750 (broker in the directory's group) or 0700 on it",
            mode & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_directory_rules() {
        assert!(check_dir(true, 7, 0o40700, 7).is_ok());
        assert!(check_dir(true, 7, 0o42750, 7).is_ok());
        assert!(check_dir(false, 7, 0o40700, 7)
            .unwrap_err()
            .contains("symbolic"));
        assert!(check_dir(true, 8, 0o40700, 7)
            .unwrap_err()
            .contains("uid 8"));
        let e = check_dir(true, 7, 0o40777, 7).unwrap_err();
        assert!(e.contains("0777") && e.contains("chmod"), "{e}");
        assert!(check_dir(true, 7, 0o40720, 7).is_err());
    }

    #[tokio::test]
    async fn the_socket_is_private_and_never_shared() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let s = bind_private(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700, "created private");
        let sock_mode = std::fs::symlink_metadata(&s.path).unwrap().mode();
        assert_eq!(sock_mode & 0o777, 0o600);
        // A second service, or an impostor, cannot take the path while it is in use.
        let e = bind_private(&dir).err().unwrap().to_string();
        assert!(e.contains("another process listens"), "{e}");
        let path = s.path.clone();
        drop(s);
        assert!(!path.exists(), "removed at stop");
        // A stale socket (its process gone) is replaced.
        let stale = std::os::unix::net::UnixListener::bind(&path).unwrap();
        drop(stale);
        let s = bind_private(&dir).unwrap();
        drop(s);
        // Something else at the path is not touched.
        std::fs::write(&path, b"not a socket").unwrap();
        let e = bind_private(&dir).err().unwrap().to_string();
        assert!(e.contains("not a socket"), "{e}");
        std::fs::remove_file(&path).unwrap();
        // A directory others may write to is refused, as is a link to one.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = bind_private(&dir).err().unwrap().to_string();
        assert!(e.contains("0777"), "{e}");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let e = bind_private(&link).err().unwrap().to_string();
        assert!(e.contains("symbolic"), "{e}");
    }
}
