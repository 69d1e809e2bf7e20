//! What a restore reads and where each record goes. Pure: a listing in, a plan out.
//!
//! - Archive objects are found by name (`<topic>+<partition>+<offset>.<ext>`) at any depth
//!   under the dump directory, so a restore finds what a dump wrote whatever its time
//!   directories. Objects are grouped by source partition and replayed in first-offset order
//!   (not key order: a late record can open an object in an earlier time directory).
//! - When the dump's time layout is known, an object's time directory bounds what it can hold.
//!   Dump rolls a file as soon as a record of a *later* directory arrives, so every record of
//!   an object is older than the end of its directory: objects whose directory ends at or
//!   before `from` are skipped. A late record (older than the file it lands in) stays in the
//!   open file, so an object whose directory starts at or after `to` may still hold in-range
//!   records; the first such object of each partition is read for them, later ones are
//!   skipped. Objects whose directories do not follow the layout are read whole.
//! - Records are then matched one by one against `[from, to)`.

use crate::config::{Partitioning, TopicSelector};
use crate::format::{FormatSpec, TextOptions};
use crate::layout::{DumpDir, ObjectName, TimeDirFormat};
use crate::store::ObjectMeta;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use std::collections::BTreeMap;

/// Which part of an archive a restore wants.
#[derive(Debug, Clone)]
pub struct Selection<'a> {
    pub directory: &'a DumpDir,
    /// The dump task's time layout, when known: lets the plan skip directories outside the
    /// time range. `None`: objects are found by name alone and read whole.
    pub time_directory: Option<&'a TimeDirFormat>,
    pub time_zone: Tz,
    /// `None`: every archived topic.
    pub topics: Option<&'a TopicSelector>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// One archive object the restore reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedObject {
    pub key: String,
    pub name: ObjectName,
    /// Every file's size together.
    pub size: u64,
    /// The other files of a CDC bundle (same partition and first offset: one table each,
    /// and the messages kept whole); they are read together with `key`.
    pub bundle: Vec<String>,
    /// The UTC span `[start, end)` of the object's time directory; `None` when the layout is
    /// unknown or the object's directories do not follow it.
    pub span: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

/// The objects of one archived topic-partition, in offset order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePartition {
    pub topic: String,
    pub partition: i32,
    pub objects: Vec<PlannedObject>,
}

impl SourcePartition {
    pub fn bytes(&self) -> u64 {
        self.objects.iter().map(|o| o.size).sum()
    }
}

/// Objects of the listing the plan leaves out, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanSkips {
    /// Keys that are not archive objects (foreign files, strata's own `.strata/` records).
    pub not_archive: u64,
    /// Archive names with an extension no format reads (examples kept for the warning).
    pub unknown_format: Vec<String>,
    pub other_topics: u64,
    /// Time directory entirely before `from`.
    pub before_range: u64,
    /// Time directory at or after `to` (beyond the first such object of a partition).
    pub after_range: u64,
    /// Already restored according to the checkpoint.
    pub finished: u64,
}

/// The restore's work: source partitions (largest first) and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub partitions: Vec<SourcePartition>,
    pub skips: PlanSkips,
    /// Archive objects found under the directory, any topic.
    pub archive_objects: u64,
    /// Archive objects whose directories do not follow the known time layout: read whole,
    /// since their time span is unknown.
    pub unplaced: u64,
    /// Every archived topic seen (selected or not), for messages.
    pub archived_topics: Vec<String>,
    /// Highest partition number archived per selected topic (time range and checkpoint
    /// ignored), so a created target topic gets the source's partition count.
    pub max_partition: BTreeMap<String, i32>,
}

impl Plan {
    pub fn objects(&self) -> impl Iterator<Item = &PlannedObject> {
        self.partitions.iter().flat_map(|p| p.objects.iter())
    }

    pub fn object_count(&self) -> u64 {
        self.partitions.iter().map(|p| p.objects.len() as u64).sum()
    }

    pub fn bytes(&self) -> u64 {
        self.partitions.iter().map(SourcePartition::bytes).sum()
    }
}

/// The level under a dump directory where dump keeps its own records (seals, parameters);
/// never archive data.
const STRATA_DIR: &str = ".strata";

