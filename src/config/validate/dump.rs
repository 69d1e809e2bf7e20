//! A dump task (`[[tasks]]` without `type`, or `type = "dump"`), its `[tasks.cdc]`, and the
//! check that no two dump tasks write the same objects.

use super::store::bucket_name_problem;
use super::*;

pub(super) fn task(
    cx: &mut Ctx<'_>,
    k: &str,
    raw: &RawDumpTask,
    store: &StoreConfig,
) -> Option<DumpTask> {
    let before = cx.issues.len();
    let key = |f: &str| format!("{k}.{f}");
    let name = tasks::name(cx, k, &raw.name);
    let topics = task_topics(cx, k, &raw.topics, &raw.topic_regex, &raw.exclude_topics);
    let start_offset = start_offset(cx, k, &raw.start_offset);
    let interval = interval(cx, k, raw.dump_interval_secs);
    let store = task_store(cx, k, &raw.bucket, store);
    let directory = dump_dir(cx, &key("directory"), &raw.directory, "");
    let time_directory = time_directory(cx, &key("time_directory"), &raw.time_directory);
    let time_zone = time_zone(cx, &key("time_zone"), &raw.time_zone);
    let time_source = time_source(cx, k, &raw.time_source);
    let iceberg_format = raw.format.as_deref() == Some("iceberg");
    let (kind, format) = format(cx, k, raw, iceberg_format);
    let max_file_size = max_file_size(cx, k, &raw.max_file_size);
    let topic_refresh = tasks::topic_refresh(cx, k, raw.topic_refresh_secs);
    if raw.topic_refresh_secs.is_some() && raw.topic_regex.is_none() {
        cx.push(key("topic_refresh_secs"), "applies to topic_regex only: a topic list is watched by the consumer itself; remove it");
    }
    let state = state(cx, k, raw);
    let cdc = raw.cdc.as_ref().map(|c| cdc_options(cx, k, c));
    if cdc.is_some() {
        cdc_fits(cx, k, kind, time_source);
    }
    let iceberg = iceberg_options(cx, k, raw, iceberg_format, &store);
    if cx.issues.len() > before {
        return None;
    }
    Some(DumpTask {
        name: name?,
        topics: topics?,
        start_offset,
        interval,
        store,
        directory,
        time_directory,
        time_zone,
        time_source,
        format: format?,
        max_file_size,
        topic_refresh,
        allow_retention_gaps: raw.allow_retention_gaps.unwrap_or(false),
        state: state?,
        cdc,
        iceberg,
    })
}

/// `state`, `state_interval_secs`, `groups_regex`: the task's cluster state snapshots.
fn state(cx: &mut Ctx<'_>, k: &str, raw: &RawDumpTask) -> Option<StateSettings> {
    let mode = cx.choice(
        &format!("{k}.state"),
        &raw.state,
        StateMode::BestEffort,
        |s| match s {
            "best_effort" => Some(StateMode::BestEffort),
            "required" => Some(StateMode::Required),
            "off" => Some(StateMode::Off),
            _ => None,
        },
        "\"best_effort\" (the default: what cannot be read is a warning), \"required\" (it fails the task) or \"off\"",
    );
    let secs = raw
        .state_interval_secs
        .unwrap_or(defaults::STATE_INTERVAL_SECS);
    if !(60..=86_400).contains(&secs) {
        cx.push(
            format!("{k}.state_interval_secs"),
            format!("{secs} is outside 60..=86400 seconds"),
        );
        return None;
    }
    let groups = match &raw.groups_regex {
        None => None,
        Some(r) => match regex::Regex::new(&format!("^(?:{r})$")) {
            Ok(re) => Some(re),
            Err(e) => {
                cx.push(
                    format!("{k}.groups_regex"),
                    format!("is not a regular expression: {e}"),
                );
                return None;
            }
        },
    };
    Some(StateSettings {
        mode,
        interval: Duration::from_secs(secs),
        groups,
    })
}

fn interval(cx: &mut Ctx<'_>, k: &str, secs: Option<u64>) -> Duration {
    let secs = secs.unwrap_or(defaults::DUMP_INTERVAL_SECS);
    if secs == 0 || secs > 86_400 {
        cx.push(
            format!("{k}.dump_interval_secs"),
            format!("{secs} is outside 1..=86400 seconds"),
        );
    }
    Duration::from_secs(secs)
}

/// `[store]`, or the same store with the task's own `bucket`.
fn task_store(
    cx: &mut Ctx<'_>,
    k: &str,
    bucket: &Option<String>,
    store: &StoreConfig,
) -> StoreConfig {
    let key = format!("{k}.bucket");
    let Some(b) = cx.text(&key, bucket) else {
        return store.clone();
    };
    if !matches!(store.url, StoreUrl::S3 { .. }) {
        cx.push(
            key,
            "applies to s3:// stores only; store.url is a file:// directory",
        );
    } else if let Some(p) = bucket_name_problem(&b) {
        cx.push(key, p);
    }
    store.with_bucket(&b)
}

