//! The Kafka offsets an Iceberg table holds, as pure functions: what a snapshot summary says,
//! the rule a commit must pass to land (a zombie's fails), the summary a commit writes, and
//! the names of tables and data files.

use std::collections::{BTreeMap, HashMap};

/// Summary property: the next offset of every partition of the topic written so far
/// (`{"0":12,"3":40}`), carried forward from the parent snapshot by every strata commit.
pub const OFFSETS: &str = "strata.offsets";
/// Summary property: the offsets this commit adds, per partition, `[from, to)`
/// (`{"0":[8,12]}`): what an audit checks for overlaps.
pub const RANGES: &str = "strata.ranges";
/// Summary property: the dump task that made the commit.
pub const TASK: &str = "strata.task";
/// Summary property: the commit's id, by which a retry recognises its own commit.
pub const COMMIT: &str = "strata.commit";

/// Next offset per partition.
pub type Offsets = BTreeMap<i32, i64>;

/// A table an Iceberg task writes, and whose offsets its snapshots carry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TableOf {
    /// A topic's table: its records (a CDC task's: the messages that are not CDC) and, under
    /// [`OFFSETS`], how far the task got in the topic.
    Topic(String),
    /// A CDC source table (`level`: `db[.schema].table`), fed by any number of topics: each
    /// topic's offsets under `strata.offsets.<topic>`.
    Cdc { level: String, topic: String },
}

impl TableOf {
    /// The table's name in the namespace.
    pub fn name(&self) -> String {
        match self {
            Self::Topic(t) => table_name(t),
            Self::Cdc { level, .. } => table_name(level),
        }
    }

    pub fn topic(&self) -> &str {
        match self {
            Self::Topic(t) | Self::Cdc { topic: t, .. } => t,
        }
    }

    /// The summary property of this writer's offsets.
    pub fn offsets_key(&self) -> String {
        match self {
            Self::Topic(_) => OFFSETS.to_string(),
            Self::Cdc { topic, .. } => format!("{OFFSETS}.{topic}"),
        }
    }

    fn ranges_key(&self) -> String {
        match self {
            Self::Topic(_) => RANGES.to_string(),
            Self::Cdc { topic, .. } => format!("{RANGES}.{topic}"),
        }
    }
}

/// What one commit does to one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance {
    /// The table's offset when the writer took the partition (or after its last commit):
    /// `None` when the table held none.
    pub base: Option<i64>,
    /// The first offset of the records this commit adds (`None`: it adds no records, only
    /// moves past transaction markers to a `--once` target).
    pub first: Option<i64>,
    /// The offset after the last record (or the target reached).
    pub next: i64,
}

/// The offsets one snapshot summary holds under `key` ([`TableOf::offsets_key`]): `Ok(None)`
/// when it has none (a snapshot another program made, e.g. a compaction).
pub fn parse(summary: &HashMap<String, String>, key: &str) -> Result<Option<Offsets>, String> {
    let Some(raw) = summary.get(key) else {
        return Ok(None);
    };
    let map: BTreeMap<String, i64> = serde_json::from_str(raw).map_err(|e| {
        format!("the snapshot summary's {key} is not a map of partition to offset: {e}")
    })?;
    let mut out = Offsets::new();
    for (p, o) in map {
        let p: i32 = p
            .parse()
            .map_err(|_| format!("the snapshot summary's {key} names partition {p:?}"))?;
        if o < 0 {
            return Err(format!(
                "the snapshot summary's {key} has offset {o} for partition {p}"
            ));
        }
        out.insert(p, o);
    }
    Ok(Some(out))
}

/// The offsets of the newest snapshot that has any, given the summaries from the current
/// snapshot back through its ancestors. Snapshots other programs add (compaction, expiry)
/// carry none and are looked through.
pub fn newest<'a>(
    summaries: impl IntoIterator<Item = &'a HashMap<String, String>>,
    key: &str,
) -> Result<Offsets, String> {
    for s in summaries {
        if let Some(o) = parse(s, key)? {
            return Ok(o);
        }
    }
    Ok(Offsets::new())
}

/// A commit that may not land: the table's offset of a partition is not where this writer
/// took it. Another member wrote the partition since (this writer lost it without noticing: a
/// zombie), or the table was changed behind strata's back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("partition {partition}: the table's next offset is {}, but this writer started at {}", show(*table), show(*base))]
pub struct Conflict {
    pub partition: i32,
    pub table: Option<i64>,
    pub base: Option<i64>,
}

fn show(o: Option<i64>) -> String {
    o.map_or_else(|| "none".into(), |o| o.to_string())
}