/// Builds the plan from a listing under the store root. `finished` tells objects the
/// checkpoint already holds.
pub fn plan(listing: &[ObjectMeta], sel: &Selection<'_>, finished: impl Fn(&str) -> bool) -> Plan {
    let mut out = Plan::default();
    let mut by_partition: BTreeMap<(String, i32), Vec<PlannedObject>> = BTreeMap::new();
    let mut topics = std::collections::BTreeSet::new();
    let prefix = sel.directory.prefix();
    for meta in listing {
        let Some(rest) = meta.key.strip_prefix(&prefix) else {
            out.skips.not_archive += 1;
            continue;
        };
        let (dirs, file) = rest.rsplit_once('/').unwrap_or(("", rest));
        let name = ObjectName::parse(file).filter(|_| !dirs.split('/').any(|l| l == STRATA_DIR));
        let Some(name) = name else {
            out.skips.not_archive += 1;
            continue;
        };
        let span = sel.time_directory.and_then(|fmt| {
            let time_dir = crate::layout::trailing_levels(dirs, fmt.depth())?;
            fmt.parse_dir(time_dir, sel.time_zone)
        });
        if span.is_none() && sel.time_directory.is_some() {
            out.unplaced += 1;
        }
        if FormatSpec::from_extension(&name.extension, TextOptions::default()).is_none() {
            if out.skips.unknown_format.len() < 5 {
                out.skips.unknown_format.push(meta.key.clone());
            }
            continue;
        }
        out.archive_objects += 1;
        topics.insert(name.topic.clone());
        if sel.topics.is_some_and(|t| !t.matches(&name.topic)) {
            out.skips.other_topics += 1;
            continue;
        }
        let max = out.max_partition.entry(name.topic.clone()).or_insert(0);
        *max = (*max).max(name.partition);
        by_partition
            .entry((name.topic.clone(), name.partition))
            .or_default()
            .push(PlannedObject {
                key: meta.key.clone(),
                name,
                size: meta.size,
                bundle: Vec::new(),
                span,
            });
    }
    out.archived_topics = topics.into_iter().collect();
    for ((topic, partition), mut objects) in by_partition {
        objects.sort_by(|a, b| (a.name.first_offset, &a.key).cmp(&(b.name.first_offset, &b.key)));
        let objects = bundles(objects);
        let mut kept = Vec::with_capacity(objects.len());
        let mut boundary_taken = false;
        for o in objects {
            if o.span.zip(sel.from).is_some_and(|((_, end), f)| end <= f) {
                out.skips.before_range += 1;
                continue;
            }
            if o.span.zip(sel.to).is_some_and(|((start, _), t)| start >= t) {
                if boundary_taken {
                    out.skips.after_range += 1;
                    continue;
                }
                boundary_taken = true;
            }
            if finished(&o.key) {
                out.skips.finished += 1;
                continue;
            }
            kept.push(o);
        }
        if !kept.is_empty() {
            out.partitions.push(SourcePartition {
                topic,
                partition,
                objects: kept,
            });
        }
    }
    // Largest partitions first: with a fixed number of workers the run ends sooner.
    out.partitions
        .sort_by(|a, b| b.bytes().cmp(&a.bytes()).then(a.topic.cmp(&b.topic)));
    out
}

/// Joins the files of each CDC bundle (sorted objects of one partition with the same first
/// offset) into one object, read as one.
fn bundles(sorted: Vec<PlannedObject>) -> Vec<PlannedObject> {
    let mut out: Vec<PlannedObject> = Vec::with_capacity(sorted.len());
    for o in sorted {
        match out.last_mut() {
            Some(b) if b.name.first_offset == o.name.first_offset => {
                b.size += o.size;
                b.bundle.push(o.key);
            }
            _ => out.push(o),
        }
    }
    out
}

/// Record timestamps a restore keeps: `[from, to)` in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimeFilter {
    pub from_ms: Option<i64>,
    pub to_ms: Option<i64>,
}

impl TimeFilter {
    pub fn new(from: Option<DateTime<Utc>>, to: Option<DateTime<Utc>>) -> Self {
        Self {
            from_ms: from.map(|t| t.timestamp_millis()),
            to_ms: to.map(|t| t.timestamp_millis()),
        }
    }

    pub fn is_set(&self) -> bool {
        self.from_ms.is_some() || self.to_ms.is_some()
    }

    /// Whether a record is in range. A record without a timestamp (text archives) cannot be
    /// matched; it is kept, so its object's time directory alone decides.
    pub fn keeps(&self, ts: Option<i64>) -> bool {
        let Some(ts) = ts else { return true };
        self.from_ms.is_none_or(|f| ts >= f) && self.to_ms.is_none_or(|t| ts < t)
    }
}

