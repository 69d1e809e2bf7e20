//! Tier metrics (Prometheus names; labels carry only operation names, never keys or secrets).

use std::future::Future;
use std::time::Instant;

pub const BYTES_COPIED: &str = "strata_tier_bytes_copied_total";
pub const BYTES_FETCHED: &str = "strata_tier_bytes_fetched_total";
pub const BYTES_HANDED_OFF: &str = "strata_tier_bytes_handed_off_total";
pub const CACHE_HITS: &str = "strata_tier_cache_hits_total";
pub const CACHE_MISSES: &str = "strata_tier_cache_misses_total";
pub const PREFETCHES: &str = "strata_tier_prefetches_total";
pub const STORE_SECONDS: &str = "strata_tier_store_seconds";
pub const ERRORS: &str = "strata_tier_errors_total";
pub const REJECTED: &str = "strata_tier_rejected_total";
pub const CLEANED: &str = "strata_tier_incomplete_uploads_removed_total";

/// Registers help texts; call once at start.
pub fn describe() {
    metrics::describe_counter!(
        BYTES_COPIED,
        "Segment bytes (log and indexes) read from the broker's files and stored"
    );
    metrics::describe_counter!(BYTES_FETCHED, "Segment bytes served to the broker");
    metrics::describe_counter!(
        BYTES_HANDED_OFF,
        "Of those, bytes the bridge read from cache files named in a handoff answer"
    );
    metrics::describe_counter!(
        CACHE_HITS,
        "Chunk reads answered by the chunk cache or by a load already running"
    );
    metrics::describe_counter!(
        CACHE_MISSES,
        "Chunk reads that had to fetch the chunk from the object store"
    );
    metrics::describe_counter!(
        PREFETCHES,
        "Chunk fetches started ahead of a sequential reader"
    );
    metrics::describe_histogram!(
        STORE_SECONDS,
        metrics::Unit::Seconds,
        "Object store request latency by operation"
    );
    metrics::describe_counter!(ERRORS, "Failed bridge requests by operation");
    metrics::describe_counter!(
        REJECTED,
        "Requests refused before any work: reason auth, content_type, too_large, slow_body, bad_request, or busy (a concurrency cap)"
    );
    metrics::describe_counter!(
        CLEANED,
        "Incomplete uploads (and staging files) a crash left behind, removed at start"
    );
}

pub fn copied(bytes: u64) {
    metrics::counter!(BYTES_COPIED).increment(bytes);
}

pub fn fetched(bytes: u64) {
    metrics::counter!(BYTES_FETCHED).increment(bytes);
}

pub fn handed_off(bytes: u64) {
    metrics::counter!(BYTES_HANDED_OFF).increment(bytes);
}

pub fn cache_hit() {
    metrics::counter!(CACHE_HITS).increment(1);
}

pub fn cache_miss() {
    metrics::counter!(CACHE_MISSES).increment(1);
}

pub fn prefetch() {
    metrics::counter!(PREFETCHES).increment(1);
}

pub fn rejected(op: &'static str, reason: &'static str) {
    metrics::counter!(REJECTED, "op" => op, "reason" => reason).increment(1);
}

pub fn cleaned(n: u64) {
    metrics::counter!(CLEANED).increment(n);
}

pub fn error(op: &'static str) {
    metrics::counter!(ERRORS, "op" => op).increment(1);
}

/// Awaits an object store call and records its latency under `op`.
pub async fn timed<T>(op: &'static str, call: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = call.await;
    metrics::histogram!(STORE_SECONDS, "op" => op).record(started.elapsed().as_secs_f64());
    out
}