/// The rule: a commit lands on a snapshot only if, for every partition it writes, the
/// snapshot's offset equals the writer's base. Live members of one group write disjoint
/// partitions, so they pass on each other's snapshots; a zombie fails on its new owner's.
pub fn check(table: &Offsets, commit: &BTreeMap<i32, Advance>) -> Result<(), Conflict> {
    for (&partition, a) in commit {
        let at = table.get(&partition).copied();
        if at != a.base {
            return Err(Conflict {
                partition,
                table: at,
                base: a.base,
            });
        }
    }
    Ok(())
}

/// The summary properties of a commit to `of` on a snapshot holding `table`: every
/// partition's next offset carried forward with this commit's, and this commit's ranges.
pub fn summary(
    of: &TableOf,
    table: &Offsets,
    commit: &BTreeMap<i32, Advance>,
    task: &str,
) -> HashMap<String, String> {
    let mut all = table.clone();
    let mut ranges = BTreeMap::new();
    for (&p, a) in commit {
        all.insert(p, a.next);
        if let Some(first) = a.first {
            ranges.insert(p.to_string(), [first, a.next]);
        }
    }
    let all: BTreeMap<String, i64> = all.into_iter().map(|(p, o)| (p.to_string(), o)).collect();
    HashMap::from([
        (
            of.offsets_key(),
            serde_json::to_string(&all).unwrap_or_default(),
        ),
        (
            of.ranges_key(),
            serde_json::to_string(&ranges).unwrap_or_default(),
        ),
        (TASK.to_string(), task.to_string()),
    ])
}

/// The table of a topic: its name with every character other than letters, digits and `_`
/// replaced by `_` (engines quote less; two topics that map to one name are refused at start).
pub fn table_name(topic: &str) -> String {
    topic
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Topics of one task that would share a table: the first pair found.
pub fn clash<'a>(topics: impl IntoIterator<Item = &'a str>) -> Option<(String, String)> {
    let mut seen: HashMap<String, &str> = HashMap::new();
    for t in topics {
        if let Some(other) = seen.insert(table_name(t), t) {
            if other != t {
                return Some((other.to_string(), t.to_string()));
            }
        }
    }
    None
}

/// Days since 1970-01-01 (UTC) of a record time in milliseconds: Iceberg's `day` transform.
pub fn day_of(ts_ms: Option<i64>) -> Option<i32> {
    ts_ms.map(|ms| ms.div_euclid(86_400_000) as i32)
}

/// A data file's path below the table's location. Unique per write (a replay after a crash or
/// a zombie never overwrites a committed file); the day directory mirrors the partition, as
/// engines lay them out.
pub fn data_file_path(
    table_location: &str,
    day: Option<i32>,
    partition: i32,
    first: i64,
    unique: &str,
) -> String {
    let dir = match day {
        Some(d) => chrono::DateTime::from_timestamp(i64::from(d) * 86_400, 0)
            .map_or_else(|| "null".into(), |t| t.format("%Y-%m-%d").to_string()),
        None => "null".into(),
    };
    format!(
        "{}/data/timestamp_day={dir}/{partition:05}-{first:020}-{unique}.parquet",
        table_location.trim_end_matches('/')
    )
}