/// The partition a record is sent to: `Some(p)` explicitly, `None` to let the producer's
/// murmur2 partitioner hash the key (null keys go to a random partition).
pub fn choose_partition(mode: Partitioning, archived: i32, target_partitions: i32) -> Option<i32> {
    match mode {
        Partitioning::Original if archived >= 0 && archived < target_partitions => Some(archived),
        _ => None,
    }
}

/// Partitions to create a missing target topic with: the configured count, else the largest
/// archived partition + 1 over every source topic that maps to it.
pub fn partitions_to_create(
    configured: Option<i32>,
    sources: impl IntoIterator<Item = i32>,
) -> i32 {
    configured.unwrap_or_else(|| sources.into_iter().max().map_or(1, |m| m + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(key: &str, size: u64) -> ObjectMeta {
        ObjectMeta {
            key: key.into(),
            size,
            last_modified: None,
        }
    }

    fn ts(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn key(dir: &str, topic: &str, p: i32, off: i64, ext: &str) -> String {
        format!("arch/{dir}/{topic}+{p}+{off:020}.{ext}")
    }

    struct Fixture {
        dir: DumpDir,
        fmt: TimeDirFormat,
        topics: Option<TopicSelector>,
    }

    impl Fixture {
        fn new() -> Self {
            Self {
                dir: DumpDir::parse("arch").unwrap(),
                fmt: TimeDirFormat::parse("yyyy/MM/dd/HH").unwrap(),
                topics: None,
            }
        }
        fn sel(&self, from: Option<&str>, to: Option<&str>) -> Selection<'_> {
            Selection {
                directory: &self.dir,
                time_directory: Some(&self.fmt),
                time_zone: Tz::UTC,
                topics: self.topics.as_ref(),
                from: from.map(ts),
                to: to.map(ts),
            }
        }
    }

    fn keys(p: &Plan) -> Vec<(String, i32, i64)> {
        p.objects()
            .map(|o| (o.name.topic.clone(), o.name.partition, o.name.first_offset))
            .collect()
    }

    #[test]
    fn the_files_of_a_cdc_bundle_are_read_as_one_object() {
        let f = Fixture {
            fmt: TimeDirFormat::parse("yyyy/MM/dd").unwrap(),
            ..Fixture::new()
        };
        // A table per directory level above the time directories, and the kept messages.
        let listing = vec![
            meta(&key("shop.orders/2026/11/29", "t", 0, 0, "parquet"), 10),
            meta(&key("shop.users/2026/11/29", "t", 0, 0, "parquet"), 20),
            meta(&key("_repeats/2026/11/29", "t", 0, 0, "parquet"), 5),
            meta(&key("shop.orders/2026/11/29", "t", 0, 40, "parquet"), 7),
            meta(&key("shop.orders/2026/11/29", "t", 1, 0, "parquet"), 1),
        ];
        let p = plan(&listing, &f.sel(None, None), |_| false);
        let p0 = p.partitions.iter().find(|s| s.partition == 0).unwrap();
        assert_eq!(p0.objects.len(), 2);
        let b = &p0.objects[0];
        assert_eq!(b.key, key("_repeats/2026/11/29", "t", 0, 0, "parquet"));
        assert_eq!(
            b.bundle,
            vec![
                key("shop.orders/2026/11/29", "t", 0, 0, "parquet"),
                key("shop.users/2026/11/29", "t", 0, 0, "parquet")
            ]
        );
        assert_eq!(b.size, 35);
        assert!(
            b.span.is_some(),
            "the time directory is found under the table level"
        );
        assert!(p0.objects[1].bundle.is_empty());
        assert_eq!(p.object_count(), 3);
    }

    #[test]
    fn groups_by_partition_in_offset_order_not_key_order() {
        let f = Fixture::new();
        // Offset 200 sits in an *earlier* directory (a late record opened it): key order
        // would replay it first.
        let listing = vec![
            meta(&key("2026/11/29/06", "t", 0, 200, "jsonl"), 10),
            meta(&key("2026/11/29/07", "t", 0, 0, "jsonl"), 10),
            meta(&key("2026/11/29/07", "t", 0, 100, "jsonl"), 10),
            meta(&key("2026/11/29/07", "t", 1, 5, "parquet"), 100),
        ];
        let p = plan(&listing, &f.sel(None, None), |_| false);
        assert_eq!(p.partitions.len(), 2);
        assert_eq!(p.partitions[0].partition, 1, "largest partition first");
        let offsets: Vec<i64> = p.partitions[1]
            .objects
            .iter()
            .map(|o| o.name.first_offset)
            .collect();
        assert_eq!(offsets, vec![0, 100, 200]);
        assert_eq!(p.archive_objects, 4);
        assert_eq!(p.max_partition.get("t"), Some(&1));
    }

    #[test]
    fn foreign_and_unknown_objects_are_counted_not_read() {
        let f = Fixture::new();
        let listing = vec![
            meta("arch/README.md", 1),
            meta("other/2026/11/29/07/t+0+00000000000000000000.jsonl", 1),
            meta("arch/.strata/seals/t/0/00000000000000000000/tag", 1),
            meta("arch/.strata/t+0+00000000000000000000.jsonl", 1),
            meta(&key("2026/11/29/07", "t", 0, 0, "jsonl.tmp"), 1),
            meta(&key("2026/11/29/07", "t", 0, 0, "txt.gz"), 1),
        ];
        let p = plan(&listing, &f.sel(None, None), |_| false);
        assert_eq!(p.skips.not_archive, 4);
        assert_eq!(p.skips.unknown_format.len(), 1);
        assert_eq!(keys(&p), vec![("t".into(), 0, 0)]);
        assert_eq!(p.unplaced, 0);
    }

    #[test]
    fn archives_are_found_at_any_depth_and_read_whole_outside_the_layout() {
        let f = Fixture::new();
        // Another layout (day directories), a deeper dump directory and the bucket root
        // level: all found by name; only the one that follows the layout gets a span.
        let listing = vec![
            meta("arch/2026/11/29/t+0+00000000000000000000.jsonl", 1),
            meta(
                "arch/team/x/2026/11/29/07/t+0+00000000000000000010.jsonl",
                1,
            ),
            meta("arch/t+0+00000000000000000020.jsonl", 1),
            meta("arch/2026/11/29/xx/t+0+00000000000000000030.jsonl", 1),
        ];
        let from = Some("2026-11-30T00:00:00Z");
        let p = plan(&listing, &f.sel(from, None), |_| false);
        let offs: Vec<i64> = keys(&p).into_iter().map(|k| k.2).collect();
        assert_eq!(
            offs,
            vec![0, 20, 30],
            "the placed hour 07 ends before `from`"
        );
        assert_eq!(p.skips.before_range, 1);
        assert_eq!(p.unplaced, 3);
        assert_eq!(p.archive_objects, 4);

        // Without a layout nothing is skipped by directory and nothing counts as unplaced.
        let sel = Selection {
            time_directory: None,
            ..f.sel(from, None)
        };
        let p = plan(&listing, &sel, |_| false);
        assert_eq!(p.object_count(), 4);
        assert_eq!(p.unplaced, 0);
        assert!(p.objects().all(|o| o.span.is_none()));
    }

    #[test]
    fn topic_selection() {
        let mut f = Fixture::new();
        f.topics = Some(TopicSelector::List(vec!["keep".into()]));
        let listing = vec![
            meta(&key("2026/11/29/07", "keep", 0, 0, "jsonl"), 1),
            meta(&key("2026/11/29/07", "drop", 3, 0, "jsonl"), 1),
        ];
        let p = plan(&listing, &f.sel(None, None), |_| false);
        assert_eq!(keys(&p), vec![("keep".into(), 0, 0)]);
        assert_eq!(p.skips.other_topics, 1);
        assert_eq!(p.archived_topics, vec!["drop".to_string(), "keep".into()]);
        assert!(!p.max_partition.contains_key("drop"));
    }

    #[test]
    fn time_range_skips_what_cannot_match_and_keeps_one_boundary_object() {
        let f = Fixture::new();
        let listing = vec![
            meta(&key("2026/11/29/05", "t", 0, 0, "jsonl"), 1),
            meta(&key("2026/11/29/06", "t", 0, 10, "jsonl"), 1),
            meta(&key("2026/11/29/07", "t", 0, 20, "jsonl"), 1),
            meta(&key("2026/11/29/08", "t", 0, 30, "jsonl"), 1),
            meta(&key("2026/11/29/09", "t", 0, 40, "jsonl"), 1),
            meta(&key("2026/11/29/10", "t", 0, 50, "jsonl"), 1),
        ];
        // [06:30, 08:00): 05 ends before; 06 and 07 overlap; 08 starts at `to` but may hold
        // late records; 09 and 10 are skipped.
        let p = plan(
            &listing,
            &f.sel(Some("2026-11-29T06:30:00Z"), Some("2026-11-29T08:00:00Z")),
            |_| false,
        );
        let offs: Vec<i64> = keys(&p).into_iter().map(|k| k.2).collect();
        assert_eq!(offs, vec![10, 20, 30]);
        assert_eq!(p.skips.before_range, 1);
        assert_eq!(p.skips.after_range, 2);

        // A directory ending exactly at `from` cannot hold a record >= from.
        let p = plan(&listing, &f.sel(Some("2026-11-29T06:00:00Z"), None), |_| {
            false
        });
        assert_eq!(p.skips.before_range, 1);
        assert_eq!(p.object_count(), 5);
    }

    #[test]
    fn time_zone_of_the_directories_is_respected() {
        let dir = DumpDir::parse("arch").unwrap();
        let fmt = TimeDirFormat::parse("yyyy/MM/dd").unwrap();
        let sel = Selection {
            directory: &dir,
            time_directory: Some(&fmt),
            time_zone: chrono_tz::Asia::Tokyo,
            topics: None,
            from: Some(ts("2026-11-29T15:00:00Z")), // 2026-11-30 00:00 in Tokyo
            to: None,
        };
        let listing = vec![
            meta("arch/2026/11/29/t+0+00000000000000000000.jsonl", 1),
            meta("arch/2026/11/30/t+0+00000000000000000010.jsonl", 1),
        ];
        let p = plan(&listing, &sel, |_| false);
        assert_eq!(p.skips.before_range, 1);
        assert_eq!(p.object_count(), 1);
    }

    #[test]
    fn finished_objects_are_left_out_after_time_selection() {
        let f = Fixture::new();
        let a = key("2026/11/29/07", "t", 0, 0, "jsonl");
        let b = key("2026/11/29/08", "t", 0, 10, "jsonl");
        let c = key("2026/11/29/09", "t", 0, 20, "jsonl");
        let listing = vec![meta(&a, 1), meta(&b, 1), meta(&c, 1)];
        // b is the boundary object; finishing it must not promote c to boundary.
        let p = plan(&listing, &f.sel(None, Some("2026-11-29T08:00:00Z")), |k| {
            k == b
        });
        assert_eq!(keys(&p), vec![("t".into(), 0, 0)]);
        assert_eq!(p.skips.finished, 1);
        assert_eq!(p.skips.after_range, 1);
        let all_done = plan(&listing, &f.sel(None, None), |_| true);
        assert!(all_done.partitions.is_empty());
        assert_eq!(all_done.skips.finished, 3);
        assert_eq!(all_done.archive_objects, 3);
    }

    #[test]
    fn empty_directory_prefix_lists_the_root() {
        let dir = DumpDir::default();
        let fmt = TimeDirFormat::parse("yyyy").unwrap();
        let sel = Selection {
            directory: &dir,
            time_directory: Some(&fmt),
            time_zone: Tz::UTC,
            topics: None,
            from: None,
            to: None,
        };
        let p = plan(
            &[meta("2026/t+2+00000000000000000007.parquet", 3)],
            &sel,
            |_| false,
        );
        assert_eq!(keys(&p), vec![("t".into(), 2, 7)]);
    }

    #[test]
    fn time_filter_is_half_open_and_keeps_untimed_records() {
        let f = TimeFilter {
            from_ms: Some(100),
            to_ms: Some(200),
        };
        assert!(!f.keeps(Some(99)));
        assert!(f.keeps(Some(100)));
        assert!(f.keeps(Some(199)));
        assert!(!f.keeps(Some(200)));
        assert!(f.keeps(None));
        assert!(TimeFilter::default().keeps(Some(i64::MIN)));
        assert!(!TimeFilter::default().is_set());
    }

    #[test]
    fn partition_choice() {
        use Partitioning::*;
        assert_eq!(choose_partition(Original, 2, 3), Some(2));
        assert_eq!(choose_partition(Original, 3, 3), None, "missing: key hash");
        assert_eq!(choose_partition(Original, -1, 3), None);
        assert_eq!(choose_partition(KeyHash, 0, 3), None);
        assert_eq!(partitions_to_create(None, [0, 5, 2]), 6);
        assert_eq!(partitions_to_create(Some(2), [0, 5]), 2);
        assert_eq!(partitions_to_create(None, []), 1);
    }
}
