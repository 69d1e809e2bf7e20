//! Tier metrics (Prometheus names; labels carry only operation names, never keys or secrets).
//! Their HELP texts are in `telemetry::catalog`.

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