fn time_source(cx: &mut Ctx<'_>, k: &str, raw: &Option<String>) -> TimeSource {
    cx.choice(
        &format!("{k}.time_source"),
        raw,
        TimeSource::Record,
        |s| match s {
            "record" => Some(TimeSource::Record),
            "dump" => Some(TimeSource::Dump),
            _ => None,
        },
        "\"record\" (exactly once) or \"dump\" (at least once)",
    )
}

/// `format`, `compression` and the text format's options; the kind even when the whole is not
/// valid, for the checks that depend on it.
/// `format = "iceberg"` writes Parquet data files.
fn format(
    cx: &mut Ctx<'_>,
    k: &str,
    raw: &RawDumpTask,
    iceberg: bool,
) -> (FormatKind, Option<FormatSpec>) {
    let kind = if iceberg {
        FormatKind::Parquet
    } else {
        cx.choice(
            &format!("{k}.format"),
            &raw.format,
            FormatKind::Text,
            |s| s.parse().ok(),
            "\"text\", \"jsonl\", \"parquet\" or \"iceberg\"",
        )
    };
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
    let text_keys =
        raw.record_delimiter.is_some() || raw.key_separator.is_some() || raw.store_key.is_some();
    if kind != FormatKind::Text && text_keys {
        cx.push(format!("{k}.record_delimiter"), format!("record_delimiter, store_key and key_separator apply to format = \"text\" only; format \"{}\" keeps record boundaries and keys itself", kind.as_str()));
    }
    let spec = FormatSpec::new(kind, compression, text)
        .map_err(|e| cx.push(format!("{k}.compression"), e.to_string()))
        .ok();
    (kind, spec)
}

fn max_file_size(cx: &mut Ctx<'_>, k: &str, raw: &Option<RawSize>) -> ByteSize {
    let key = format!("{k}.max_file_size");
    let size = cx.size(&key, raw, defaults::MAX_FILE_SIZE);
    if size < ByteSize::mib(1) || size > ByteSize(4 << 30) {
        cx.push(key, format!("{size} is outside 1MiB..=4GiB"));
    }
    size
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
    CdcOptions {
        time_zone,
        repeat_window: window as usize,
        on_malformed,
        types: column_types(cx, &k, raw),
    }
}

/// `[tasks.cdc.types]`: declared column types by table and column.
fn column_types(
    cx: &mut Ctx<'_>,
    k: &str,
    raw: &RawCdc,
) -> BTreeMap<String, BTreeMap<String, crate::cdc::ColumnType>> {
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
    types
}

