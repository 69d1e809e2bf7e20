//! `[tier]`: the tier service's address, chunking and cache.

use super::*;

pub(super) fn tier(cx: &mut Ctx<'_>, raw: RawTier) -> TierConfig {
    cx.unknown("tier", &raw.unknown, TIER_KEYS);
    let (listen, tls) = listener(cx, &raw);
    let secret_file = cx
        .text("tier.secret_file", &raw.secret_file)
        .map(PathBuf::from);
    let log_dirs = log_dirs(cx, &raw.log_dirs);
    let socket_dir = socket_dir(cx, &raw.socket_dir);
    let max_requests = at_least_one(
        cx,
        "tier.max_requests",
        raw.max_requests,
        defaults::MAX_REQUESTS,
    );
    let prefix = dump_dir(cx, "tier.prefix", &raw.prefix, defaults::TIER_PREFIX);
    let chunk_size = cx.size("tier.chunk_size", &raw.chunk_size, defaults::CHUNK_SIZE);
    if chunk_size < ByteSize(64 << 10) || chunk_size > ByteSize::mib(256) {
        cx.push(
            "tier.chunk_size",
            format!("{chunk_size} is outside 64KiB..=256MiB"),
        );
    }
    let compress_chunks = cx.choice(
        "tier.compression",
        &raw.compression,
        false,
        |s| match s {
            "zstd" => Some(true),
            "none" => Some(false),
            _ => None,
        },
        "\"zstd\" or \"none\"",
    );
    let cache_size = cx.size("tier.cache_size", &raw.cache_size, defaults::CACHE_SIZE);
    if cache_size < chunk_size.max(ByteSize(1)) {
        cx.push(
            "tier.cache_size",
            format!("{cache_size} is smaller than one chunk ({chunk_size})"),
        );
    }
    let upload_concurrency = at_least_one(
        cx,
        "tier.upload_concurrency",
        raw.upload_concurrency,
        defaults::UPLOAD_CONCURRENCY,
    );
    let cache_dir = cache_dir(cx, &raw.cache_dir);
    TierConfig {
        listen,
        prefix,
        chunk_size,
        compress_chunks,
        cache_dir,
        cache_size,
        prefetch_chunks: raw.prefetch_chunks.unwrap_or(defaults::PREFETCH_CHUNKS),
        upload_concurrency,
        secret_file,
        log_dirs,
        socket_dir,
        handoff: raw.handoff.unwrap_or(true),
        tls,
        max_requests,
    }
}

/// `listen` and its TLS files: required unless it is a loopback address.
fn listener(cx: &mut Ctx<'_>, raw: &RawTier) -> (SocketAddr, Option<TierTls>) {
    let listen_text = cx
        .text("tier.listen", &raw.listen)
        .unwrap_or_else(|| defaults::TIER_LISTEN.to_string());
    let listen = listen_text.parse::<SocketAddr>().unwrap_or_else(|_| {
        cx.push(
            "tier.listen",
            format!("{listen_text:?} is not \"ip:port\" (e.g. \"127.0.0.1:9190\")"),
        );
        SocketAddr::from(([127, 0, 0, 1], 9190))
    });
    let tls = match (
        cx.text("tier.tls_cert_file", &raw.tls_cert_file),
        cx.text("tier.tls_key_file", &raw.tls_key_file),
    ) {
        (Some(cert), Some(key)) => Some(TierTls {
            cert_file: PathBuf::from(cert),
            key_file: PathBuf::from(key),
        }),
        (None, None) => None,
        (Some(_), None) => {
            cx.push(
                "tier.tls_key_file",
                "is missing: tier.tls_cert_file needs its private key (PEM)",
            );
            None
        }
        (None, Some(_)) => {
            cx.push(
                "tier.tls_cert_file",
                "is missing: tier.tls_key_file needs its certificate chain (PEM)",
            );
            None
        }
    };
    if !listen.ip().is_loopback() && tls.is_none() {
        cx.push("tier.listen", format!("{listen} is not a loopback address: brokers on other hosts reach strata tier over TLS only; set tier.tls_cert_file and tier.tls_key_file, or listen on 127.0.0.1"));
    }
    (listen, tls)
}

fn log_dirs(cx: &mut Ctx<'_>, raw: &Option<StringList>) -> Vec<PathBuf> {
    let dirs: Vec<PathBuf> = raw
        .as_ref()
        .map(|l| l.items())
        .unwrap_or_default()
        .into_iter()
        .map(PathBuf::from)
        .collect();
    for d in &dirs {
        if !d.is_absolute() {
            cx.push("tier.log_dirs", format!("{} is not an absolute path; list the broker's log.dirs as the broker names them", d.display()));
        }
    }
    dirs
}