/// A CDC table's data file path below the table's location (unpartitioned; unique per write
/// as [`data_file_path`]'s).
pub fn cdc_file_path(table_location: &str, partition: i32, first: i64, unique: &str) -> String {
    format!(
        "{}/data/{partition:05}-{first:020}-{unique}.parquet",
        table_location.trim_end_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adv(base: Option<i64>, first: Option<i64>, next: i64) -> Advance {
        Advance { base, first, next }
    }

    #[test]
    fn a_summary_round_trips_and_carries_every_partition_forward() {
        let table = Offsets::from([(0, 10), (1, 7)]);
        let commit = BTreeMap::from([(1, adv(Some(7), Some(7), 12)), (2, adv(None, Some(0), 5))]);
        let s = summary(&TableOf::Topic("t".into()), &table, &commit, "lake");
        assert_eq!(
            parse(&s, OFFSETS).unwrap().unwrap(),
            Offsets::from([(0, 10), (1, 12), (2, 5)])
        );
        assert_eq!(s[RANGES], r#"{"1":[7,12],"2":[0,5]}"#);
        assert_eq!(s[TASK], "lake");
    }

    #[test]
    fn a_commit_without_records_moves_the_offset_but_adds_no_range() {
        let s = summary(
            &TableOf::Topic("t".into()),
            &Offsets::new(),
            &BTreeMap::from([(0, adv(Some(4), None, 6))]),
            "t",
        );
        assert_eq!(s[RANGES], "{}");
        assert_eq!(
            parse(&s, OFFSETS).unwrap().unwrap(),
            Offsets::from([(0, 6)])
        );
    }

    #[test]
    fn the_rule_passes_live_members_and_fails_a_zombie() {
        // Member A wrote partition 0 up to 10 while B wrote partition 1: B's base for 1 holds.
        let table = Offsets::from([(0, 10), (1, 7)]);
        check(&table, &BTreeMap::from([(1, adv(Some(7), Some(7), 9))])).unwrap();
        // A zombie that took partition 0 at 5 finds its new owner's 10 there.
        let e = check(&table, &BTreeMap::from([(0, adv(Some(5), Some(5), 8))])).unwrap_err();
        assert_eq!(
            e,
            Conflict {
                partition: 0,
                table: Some(10),
                base: Some(5)
            }
        );
        assert!(e.to_string().contains("next offset is 10"), "{e}");
        // A partition the table never held must still be unheld.
        check(&table, &BTreeMap::from([(3, adv(None, Some(0), 4))])).unwrap();
        let e = check(
            &Offsets::from([(3, 2)]),
            &BTreeMap::from([(3, adv(None, Some(0), 4))]),
        )
        .unwrap_err();
        assert_eq!(e.table, Some(2));
        assert!(e.to_string().contains("started at none"), "{e}");
    }

    #[test]
    fn offsets_come_from_the_newest_snapshot_that_has_them() {
        let ours = summary(
            &TableOf::Topic("t".into()),
            &Offsets::new(),
            &BTreeMap::from([(0, adv(None, Some(0), 3))]),
            "t",
        );
        let compaction = HashMap::from([("added-data-files".to_string(), "1".to_string())]);
        assert_eq!(
            newest([&compaction, &ours], OFFSETS).unwrap(),
            Offsets::from([(0, 3)])
        );
        assert_eq!(newest([&compaction], OFFSETS).unwrap(), Offsets::new());
        let bad = HashMap::from([(OFFSETS.to_string(), r#"{"x":1}"#.to_string())]);
        assert!(newest([&bad], OFFSETS)
            .unwrap_err()
            .contains("partition \"x\""));
        let negative = HashMap::from([(OFFSETS.to_string(), r#"{"0":-1}"#.to_string())]);
        assert!(newest([&negative], OFFSETS).is_err());
    }

    #[test]
    fn a_cdc_table_keeps_each_topics_offsets_apart() {
        let of = TableOf::Cdc {
            level: "shop.public.orders".into(),
            topic: "cdc.shop".into(),
        };
        assert_eq!(of.name(), "shop_public_orders");
        assert_eq!(of.offsets_key(), "strata.offsets.cdc.shop");
        let s = summary(
            &of,
            &Offsets::from([(1, 4)]),
            &BTreeMap::from([(0, adv(None, Some(2), 9))]),
            "t",
        );
        assert_eq!(s["strata.ranges.cdc.shop"], r#"{"0":[2,9]}"#);
        assert!(
            !s.contains_key(OFFSETS),
            "a topic's key is not a CDC table's"
        );
        assert_eq!(
            newest([&s], &of.offsets_key()).unwrap(),
            Offsets::from([(0, 9), (1, 4)])
        );
        let other = TableOf::Cdc {
            level: "shop.public.orders".into(),
            topic: "cdc.other".into(),
        };
        assert_eq!(newest([&s], &other.offsets_key()).unwrap(), Offsets::new());
    }

    #[test]
    fn table_names_are_plain_and_clashes_are_found() {
        assert_eq!(table_name("shop.orders-v2"), "shop_orders_v2");
        assert_eq!(
            clash(["a.b", "c", "a_b"]),
            Some(("a.b".into(), "a_b".into()))
        );
        assert_eq!(clash(["a.b", "a.b", "c"]), None);
    }

    #[test]
    fn days_follow_icebergs_day_transform() {
        assert_eq!(day_of(Some(0)), Some(0));
        assert_eq!(day_of(Some(86_399_999)), Some(0));
        assert_eq!(day_of(Some(86_400_000)), Some(1));
        // Before 1970 the day is the floor, not a truncation towards zero.
        assert_eq!(day_of(Some(-1)), Some(-1));
        assert_eq!(day_of(None), None);
        let p = data_file_path("file:///w/kafka/t/", Some(20_428), 3, 42, "u1");
        assert_eq!(
            p,
            "file:///w/kafka/t/data/timestamp_day=2025-12-06/00003-00000000000000000042-u1.parquet"
        );
        assert!(data_file_path("s3://b/t", None, 0, 0, "u").contains("timestamp_day=null/"));
        assert_eq!(
            cdc_file_path("s3://b/t/", 2, 7, "u"),
            "s3://b/t/data/00002-00000000000000000007-u.parquet"
        );
    }
}
