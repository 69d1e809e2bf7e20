//! The bridge API's mutual authentication (`bridge/kafka-rsm/README.md`, "Authentication"): a
//! shared secret that never crosses the wire, a handshake per connection in which strata proves
//! it knows the secret, and an HMAC on every request and response keyed by the connection's
//! session key. Pure functions; the server glue lives in `api`.

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};

type HmacSha256 = hmac::Hmac<Sha256>;

/// Fewest secret bytes accepted: 256 bits.
pub const MIN_SECRET_BYTES: usize = 32;

/// Protocol version spoken in the hello.
pub const VERSION: u32 = 1;

/// A secret file that cannot be used, and how to fix it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SecretError {
    #[error("tier.secret_file {path}: {message}")]
    Unusable { path: PathBuf, message: String },
}

/// The shared secret. Its bytes never reach a message: `Debug` prints a placeholder.
#[derive(Clone)]
pub struct SharedSecret(Vec<u8>);

impl fmt::Debug for SharedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedSecret(<redacted>)")
    }
}

impl SharedSecret {
    /// The secret from its text: surrounding ASCII whitespace removed, at least
    /// [`MIN_SECRET_BYTES`] left.
    pub fn from_text(text: &[u8]) -> Result<Self, String> {
        let trimmed = text.trim_ascii();
        if trimmed.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "holds {} bytes, fewer than {MIN_SECRET_BYTES}; write a new one with `strata tier-secret FILE`",
                trimmed.len()
            ));
        }
        Ok(Self(trimmed.to_vec()))
    }

    /// Reads the secret file, refusing one that is not a regular file owned by this user (or
    /// root), or that others can read or anyone but its owner can write: the secret is what
    /// keeps other local users out of the API.
    pub fn load(path: &Path) -> Result<Self, SecretError> {
        use std::os::unix::fs::MetadataExt;
        let bad = |message: String| SecretError::Unusable {
            path: path.to_path_buf(),
            message,
        };
        let meta = std::fs::symlink_metadata(path).map_err(|e| {
            bad(format!(
                "cannot be read: {e}; create it with `strata tier-secret {}`",
                path.display()
            ))
        })?;
        if !meta.file_type().is_file() {
            return Err(bad(
                "is not a regular file (symbolic links are refused); point tier.secret_file at the file itself".into(),
            ));
        }
        check_private(meta.mode(), meta.uid(), current_uid()).map_err(bad)?;
        let text = std::fs::read(path).map_err(|e| bad(format!("cannot be read: {e}")))?;
        Self::from_text(&text).map_err(bad)
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length.
        <HmacSha256 as KeyInit>::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }
}

fn current_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Mode and owner rules for the secret file: owned by this user or root, no rights for
/// others, not writable by the group (0600 and 0640 pass).
pub(crate) fn check_private(mode: u32, owner: u32, me: u32) -> Result<(), String> {
    if owner != me && owner != 0 {
        return Err(format!(
            "is owned by uid {owner}, not by this user (uid {me}) or root; chown it to the user running strata tier"
        ));
    }
    if mode & 0o007 != 0 || mode & 0o020 != 0 {
        return Err(format!(
            "has mode {:04o}: other users could read or change it; run chmod 0640 (or 0600) on it",
            mode & 0o7777
        ));
    }
    Ok(())
}

/// 32 random bytes as 64 lowercase hex digits.
pub fn nonce() -> String {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the operating system's random source failed");
    hex(&b)
}

/// Checks a nonce's spelling: 64 lowercase hex digits.
pub fn valid_nonce(n: &str) -> bool {
    n.len() == 64 && n.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

pub fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hmac_hex(mut m: HmacSha256, text: &str) -> String {
    m.update(text.as_bytes());
    hex(&m.finalize().into_bytes())
}

/// strata's answer to a hello: proves it knows the secret, and vouches for the socket it names.
pub fn server_proof(
    secret: &SharedSecret,
    client_nonce: &str,
    server_nonce: &str,
    socket: Option<&str>,
) -> String {
    hmac_hex(
        secret.mac(),
        &format!(
            "strata-tier/1/server\n{client_nonce}\n{server_nonce}\n{}",
            socket.unwrap_or("")
        ),
    )
}

/// The key of one connection, from both nonces of its hello.
#[derive(Clone)]
pub struct SessionKey([u8; 32]);

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(<redacted>)")
    }
}

impl SessionKey {
    pub fn derive(secret: &SharedSecret, client_nonce: &str, server_nonce: &str) -> Self {
        let mut m = secret.mac();
        m.update(format!("strata-tier/1/session\n{client_nonce}\n{server_nonce}").as_bytes());
        Self(m.finalize().into_bytes().into())
    }

    fn mac(&self) -> HmacSha256 {
        <HmacSha256 as KeyInit>::new_from_slice(&self.0).expect("HMAC accepts any key length")
    }

    /// The `Strata-Auth` mac a request must carry.
    pub fn request_mac(&self, seq: u64, method: &str, path: &str, body_sha256_hex: &str) -> String {
        hmac_hex(
            self.mac(),
            &format!("strata-tier/1/request\n{seq}\n{method}\n{path}\n{body_sha256_hex}"),
        )
    }

    /// The `Strata-Auth` mac of a response; `digest` is the body's SHA-256 in hex, or
    /// `stream <length>` for a streamed fetch body.
    pub fn response_mac(&self, seq: u64, status: u16, digest: &str) -> String {
        hmac_hex(
            self.mac(),
            &format!("strata-tier/1/response\n{seq}\n{status}\n{digest}"),
        )
    }