fn socket_dir(cx: &mut Ctx<'_>, raw: &Option<String>) -> Option<PathBuf> {
    let dir = cx.text("tier.socket_dir", raw).map(PathBuf::from);
    if let Some(d) = dir.as_ref().filter(|d| !d.is_absolute()) {
        cx.push(
            "tier.socket_dir",
            format!(
                "{} is not an absolute path (e.g. \"/run/strata-tier\")",
                d.display()
            ),
        );
    }
    dir
}

fn at_least_one(cx: &mut Ctx<'_>, key: &str, raw: Option<u32>, default: u32) -> u32 {
    let n = raw.unwrap_or(default);
    if n == 0 {
        cx.push(key, "must be at least 1");
    }
    n.max(1)
}

/// The bridge opens the files strata names in this directory, and takes only an absolute,
/// normalised path: resolved here, once, so every answer names it the same way.
fn cache_dir(cx: &mut Ctx<'_>, raw: &Option<String>) -> Option<PathBuf> {
    let text = cx.text("tier.cache_dir", raw)?;
    let cwd = std::env::current_dir().ok();
    absolute_dir(&text, cwd.as_deref())
        .map_err(|m| cx.push("tier.cache_dir", format!("{text:?} {m}")))
        .ok()
}

/// A directory path made absolute and normalised lexically: a relative path is taken from
/// `cwd` (the working directory, which the system gives without symbolic links), `.`
/// components and repeated or trailing slashes are dropped. A `..` is resolved only at the
/// start of a relative path (against `cwd`); after a directory name it is refused, since that
/// directory may be a symbolic link and the system would then resolve it elsewhere.
pub(super) fn absolute_dir(text: &str, cwd: Option<&Path>) -> Result<PathBuf, String> {
    use std::path::Component;
    if text.is_empty() {
        return Err("is empty; name a directory, or leave the key out to cache in memory".into());
    }
    let path = Path::new(text);
    let mut out = if path.is_absolute() {
        PathBuf::from("/")
    } else {
        match cwd {
            Some(c) if c.is_absolute() => c.to_path_buf(),
            _ => {
                return Err(
                    "is a relative path and the working directory cannot be read; give an absolute path".into(),
                )
            }
        }
    };
    let mut named = false;
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => {
                named = true;
                out.push(n);
            }
            Component::ParentDir if !named && !path.is_absolute() => {
                out.pop();
            }
            Component::ParentDir => {
                return Err(
                    "has a \"..\" after a directory name, which may be a symbolic link leading elsewhere; write the path without \"..\"".into(),
                )
            }
            Component::Prefix(_) => return Err("is not a Unix path".into()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dirs_become_absolute_and_normalised() {
        let cwd = Path::new("/srv/kafka");
        let ok = |t: &str| absolute_dir(t, Some(cwd)).unwrap();
        assert_eq!(ok("/var/cache/strata"), PathBuf::from("/var/cache/strata"));
        assert_eq!(
            ok("/var/cache/./strata"),
            PathBuf::from("/var/cache/strata")
        );
        assert_eq!(
            ok("//var//cache/strata/"),
            PathBuf::from("/var/cache/strata")
        );
        assert_eq!(
            ok("/./var/cache/strata/."),
            PathBuf::from("/var/cache/strata")
        );
        assert_eq!(ok("cache"), PathBuf::from("/srv/kafka/cache"));
        assert_eq!(
            ok("./cache/./chunks/"),
            PathBuf::from("/srv/kafka/cache/chunks")
        );
        assert_eq!(ok("."), PathBuf::from("/srv/kafka"));
        assert_eq!(ok("../cache"), PathBuf::from("/srv/cache"));
        assert_eq!(ok("../../../cache"), PathBuf::from("/cache"));
        assert_eq!(ok("/"), PathBuf::from("/"));
        for bad in ["/var/cache/../strata", "cache/../other", "/../x", "./a/.."] {
            let e = absolute_dir(bad, Some(cwd)).unwrap_err();
            assert!(e.contains("\"..\""), "{bad}: {e}");
        }
        assert!(absolute_dir("", Some(cwd)).unwrap_err().contains("empty"));
        let e = absolute_dir("cache", None).unwrap_err();
        assert!(e.contains("absolute path"), "{e}");
        assert!(absolute_dir("cache", Some(Path::new("rel"))).is_err());
        assert_eq!(
            absolute_dir("/var/cache/strata", None).unwrap(),
            PathBuf::from("/var/cache/strata"),
            "an absolute path needs no working directory"
        );
        // What the bridge checks: absolute, and unchanged by normalising.
        // Compared as text: `Path`'s own comparison skips `.` components and trailing
        // slashes, the bridge's does not.
        assert_eq!(
            ok("/var/cache/./strata/").to_str(),
            Some("/var/cache/strata")
        );
        assert_eq!(ok("x//./y/").to_str(), Some("/srv/kafka/x/y"));
    }
}
