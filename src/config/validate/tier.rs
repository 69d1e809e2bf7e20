//! `[tier]`: the tier service's address, chunking and cache.

use super::*;

pub(super) fn tier(cx: &mut Ctx<'_>, raw: RawTier) -> TierConfig {
    cx.unknown("tier", &raw.unknown, TIER_KEYS);
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
    if !listen.ip().is_loopback() {
        cx.push("tier.listen", format!("{listen} is not a loopback address; the bridge and strata tier run on the same host, keep it on 127.0.0.1"));
    }
    let prefix_text = cx
        .text("tier.prefix", &raw.prefix)
        .unwrap_or_else(|| defaults::TIER_PREFIX.to_string());
    let prefix = crate::layout::DumpDir::parse(&prefix_text).unwrap_or_else(|e| {
        cx.push("tier.prefix", format!("{prefix_text:?} {e}"));
        crate::layout::DumpDir::default()
    });
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
    let upload_concurrency = raw
        .upload_concurrency
        .unwrap_or(defaults::UPLOAD_CONCURRENCY);
    if upload_concurrency == 0 {
        cx.push("tier.upload_concurrency", "must be at least 1");
    }
    TierConfig {
        listen,
        prefix,
        chunk_size,
        compress_chunks,
        cache_dir: cx.text("tier.cache_dir", &raw.cache_dir).map(PathBuf::from),
        cache_size,
        prefetch_chunks: raw.prefetch_chunks.unwrap_or(defaults::PREFETCH_CHUNKS),
        upload_concurrency: upload_concurrency.max(1),
    }
}
