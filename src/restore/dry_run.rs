//! `--dry-run`: read and decode every planned object to count its records and find its time
//! span, and print what a restore would do. Writes nothing: no topic, no checkpoint, no Kafka
//! connection at all.

use super::plan::{Plan, TimeFilter};
use super::{CorruptObject, RestoreError, RestoreSummary};
use crate::config::RestoreConfig;
use crate::format::{self, FormatSpec};
use crate::store::ObjectStore;
use chrono::{DateTime, SecondsFormat, Utc};
use futures::StreamExt;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Objects decoded at once.
const CONCURRENCY: usize = 4;

/// One object a restore would read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    pub location: String,
    pub topic: String,
    pub partition: i32,
    pub size: u64,
    pub records: u64,
    /// Records whose timestamp is in `[from, to)` (all of them without a range).
    pub in_range: u64,
    pub first_timestamp: Option<i64>,
    pub last_timestamp: Option<i64>,
    pub corrupt: Option<CorruptObject>,
}

/// Source offsets of the records a restore would send, per archived `(topic, partition)`.
pub(super) type Pending = BTreeMap<(String, i32), Vec<i64>>;

/// Reads the planned objects into `summary`; with `want_offsets`, also returns the offsets of
/// the records in range (sorted, for the groups table).
pub(super) async fn run(
    cfg: &RestoreConfig,
    store: Arc<dyn ObjectStore>,
    plan: &Plan,
    summary: &mut RestoreSummary,
    want_offsets: bool,
) -> Result<Pending, RestoreError> {
    let filter = TimeFilter::new(cfg.from, cfg.to);
    // The restore's budget: objects decode one after another when they are large.
    let budget = Arc::new(super::replay::Budget::new(cfg.memory_budget.0));
    let jobs = plan.objects().cloned().map(|o| {
        let store = store.clone();
        let text = cfg.text.clone();
        let budget = budget.clone();
        async move {
            let location = store.location(&o.key);
            let mut files = Vec::with_capacity(1 + o.bundle.len());
            for key in std::iter::once(&o.key).chain(&o.bundle) {
                let data = store
                    .get(key)
                    .await
                    .map_err(|source| RestoreError::Read { source })?;
                files.push((store.location(key), data));
            }
            let (name, size) = (o.name.clone(), o.size);
            let loc = location.clone();
            tokio::task::spawn_blocking(move || {
                let mut lease = budget.acquire(size, || false);
                let mut kept = Vec::new();
                let mut listed = ListedObject {
                    location: loc.clone(),
                    topic: name.topic.clone(),
                    partition: name.partition,
                    size,
                    records: 0,
                    in_range: 0,
                    first_timestamp: None,
                    last_timestamp: None,
                    corrupt: None,
                };
                let decoded = FormatSpec::from_extension(&name.extension, text)
                    .ok_or_else(|| {
                        (
                            loc.clone(),
                            format::DecodeError {
                                at: None,
                                message: "unknown extension".into(),
                            },
                        )
                    })
                    .and_then(|spec| {
                        crate::cdc::decode_files(
                            &spec,
                            &name.topic,
                            files,
                            budget.decode_limit(size),
                        )
                    });
                match decoded {
                    Ok(records) => {
                        lease.resize(records.iter().map(format::Record::heap_bytes).sum());
                        listed.records = records.len() as u64;
                        for r in &records {
                            let keeps = filter.keeps(r.timestamp);
                            listed.in_range += u64::from(keeps);
                            if let (true, true, Some(o)) = (want_offsets, keeps, r.offset) {
                                kept.push(o);
                            }
                            if let Some(t) = r.timestamp {
                                listed.first_timestamp =
                                    Some(listed.first_timestamp.map_or(t, |m| m.min(t)));
                                listed.last_timestamp =
                                    Some(listed.last_timestamp.map_or(t, |m| m.max(t)));
                            }
                        }
                    }
                    Err((location, e)) => {
                        listed.corrupt = Some(CorruptObject {
                            location,
                            at: e.at,
                            detail: e.message,
                        })
                    }
                }
                (listed, kept)
            })
            .await
            .map_err(|e| RestoreError::Internal(format!("{location}: decoder: {e}")))
        }
    });
    let mut results = futures::stream::iter(jobs).buffered(CONCURRENCY);
    let mut pending = Pending::new();
    while let Some(listed) = results.next().await {
        let (listed, kept) = listed?;
        if !kept.is_empty() {
            pending
                .entry((listed.topic.clone(), listed.partition))
                .or_default()
                .extend(kept);
        }
        if let Some(c) = &listed.corrupt {
            summary.corrupt.push(c.clone());
        } else {
            summary.objects += 1;
            summary.records += listed.in_range;
            summary.records_out_of_range += listed.records - listed.in_range;
        }
        summary.listing.push(listed);
    }
    for offsets in pending.values_mut() {
        offsets.sort_unstable();
        offsets.dedup();
    }
    Ok(pending)
}

fn ts(t: Option<i64>) -> String {
    t.and_then(DateTime::<Utc>::from_timestamp_millis)
        .map_or("-".to_string(), |d| {
            d.to_rfc3339_opts(SecondsFormat::Millis, true)
        })
}

/// The dry-run report: one line per object, then totals.
pub(super) fn render(f: &mut fmt::Formatter<'_>, s: &RestoreSummary) -> fmt::Result {
    writeln!(
        f,
        "dry run: nothing is written; these objects would be read, in this order per partition"
    )?;
    writeln!(
        f,
        "{:>9} {:>9} {:>10}  {:<24} {:<24}  OBJECT",
        "RECORDS", "IN RANGE", "BYTES", "FIRST TIMESTAMP", "LAST TIMESTAMP"
    )?;
    let (mut first, mut last): (Option<i64>, Option<i64>) = (None, None);
    let mut bytes = 0u64;
    for o in &s.listing {
        bytes += o.size;
        match &o.corrupt {
            Some(c) => writeln!(
                f,
                "{:>9} {:>9} {:>10}  CORRUPT{}: {}  {}",
                "-",
                "-",
                o.size,
                c.at.map_or(String::new(), |a| format!(" at byte {a}")),
                c.detail,
                o.location
            )?,
            None => writeln!(
                f,
                "{:>9} {:>9} {:>10}  {:<24} {:<24}  {}",
                o.records,
                o.in_range,
                o.size,
                ts(o.first_timestamp),
                ts(o.last_timestamp),
                o.location
            )?,
        }
        first = match (first, o.first_timestamp) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        last = match (last, o.last_timestamp) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }
    writeln!(
        f,
        "total: {} object(s), {} bytes, {} record(s) would be restored ({} outside the time range), time span {} .. {}",
        s.listing.len(),
        bytes,
        s.records,
        s.records_out_of_range,
        ts(first),
        ts(last)
    )?;
    if !s.corrupt.is_empty() {
        writeln!(
            f,
            "{} corrupt object(s): the restore would stop at the first one unless --skip-corrupt is given",
            s.corrupt.len()
        )?;
    }
    Ok(())
}