    /// A running tag over an upload's file bytes.
    pub fn upload_tag(&self, seq: u64) -> UploadTag {
        let mut m = self.mac();
        m.update(format!("strata-tier/1/upload\n{seq}\n").as_bytes());
        UploadTag(m)
    }
}

/// HMAC of a copy upload's file bytes, fed as they stream in.
pub struct UploadTag(HmacSha256);

impl UploadTag {
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data);
    }

    /// Whether `tag` (the body's last 32 bytes) matches, in constant time.
    pub fn verify(self, tag: &[u8]) -> bool {
        self.0.verify_slice(tag).is_ok()
    }

    /// The tag itself (what a sender appends).
    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into_bytes().into()
    }
}

/// Constant-time comparison of two macs as text.
pub fn same_mac(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Writes a new secret file (mode 0600, never over an existing file): 32 random bytes in hex.
pub fn write_new_secret(path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(format!("{}\n", nonce()).as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The vectors of bridge/kafka-rsm/README.md (computed with Python's hmac); the bridge's
    // JUnit tests check the same values.
    const K: &[u8] = b"0123456789abcdef0123456789abcdef-test-secret";
    fn cn() -> String {
        format!("{}01", "00".repeat(31))
    }
    fn sn() -> String {
        format!("{}fe", "ff".repeat(31))
    }

    #[test]
    fn shared_test_vectors() {
        let k = SharedSecret::from_text(K).unwrap();
        assert_eq!(
            server_proof(&k, &cn(), &sn(), Some("/run/strata-tier/tier.sock")),
            "a944daf4be5952c8cc1fce27ba5dfa9b67625dd23536f3a706bf10123722d0db"
        );
        assert_eq!(
            server_proof(&k, &cn(), &sn(), None),
            "83ae2fa6017ca5a74c2ad8e4efd16d3d7fb237d720327954d2d92e7585d21a60"
        );
        let s = SessionKey::derive(&k, &cn(), &sn());
        assert_eq!(
            hex(&s.0),
            "c60e584e9a3fb815e5d4ffd13a684e8048462f642eeb4fd30e1531de1b934195"
        );
        let body = sha256_hex(br#"{"segment":{}}"#);
        assert_eq!(
            body,
            "4c1cb41aad7e87e97d367932e31e2b77c11c85b77d9f836acc8160dec6e8b6a6"
        );
        assert_eq!(
            s.request_mac(1, "POST", "/v1/fetch", &body),
            "3eb923d002a152e7d80a413b6480fac9de28e3975bc74030caceaaeceb4acb69"
        );
        assert_eq!(
            s.response_mac(1, 200, &sha256_hex(b"")),
            "b2b62e7a3afcf0897e4756af3f7462d4a5d900533f6f28c0dd4c908bd35797b2"
        );
        assert_eq!(
            s.response_mac(2, 200, "stream 1048576"),
            "79bf37e474ce7ab279aacd360a87fab16fa88648cce76ad2b4c65d472181e27c"
        );
        let mut tag = s.upload_tag(3);
        tag.update(b"a");
        tag.update(b"bc");
        let expected = "df05c93f8aeb883a49be4e88c8278ac9440471e544ec1df43a327ccff1b3c93d";
        let raw: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&expected[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        assert!(tag.verify(&raw));
        let mut wrong = s.upload_tag(3);
        wrong.update(b"abd");
        assert!(!wrong.verify(&raw));
    }

    #[test]
    fn secrets_are_trimmed_and_long_enough() {
        assert!(SharedSecret::from_text(b"  short \n").is_err());
        let padded = format!("\n {}\n", "x".repeat(32));
        let s = SharedSecret::from_text(padded.as_bytes()).unwrap();
        assert_eq!(s.0, vec![b'x'; 32]);
        assert!(!format!("{s:?}").contains('x'));
        assert!(!format!("{:?}", SessionKey::derive(&s, "a", "b")).contains("SessionKey(["));
    }

    #[test]
    fn secret_file_modes() {
        assert!(check_private(0o100600, 1000, 1000).is_ok());
        assert!(check_private(0o100640, 1000, 1000).is_ok());
        assert!(check_private(0o100400, 0, 1000).is_ok());
        let e = check_private(0o100644, 1000, 1000).unwrap_err();
        assert!(e.contains("0644") && e.contains("chmod"), "{e}");
        assert!(check_private(0o100660, 1000, 1000).is_err());
        assert!(check_private(0o100602, 1000, 1000).is_err());
        let e = check_private(0o100600, 1001, 1000).unwrap_err();
        assert!(e.contains("uid 1001"), "{e}");
    }

    #[test]
    fn secret_files_on_disk() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        write_new_secret(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(SharedSecret::load(&path).is_ok());
        assert!(
            write_new_secret(&path).is_err(),
            "an existing secret is never overwritten"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = SharedSecret::load(&path).unwrap_err().to_string();
        assert!(e.contains("0644"), "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let e = SharedSecret::load(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic"), "{e}");
        let e = SharedSecret::load(&dir.path().join("missing"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("strata tier-secret"), "{e}");
    }

    #[test]
    fn nonces_are_fresh_and_well_formed() {
        let (a, b) = (nonce(), nonce());
        assert!(valid_nonce(&a) && valid_nonce(&b));
        assert_ne!(a, b);
        assert!(!valid_nonce(&a.to_uppercase()));
        assert!(!valid_nonce(&a[1..]));
        assert!(same_mac(&a, &a.clone()));
        assert!(!same_mac(&a, &b));
        assert!(!same_mac(&a, &a[1..]));
    }
}
