//! Names a replication task uses and decides on (pure): which topics replicate, what they are
//! called on the target, the bookkeeping topics (MirrorMaker 2's own names where there is one),
//! transactional ids and consumer groups, and the header that stops records from looping.

use crate::config::{Alias, TargetNaming};

/// The header naming the cluster a record was first produced to.
pub const SOURCE_HEADER: &str = "strata-source";

pub use crate::config::never_replicated;

/// The target topic of a source topic.
pub fn target_topic(naming: &TargetNaming, source_alias: &Alias, topic: &str) -> String {
    match naming {
        TargetNaming::Identity => topic.to_string(),
        TargetNaming::Rename => format!("{source_alias}.{topic}"),
        TargetNaming::Map(m) => m.get(topic).cloned().unwrap_or_else(|| topic.to_string()),
    }
}

/// Whether a topic came from `target` (MirrorMaker 2's cycle rule for renamed topics): one of
/// its leading `<alias>.` parts names the target, so copying it there would send records home.
pub fn is_cycle(topic: &str, target: &Alias) -> bool {
    let mut rest = topic;
    while let Some((source, upstream)) = rest.split_once('.') {
        if source == target.as_str() {
            return true;
        }
        rest = upstream;
    }
    false
}

/// One direction of a task: from the `source` cluster to the `target` cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowNames {
    pub task: String,
    pub source: Alias,
    pub target: Alias,
    /// Whether the local cluster is the source (push) or the target (pull).
    pub local_is_source: bool,
}

impl FlowNames {
    /// `<task>.<source>-<target>`: names what belongs to this flow alone.
    pub fn id(&self) -> String {
        format!("{}.{}-{}", self.task, self.source, self.target)
    }

    /// The source consumer group: it only shares out the partitions; positions live in the
    /// target (see [`FlowNames::positions_topic`]).
    pub fn group(&self) -> String {
        format!("strata.{}", self.id())
    }

    /// Source positions and task parameters, on the target, written in the same transactions as
    /// the records (never replicated: the name ends in `internal`).
    pub fn positions_topic(&self) -> String {
        format!("strata.{}.positions.internal", self.id())
    }

    /// The transactional id of a source partition's producer: a new owner of the partition
    /// fences the old one by initialising the same id.
    pub fn transactional_id(&self, topic: &str, partition: i32) -> String {
        format!("strata.{}.{topic}.{partition}", self.id())
    }

    /// MirrorMaker 2's offset syncs topic and whether it lives on the source. On the local
    /// cluster, named after the peer (MirrorMaker 2's default placement for push, its
    /// `offset-syncs.topic.location = target` for pull). A both-ways task's pull flow keeps its
    /// syncs on the source (MirrorMaker 2's default), so the two flows never share a topic.
    pub fn offset_syncs_topic(&self, both_ways: bool) -> (String, bool) {
        if self.local_is_source || both_ways {
            (format!("mm2-offset-syncs.{}.internal", self.target), true)
        } else {
            (format!("mm2-offset-syncs.{}.internal", self.source), false)
        }
    }

    /// MirrorMaker 2's checkpoints topic: on the target, named after the source.
    pub fn checkpoints_topic(&self) -> String {
        format!("{}.checkpoints.internal", self.source)
    }
}

/// Whether a record goes on to the target: not when its source header already names the
/// target (it came from there), so records never loop, however many clusters are chained.
pub fn crosses(source_header: Option<&[u8]>, target: &Alias) -> bool {
    source_header != Some(target.as_str().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn alias(s: &str) -> Alias {
        Alias::parse(s).unwrap()
    }

    #[test]
    fn internal_topics_never_replicate() {
        for t in [
            "__consumer_offsets",
            "__strata",
            "mm2-offset-syncs.a.internal",
            "a.checkpoints.internal",
            "my-internal",
            "xinternal",
        ] {
            assert!(never_replicated(t), "{t}");
        }
        for t in ["orders", "internal.orders", "_private", "a.internals"] {
            assert!(!never_replicated(t), "{t}");
        }
    }

    #[test]
    fn target_names() {
        let a = alias("east");
        assert_eq!(target_topic(&TargetNaming::Identity, &a, "t"), "t");
        assert_eq!(target_topic(&TargetNaming::Rename, &a, "t"), "east.t");
        let m = TargetNaming::Map(BTreeMap::from([("t".to_string(), "u".to_string())]));
        assert_eq!(target_topic(&m, &a, "t"), "u");
        assert_eq!(target_topic(&m, &a, "v"), "v");
    }

    #[test]
    fn bookkeeping_names_follow_mirror_maker() {
        let push = FlowNames {
            task: "mirror".into(),
            source: alias("local"),
            target: alias("peer"),
            local_is_source: true,
        };
        assert_eq!(
            push.offset_syncs_topic(false),
            ("mm2-offset-syncs.peer.internal".into(), true)
        );
        assert_eq!(push.checkpoints_topic(), "local.checkpoints.internal");
        let pull = FlowNames {
            task: "mirror".into(),
            source: alias("peer"),
            target: alias("local"),
            local_is_source: false,
        };
        assert_eq!(
            pull.offset_syncs_topic(false),
            ("mm2-offset-syncs.peer.internal".into(), false)
        );
        assert_eq!(pull.checkpoints_topic(), "peer.checkpoints.internal");
        // Both ways: the two flows' syncs land in different topics.
        assert_ne!(
            pull.offset_syncs_topic(true).0,
            push.offset_syncs_topic(true).0
        );
        assert!(never_replicated(&pull.positions_topic()));
        assert_eq!(pull.group(), "strata.mirror.peer-local");
        assert_eq!(
            pull.transactional_id("orders", 3),
            "strata.mirror.peer-local.orders.3"
        );
    }

    #[test]
    fn renamed_topics_do_not_go_home() {
        let b = alias("b");
        assert!(is_cycle("b.orders", &b));
        assert!(is_cycle("a.b.orders", &b));
        assert!(!is_cycle("a.orders", &b));
        assert!(!is_cycle("orders", &b));
        assert!(!is_cycle("bb.orders", &b));
        // The last part is the topic's own name, never an alias.
        assert!(!is_cycle("a.b", &b));
    }

    #[test]
    fn records_do_not_loop() {
        let b = alias("b");
        assert!(crosses(None, &b));
        assert!(crosses(Some(b"a"), &b));
        assert!(!crosses(Some(b"b"), &b));
    }
}
