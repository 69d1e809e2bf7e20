//! `--groups REGEX`: consumer group positions from the state snapshot, moved onto the restored
//! topics through the exact offset map. A group committed at source offset O resumes at the
//! first restored record whose source offset is at least O, or at the target partition's end
//! when it had read every restored record. Selection and translation are pure; checking that
//! no member is active and committing (without joining the group) are the I/O at the edge.

use super::offset_map::Ranges;
use super::snapshots::GroupPositions;
use crate::config::KafkaConfig;
use crate::kafka::{Admin, KafkaError};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::fmt;

/// One group's committed position on one archived partition, and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    /// The source offset the group committed (the next record it reads).
    pub committed: i64,
    pub target_topic: String,
}

/// Where a group resumes in the target partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetOffset {
    /// At this offset: the first restored record at or after the committed source offset.
    At(i64),
    /// Dry run: that record is not restored yet; it will land this many records after the
    /// target partition's end (its offset in a new topic restored without transactions).
    AfterEnd(u64),
    /// Past every restored record: the target partition's end after the restore.
    End,
}

impl fmt::Display for TargetOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetOffset::At(o) => write!(f, "{o}"),
            TargetOffset::AfterEnd(n) => write!(f, "end+{n}"),
            TargetOffset::End => write!(f, "end"),
        }
    }
}

/// A row of the groups table: a position and its target offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRow {
    pub position: Position,
    pub target: TargetOffset,
}

/// Why the groups' positions cannot be selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// No recorded group matches; the groups that were recorded.
    NoMatch { recorded: Vec<String> },
    /// Two archived topics of one group restore into one target topic: one position each.
    Clash {
        group: String,
        target: String,
        sources: Vec<String>,
    },
}

/// The positions of the recorded groups `matches` accepts on the restored topics (`targets`:
/// archived topic -> target topic), in group, topic, partition order.
pub fn select(
    recorded: &GroupPositions,
    matches: impl Fn(&str) -> bool,
    targets: &BTreeMap<String, String>,
) -> Result<Vec<Position>, SelectError> {
    let mut out = Vec::new();
    let mut any = false;
    for (group, topics) in recorded.iter().filter(|(g, _)| matches(g)) {
        any = true;
        let mut by_target: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (topic, partitions) in topics {
            let Some(target) = targets.get(topic) else {
                continue;
            };
            by_target
                .entry(target.as_str())
                .or_default()
                .push(topic.clone());
            for (partition, committed) in partitions {
                out.push(Position {
                    group: group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                    committed: *committed,
                    target_topic: target.clone(),
                });
            }
        }
        if let Some((target, sources)) = by_target.into_iter().find(|(_, s)| s.len() > 1) {
            return Err(SelectError::Clash {
                group: group.clone(),
                target: target.to_string(),
                sources,
            });
        }
    }
    if !any {
        return Err(SelectError::NoMatch {
            recorded: recorded.keys().cloned().collect(),
        });
    }
    Ok(out)
}

/// The target offset of a position: from the offset map of what was restored, else (a dry
/// run) from the sorted source offsets of the records still to restore, else the end.
pub fn translate(committed: i64, restored: Option<&Ranges>, pending: &[i64]) -> TargetOffset {
    if let Some(t) = restored.and_then(|m| m.first_at_or_after(committed)) {
        return TargetOffset::At(t);
    }
    let before = pending.partition_point(|s| *s < committed);
    if before < pending.len() {
        TargetOffset::AfterEnd(before as u64)
    } else {
        TargetOffset::End
    }
}

/// The groups table.
pub fn render(f: &mut fmt::Formatter<'_>, rows: &[GroupRow]) -> fmt::Result {
    let w = |pick: &dyn Fn(&GroupRow) -> usize, title: &str| {
        rows.iter().map(pick).max().unwrap_or(0).max(title.len())
    };
    let gw = w(&|r| r.position.group.len(), "GROUP");
    let tw = w(&|r| r.position.topic.len(), "TOPIC");
    let ttw = w(&|r| r.position.target_topic.len(), "TARGET TOPIC");
    writeln!(
        f,
        "{:<gw$}  {:<tw$}  {:>9}  {:>13}  {:<ttw$}  {:>13}",
        "GROUP", "TOPIC", "PARTITION", "SOURCE OFFSET", "TARGET TOPIC", "TARGET OFFSET"
    )?;
    for r in rows {
        let p = &r.position;
        writeln!(
            f,
            "{:<gw$}  {:<tw$}  {:>9}  {:>13}  {:<ttw$}  {:>13}",
            p.group,
            p.topic,
            p.partition,
            p.committed,
            p.target_topic,
            r.target.to_string()
        )?;
    }
    Ok(())
}

/// The first group of `groups` with an active member on the target cluster, with the count.
pub fn first_active(admin: &Admin, groups: &[&str]) -> Result<Option<(String, usize)>, KafkaError> {
    for g in groups {
        let members = admin.group_members(g)?;
        if members > 0 {
            return Ok(Some((g.to_string(), members)));
        }
    }
    Ok(None)
}

