//! The cluster state a restore brings back: of every dump task that stored snapshots in the
//! archive's directory (or of `--task NAME`), the newest snapshot taken at or before `--to`;
//! each topic's definition, and the groups' positions on it, come from the newest of those
//! that holds the topic. Choosing and merging are pure; [`load`] reads the chosen ones.

use crate::layout::DumpDir;
use crate::state::{self, Snapshot, StateError, TopicState};
use crate::store::{ObjectMeta, ObjectStore};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// Group -> archived topic -> partition -> committed offset (the next record the group reads).
pub type GroupPositions = BTreeMap<String, BTreeMap<String, BTreeMap<i32, i64>>>;

/// What the chosen snapshots recorded, merged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The snapshots used: task and capture time, oldest first.
    pub used: Vec<(String, DateTime<Utc>)>,
    /// Archived topic definitions by name.
    pub topics: BTreeMap<String, TopicState>,
    pub groups: GroupPositions,
}

impl Recorded {
    /// "task nightly at 2026-12-06T09:05:00Z, ..." for messages.
    pub fn describe(&self) -> String {
        if self.used.is_empty() {
            return "none".into();
        }
        self.used
            .iter()
            .map(|(t, at)| {
                format!(
                    "task {t} at {}",
                    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The snapshots to read from a listing of the directory: per task (only `task` when given),
/// the newest taken at or before `to` (any time without it). Task, time and key, oldest first.
pub fn choose(
    listing: &[ObjectMeta],
    dir: &DumpDir,
    task: Option<&str>,
    to: Option<DateTime<Utc>>,
) -> Vec<(String, DateTime<Utc>, String)> {
    let mut newest: BTreeMap<String, (DateTime<Utc>, String)> = BTreeMap::new();
    for o in listing {
        let Some((t, at)) = state::parse_key(dir, &o.key) else {
            continue;
        };
        if task.is_some_and(|want| want != t) || to.is_some_and(|to| at > to) {
            continue;
        }
        match newest.get(&t) {
            Some((seen, _)) if *seen >= at => {}
            _ => {
                newest.insert(t, (at, o.key.clone()));
            }
        }
    }
    let mut out: Vec<(String, DateTime<Utc>, String)> =
        newest.into_iter().map(|(t, (at, k))| (t, at, k)).collect();
    out.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    out
}

/// Merges snapshots, newer ones winning: a topic's definition comes from the newest snapshot
/// holding the topic, a group's positions on a topic (all its partitions together) from the
/// newest snapshot holding them (tasks may record different groups).
pub fn merge(mut snapshots: Vec<Snapshot>) -> Recorded {
    snapshots.sort_by(|a, b| (a.captured_at, &a.task).cmp(&(b.captured_at, &b.task)));
    let mut out = Recorded::default();
    for s in snapshots {
        out.used.push((s.task.clone(), s.captured_at));
        for t in s.topics {
            out.topics.insert(t.name.clone(), t);
        }
        for g in s.groups {
            let positions = out.groups.entry(g.group).or_default();
            for (topic, offsets) in g.offsets {
                positions.insert(topic, offsets);
            }
        }
    }
    out
}

/// Reads and merges the snapshots [`choose`] picks from `listing`.
pub async fn load(
    store: &dyn ObjectStore,
    listing: &[ObjectMeta],
    dir: &DumpDir,
    task: Option<&str>,
    to: Option<DateTime<Utc>>,
) -> Result<Recorded, StateError> {
    let mut snapshots = Vec::new();
    for (_, _, key) in choose(listing, dir, task, to) {
        snapshots.push(state::read(store, &key).await?);
    }
    Ok(merge(snapshots))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{GroupState, Occasion, VERSION};
    use chrono::TimeZone;

    fn at(hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, hour, 0, 0).unwrap()
    }

    fn topic(name: &str, partitions: i32) -> TopicState {
        TopicState {
            name: name.into(),
            id: None,
            partitions,
            replication_factor: 1,
            configs: BTreeMap::new(),
            watermarks: vec![],
        }
    }

    fn snapshot(
        task: &str,
        hour: u32,
        topics: &[(&str, i32)],
        groups: &[(&str, &str, i64)],
    ) -> Snapshot {
        let mut gs: BTreeMap<String, GroupState> = BTreeMap::new();
        for (g, t, o) in groups {
            gs.entry(g.to_string())
                .or_insert_with(|| GroupState {
                    group: g.to_string(),
                    offsets: BTreeMap::new(),
                })
                .offsets
                .entry(t.to_string())
                .or_default()
                .insert(0, *o);
        }
        Snapshot {
            version: VERSION,
            task: task.into(),
            captured_at: at(hour),
            occasion: Occasion::End,
            topics: topics.iter().map(|(n, p)| topic(n, *p)).collect(),
            groups: gs.into_values().collect(),
            missing: vec![],
        }
    }

    fn meta(key: String) -> ObjectMeta {
        ObjectMeta {
            key,
            size: 1,
            last_modified: None,
        }
    }

    #[test]
    fn the_newest_snapshot_at_or_before_to_of_each_task() {
        let dir = DumpDir::parse("d").unwrap();
        let listing: Vec<ObjectMeta> = [("a", 1), ("a", 3), ("a", 5), ("b", 2), ("b", 6)]
            .iter()
            .map(|(t, h)| meta(state::key(&dir, t, at(*h))))
            .chain([
                meta("d/t+0+00000000000000000000.jsonl".into()),
                meta("d/.strata/state/a/junk.json".into()),
            ])
            .collect();
        let names = |v: Vec<(String, DateTime<Utc>, String)>| {
            v.into_iter().map(|(t, a, _)| (t, a)).collect::<Vec<_>>()
        };
        assert_eq!(
            names(choose(&listing, &dir, None, Some(at(4)))),
            vec![("b".to_string(), at(2)), ("a".to_string(), at(3))]
        );
        assert_eq!(
            names(choose(&listing, &dir, None, None)),
            vec![("a".to_string(), at(5)), ("b".to_string(), at(6))]
        );
        assert_eq!(
            names(choose(&listing, &dir, Some("b"), Some(at(5)))),
            vec![("b".to_string(), at(2))]
        );
        assert_eq!(names(choose(&listing, &dir, None, Some(at(0)))), vec![]);
        assert_eq!(
            names(choose(&listing, &dir, None, Some(at(3)))),
            vec![("b".to_string(), at(2)), ("a".to_string(), at(3))],
            "a snapshot taken at --to counts"
        );
    }

    #[test]
    fn each_topic_and_its_positions_come_from_the_newest_snapshot_holding_it() {
        // Task a (older) archives x and y; task b (newer) archives y only.
        let a = snapshot(
            "a",
            1,
            &[("x", 2), ("y", 3)],
            &[("g", "x", 10), ("g", "y", 20), ("h", "y", 5)],
        );
        let b = snapshot("b", 2, &[("y", 4)], &[("g", "y", 25)]);
        let r = merge(vec![b, a]);
        assert_eq!(
            r.used,
            vec![("a".to_string(), at(1)), ("b".to_string(), at(2))]
        );
        assert_eq!(r.topics["x"].partitions, 2);
        assert_eq!(r.topics["y"].partitions, 4, "the newer definition");
        assert_eq!(r.groups["g"]["x"][&0], 10);
        assert_eq!(r.groups["g"]["y"][&0], 25, "the newer position");
        assert_eq!(
            r.groups["h"]["y"][&0], 5,
            "only the older snapshot records h (task b's groups_regex may leave it out)"
        );
        assert!(r.describe().contains("task a at 2026-12-01T01:00:00.000Z"));
        assert_eq!(Recorded::default().describe(), "none");
    }
}
