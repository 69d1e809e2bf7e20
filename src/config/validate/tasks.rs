//! `[[tasks]]`: dump tasks, and the checks across tasks.

use super::store::bucket_name_problem;
use super::*;

pub(super) fn task(
    cx: &mut Ctx<'_>,
    k: &str,
    raw: &RawTask,
    store: &StoreConfig,
) -> Option<DumpTask> {
    cx.unknown(k, &raw.unknown, &task_keys());
    let before = cx.issues.len();
    if let Some(kind) = cx.text(&format!("{k}.type"), &raw.kind) {
        if kind != "dump" {
            cx.push(
                format!("{k}.type"),
                format!("{kind:?} is not a task type; use \"dump\" or \"replicate\""),
            );
        }
    }
    let name = match cx.text(&format!("{k}.name"), &raw.name) {
        None => {
            cx.push(
                format!("{k}.name"),
                "is missing; every task needs a name (it also names the consumer group)",
            );
            None
        }
        Some(n) => TaskName::parse(&n)
            .map_err(|m| cx.push(format!("{k}.name"), m))
            .ok(),
    };
    let topics = topic_selector(cx, k, &raw.topics, &raw.topic_regex, true);
    let start_offset = start_offset(cx, k, &raw.start_offset);
    let interval = raw
        .dump_interval_secs
        .unwrap_or(defaults::DUMP_INTERVAL_SECS);
    if interval == 0 || interval > 86_400 {
        cx.push(
            format!("{k}.dump_interval_secs"),
            format!("{interval} is outside 1..=86400 seconds"),
        );
    }
    let task_store = match cx.text(&format!("{k}.bucket"), &raw.bucket) {
        None => store.clone(),
        Some(b) => {
            if !matches!(store.url, StoreUrl::S3 { .. }) {
                cx.push(
                    format!("{k}.bucket"),
                    "applies to s3:// stores only; store.url is a file:// directory",
                );
            } else if let Some(p) = bucket_name_problem(&b) {
                cx.push(format!("{k}.bucket"), p);
            }
            store.with_bucket(&b)
        }
    };
    let directory = cx
        .text(&format!("{k}.directory"), &raw.directory)
        .unwrap_or_default();
    let directory = crate::layout::DumpDir::parse(&directory).unwrap_or_else(|e| {
        cx.push(format!("{k}.directory"), format!("{directory:?} {e}"));
        crate::layout::DumpDir::default()
    });
    let time_directory = time_directory(cx, &format!("{k}.time_directory"), &raw.time_directory);
    let time_zone = time_zone(cx, &format!("{k}.time_zone"), &raw.time_zone);
    let time_source = cx.choice(
        &format!("{k}.time_source"),
        &raw.time_source,
        TimeSource::Record,
        |s| match s {
            "record" => Some(TimeSource::Record),
            "dump" => Some(TimeSource::Dump),
            _ => None,
        },
        "\"record\" (exactly once) or \"dump\" (at least once)",
    );
    let kind = cx.choice(
        &format!("{k}.format"),
        &raw.format,
        FormatKind::Text,
        |s| s.parse().ok(),
        FormatKind::NAMES,
    );
    let compression = cx.choice(
        &format!("{k}.compression"),
        &raw.compression,
        FormatSpec::default_compression(kind),
        |s| s.parse().ok(),
        "\"none\", \"gzip\", \"zstd\" or \"snappy\"",
    );
    let text = text_options(
        cx,
        k,
        &raw.record_delimiter,
        raw.store_key,
        &raw.key_separator,
    );
    if kind != FormatKind::Text
        && (raw.record_delimiter.is_some()
            || raw.key_separator.is_some()
            || raw.store_key.is_some())
    {
        cx.push(format!("{k}.record_delimiter"), format!("record_delimiter, store_key and key_separator apply to format = \"text\" only; format \"{}\" keeps record boundaries and keys itself", kind.as_str()));
    }
    let format = FormatSpec::new(kind, compression, text)
        .map_err(|e| cx.push(format!("{k}.compression"), e.to_string()))
        .ok();
    let max_file_size = cx.size(
        &format!("{k}.max_file_size"),
        &raw.max_file_size,
        defaults::MAX_FILE_SIZE,
    );
    if max_file_size < ByteSize::mib(1) || max_file_size > ByteSize(4 << 30) {
        cx.push(
            format!("{k}.max_file_size"),
            format!("{max_file_size} is outside 1MiB..=4GiB"),
        );
    }
    let refresh = raw
        .topic_refresh_secs
        .unwrap_or(defaults::TOPIC_REFRESH_SECS);
    if refresh == 0 {
        cx.push(format!("{k}.topic_refresh_secs"), "must be at least 1");
    }
    if raw.topic_refresh_secs.is_some() && raw.topic_regex.is_none() {
        cx.push(format!("{k}.topic_refresh_secs"), "applies to topic_regex only: a topic list is watched by the consumer itself; remove it");
    }
    let cdc = raw.cdc.as_ref().map(|c| cdc_options(cx, k, c));
    if cdc.is_some() {
        if kind != FormatKind::Parquet {
            cx.push(
                format!("{k}.cdc"),
                format!("CDC tables are written as Parquet; set format = \"parquet\" (this task has \"{}\")", kind.as_str()),
            );
        }
        if time_source == TimeSource::Dump {
            cx.push(
                format!("{k}.time_source"),
                "a CDC task places changes by their record's time (exactly once); remove time_source = \"dump\"",
            );
        }
    }
    if cx.issues.len() > before {
        return None;
    }
    Some(DumpTask {
        name: name?,
        topics: topics?,
        start_offset,
        interval: Duration::from_secs(interval),
        store: task_store,
        directory,
        time_directory,
        time_zone,
        time_source,
        format: format?,
        max_file_size,
        topic_refresh: Duration::from_secs(refresh.max(1)),
        allow_retention_gaps: raw.allow_retention_gaps.unwrap_or(false),
        cdc,
    })
}