/// CDC tables are Parquet, placed by each change's record time.
fn cdc_fits(cx: &mut Ctx<'_>, k: &str, kind: FormatKind, time_source: TimeSource) {
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

/// `[tasks.iceberg]` of a `format = "iceberg"` task; the keys that place objects by time do not
/// apply (an Iceberg table is partitioned by the day of the record time, in UTC).
fn iceberg_options(
    cx: &mut Ctx<'_>,
    k: &str,
    raw: &RawDumpTask,
    iceberg_format: bool,
    store: &StoreConfig,
) -> Option<IcebergOptions> {
    let key = format!("{k}.iceberg");
    if !iceberg_format {
        if raw.iceberg.is_some() {
            cx.push(
                key,
                "applies to format = \"iceberg\" tasks; set format = \"iceberg\" or remove [tasks.iceberg]",
            );
        }
        return None;
    }
    let default = RawIceberg::default();
    let r = raw.iceberg.as_ref().unwrap_or(&default);
    cx.unknown(&key, &r.unknown, ICEBERG_KEYS);
    for (set, name) in [
        (raw.time_directory.is_some(), "time_directory"),
        (raw.time_zone.is_some(), "time_zone"),
        (raw.time_source.is_some(), "time_source"),
    ] {
        if set {
            cx.push(format!("{k}.{name}"), "does not apply to format = \"iceberg\": a table is partitioned by the day (UTC) of each record's time; remove it");
        }
    }
    let ikey = |f: &str| format!("{key}.{f}");
    let kind = cx
        .text(&ikey("catalog"), &r.catalog)
        .unwrap_or_else(|| "sql".into());
    let only = |cx: &mut Ctx<'_>, set: bool, f: &str, applies: &str| {
        if set {
            cx.push(
                ikey(f),
                format!("applies to catalog = \"{applies}\" only; remove it"),
            );
        }
    };
    let catalog = match kind.as_str() {
        "sql" => {
            only(cx, r.uri.is_some(), "uri", "rest");
            only(cx, r.token.is_some(), "token", "rest");
            only(cx, r.credential.is_some(), "credential", "rest");
            match cx.text(&ikey("catalog_file"), &r.catalog_file) {
                Some(f) if std::path::Path::new(&f).is_absolute() => {
                    Some(IcebergCatalog::Sql { file: f.into() })
                }
                Some(f) => {
                    cx.push(ikey("catalog_file"), format!("{f:?} is not an absolute path; name the SQLite file of the embedded catalog by its full path"));
                    None
                }
                None => {
                    cx.push(ikey("catalog_file"), "is required with catalog = \"sql\": the local SQLite file that holds the catalog, e.g. \"/var/lib/strata/catalog.db\" (created when missing; keep it with the data, it is the tables' truth)");
                    None
                }
            }
        }
        "rest" => {
            only(cx, r.catalog_file.is_some(), "catalog_file", "sql");
            let uri = cx.text(&ikey("uri"), &r.uri);
            let token = cx.secret(&ikey("token"), &r.token);
            let credential = cx.secret(&ikey("credential"), &r.credential);
            match uri {
                Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
                    Some(IcebergCatalog::Rest {
                        uri: u,
                        token,
                        credential,
                    })
                }
                Some(_) => {
                    cx.push(ikey("uri"), "must start with http:// or https://");
                    None
                }
                None => {
                    cx.push(ikey("uri"), "is required with catalog = \"rest\": the catalog's base URL, e.g. \"https://catalog.example.com/api/catalog\"");
                    None
                }
            }
        }
        "glue" => {
            only(cx, r.catalog_file.is_some(), "catalog_file", "sql");
            only(cx, r.uri.is_some(), "uri", "rest");
            if !cfg!(feature = "iceberg-glue") {
                cx.push(ikey("catalog"), "\"glue\" needs a strata built with the cargo feature iceberg-glue (cargo build --features iceberg-glue)");
            }
            Some(IcebergCatalog::Glue)
        }
        other => {
            cx.push(
                ikey("catalog"),
                format!(
                    "{other:?} is not one of \"sql\" (embedded, the default), \"rest\" or \"glue\""
                ),
            );
            None
        }
    };
    let ident = |cx: &mut Ctx<'_>, f: &str, v: &Option<String>, default: &str| {
        let s = cx.text(&ikey(f), v).unwrap_or_else(|| default.to_string());
        let ok = !s.is_empty()
            && s.len() <= 128
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !ok {
            cx.push(
                ikey(f),
                format!("{s:?} must be 1-128 letters, digits, '_' or '-'"),
            );
        }
        s
    };
    let catalog_name = ident(cx, "catalog_name", &r.catalog_name, "strata");
    let namespace = ident(cx, "namespace", &r.namespace, "kafka");
    let warehouse = cx.text(&ikey("warehouse"), &r.warehouse);
    if let Some(w) = &warehouse {
        let root = store.url.to_string();
        if !(w.starts_with("file:///") || w.starts_with("s3://")) {
            cx.push(
                ikey("warehouse"),
                "must be a file:/// or s3:// URL inside the task's store",
            );
        } else if !w.starts_with(root.as_str()) {
            cx.push(ikey("warehouse"), format!("must lie inside the task's store ({root}): strata writes the tables through it, with its settings"));
        }
    }
    if !cfg!(feature = "iceberg") {
        cx.push(key, "format = \"iceberg\" needs a strata built with the cargo feature iceberg (on by default)");
    }
    Some(IcebergOptions {
        catalog: catalog?,
        catalog_name,
        warehouse,
        namespace,
    })
}

/// Two tasks writing the same topic into the same place would overwrite each other's objects.
pub(super) fn check_overlaps(cx: &mut Ctx<'_>, tasks: &[DumpTask]) {
    for (i, a) in tasks.iter().enumerate() {
        for b in &tasks[i + 1..] {
            let same_place = a.store.url == b.store.url && a.directory == b.directory;
            let shared = match (&a.topics.select, &b.topics.select) {
                (TopicSelector::List(x), TopicSelector::List(y)) => x
                    .iter()
                    .find(|t| y.contains(t) && a.topics.matches(t) && b.topics.matches(t))
                    .cloned(),
                (x, y) if x == y => Some(x.to_string()),
                _ => None,
            };
            if let (true, Some(t)) = (same_place, shared) {
                cx.push("tasks", format!("tasks {:?} and {:?} both dump {t} into the same bucket and directory; give one another directory", a.name.as_str(), b.name.as_str()));
            }
        }
    }
}