/// Commits one group's offsets (`(topic, partition, offset)`) on the target, without joining
/// the group (the coordinator refuses it while the group has active members).
pub fn commit(k: &KafkaConfig, group: &str, offsets: &[(String, i32, i64)]) -> Result<(), String> {
    let mut tpl = TopicPartitionList::new();
    for (topic, partition, offset) in offsets {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*offset))
            .map_err(|e| e.to_string())?;
    }
    let c = crate::kafka::group_reader(k, group).map_err(|e| e.to_string())?;
    crate::kafka::commit_offsets(&c, &tpl).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(entries: &[(&str, &str, i32, i64)]) -> GroupPositions {
        let mut g = GroupPositions::new();
        for (group, topic, p, o) in entries {
            g.entry(group.to_string())
                .or_default()
                .entry(topic.to_string())
                .or_default()
                .insert(*p, *o);
        }
        g
    }

    fn targets(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn matching_groups_on_restored_topics_are_selected() {
        let r = recorded(&[
            ("app-1", "orders", 0, 5),
            ("app-1", "orders", 1, 7),
            ("app-1", "other", 0, 1),
            ("billing", "orders", 0, 3),
        ]);
        let t = targets(&[("orders", "r.orders")]);
        let got = select(&r, |g| g.starts_with("app-"), &t).unwrap();
        assert_eq!(
            got.iter()
                .map(|p| (
                    p.group.as_str(),
                    p.topic.as_str(),
                    p.partition,
                    p.committed,
                    p.target_topic.as_str()
                ))
                .collect::<Vec<_>>(),
            vec![
                ("app-1", "orders", 0, 5, "r.orders"),
                ("app-1", "orders", 1, 7, "r.orders")
            ],
            "other is not restored; billing does not match"
        );
        assert_eq!(
            select(&r, |g| g == "nobody", &t),
            Err(SelectError::NoMatch {
                recorded: vec!["app-1".into(), "billing".into()]
            })
        );
    }

    #[test]
    fn two_topics_of_a_group_into_one_target_are_refused() {
        let r = recorded(&[("g", "a", 0, 1), ("g", "b", 0, 2)]);
        let t = targets(&[("a", "all"), ("b", "all")]);
        assert_eq!(
            select(&r, |_| true, &t),
            Err(SelectError::Clash {
                group: "g".into(),
                target: "all".into(),
                sources: vec!["a".into(), "b".into()]
            })
        );
    }

    #[test]
    fn translation_uses_the_map_then_what_is_still_to_restore_then_the_end() {
        let mut m = Ranges::new();
        for (s, t) in [(0, 0), (1, 1), (4, 2)] {
            m.push(s, t).unwrap();
        }
        assert_eq!(translate(1, Some(&m), &[]), TargetOffset::At(1));
        assert_eq!(translate(2, Some(&m), &[]), TargetOffset::At(2));
        assert_eq!(translate(5, Some(&m), &[]), TargetOffset::End);
        // A dry run part way: 5.. are still to restore (7 and 9 kept).
        assert_eq!(translate(5, Some(&m), &[7, 9]), TargetOffset::AfterEnd(0));
        assert_eq!(translate(8, Some(&m), &[7, 9]), TargetOffset::AfterEnd(1));
        assert_eq!(translate(10, Some(&m), &[7, 9]), TargetOffset::End);
        assert_eq!(translate(3, None, &[0, 2, 3, 6]), TargetOffset::AfterEnd(2));
        assert_eq!(translate(0, None, &[]), TargetOffset::End);
    }

    #[test]
    fn the_table_has_a_row_per_group_and_partition() {
        struct T(Vec<GroupRow>);
        impl fmt::Display for T {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                render(f, &self.0)
            }
        }
        let row = |p, o, t| GroupRow {
            position: Position {
                group: "app".into(),
                topic: "orders".into(),
                partition: p,
                committed: o,
                target_topic: "r.orders".into(),
            },
            target: t,
        };
        let s = T(vec![
            row(0, 40, TargetOffset::At(38)),
            row(1, 99, TargetOffset::End),
            row(2, 3, TargetOffset::AfterEnd(3)),
        ])
        .to_string();
        let lines: Vec<Vec<&str>> = s.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(
            lines[0],
            [
                "GROUP",
                "TOPIC",
                "PARTITION",
                "SOURCE",
                "OFFSET",
                "TARGET",
                "TOPIC",
                "TARGET",
                "OFFSET"
            ]
        );
        assert_eq!(lines[1], ["app", "orders", "0", "40", "r.orders", "38"]);
        assert_eq!(lines[2], ["app", "orders", "1", "99", "r.orders", "end"]);
        assert_eq!(lines[3], ["app", "orders", "2", "3", "r.orders", "end+3"]);
    }
}