/// Ids per partition remembered to tell repeats apart, by default: a restart of the transfer
/// service re-sends seconds of changes, far fewer than this.
const DEFAULT_REPEAT_WINDOW: u64 = 100_000;

fn cdc_options(cx: &mut Ctx<'_>, k: &str, raw: &RawCdc) -> CdcOptions {
    let k = format!("{k}.cdc");
    cx.unknown(&k, &raw.unknown, CDC_KEYS);
    let time_zone = time_zone(cx, &format!("{k}.time_zone"), &raw.time_zone);
    let window = raw.repeat_window.unwrap_or(DEFAULT_REPEAT_WINDOW);
    if window > 10_000_000 {
        cx.push(
            format!("{k}.repeat_window"),
            format!("{window} is more than 10000000 ids per partition; each costs about 100 bytes of memory"),
        );
    }
    let on_malformed = cx.choice(
        &format!("{k}.on_malformed"),
        &raw.on_malformed,
        OnMalformed::Keep,
        |s| match s {
            "keep" => Some(OnMalformed::Keep),
            "fail" => Some(OnMalformed::Fail),
            _ => None,
        },
        "\"keep\" (stored under _errors/ and counted) or \"fail\" (the task stops naming the offset)",
    );
    let mut types = BTreeMap::new();
    for (table, cols) in raw.types.iter().flatten() {
        let mut parsed = BTreeMap::new();
        for (col, ty) in cols {
            match ty.parse::<crate::cdc::ColumnType>() {
                Ok(t) => {
                    parsed.insert(col.clone(), t);
                }
                Err(e) => cx.push(format!("{k}.types.{table}.{col}"), e),
            }
        }
        types.insert(table.clone(), parsed);
    }
    CdcOptions {
        time_zone,
        repeat_window: window as usize,
        on_malformed,
        types,
    }
}

/// Two tasks writing the same topic into the same place would overwrite each other's objects.
pub(super) fn check_task_overlaps(cx: &mut Ctx<'_>, tasks: &[DumpTask]) {
    for (i, a) in tasks.iter().enumerate() {
        for b in &tasks[i + 1..] {
            let same_place = a.store.url == b.store.url && a.directory == b.directory;
            let shared = match (&a.topics, &b.topics) {
                (TopicSelector::List(x), TopicSelector::List(y)) => {
                    x.iter().find(|t| y.contains(t)).cloned()
                }
                (x, y) if x == y => Some(x.to_string()),
                _ => None,
            };
            if let (true, Some(t)) = (same_place, shared) {
                cx.push("tasks", format!("tasks {:?} and {:?} both dump {t} into the same bucket and directory; give one another directory", a.name.as_str(), b.name.as_str()));
            }
        }
    }
}
