//! What restore does with each target topic, decided before anything is written: use it as it
//! is, create it (with the archived topic's partition count and, from the state snapshot, its
//! configs), or refuse it (missing with `create_topics = false`; fewer partitions than the
//! archive when `partitioning = "original"` needs one per archived partition). Pure.

use crate::config::Partitioning;
use crate::state::TopicState;
use std::collections::BTreeMap;

/// One target topic and the archived topics restored into it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted<'a> {
    pub target: String,
    pub sources: Vec<String>,
    /// Largest archived partition + 1 over the sources.
    pub archived_partitions: i32,
    /// The sources' definitions in the state snapshot, when recorded.
    pub recorded: Vec<&'a TopicState>,
}

impl Wanted<'_> {
    /// Partitions the archive has: its objects' partitions, or the recorded count when that
    /// is larger (partitions that held no records have no objects).
    pub fn partitions_needed(&self) -> i32 {
        self.recorded
            .iter()
            .map(|t| t.partitions)
            .fold(self.archived_partitions, i32::max)
    }

    /// The configs to create the target with: the recorded source's own configs (of the one
    /// source; several sources with different configs give none).
    pub fn configs(&self) -> BTreeMap<String, String> {
        let mut each = self.recorded.iter().map(|t| &t.configs);
        match each.next() {
            Some(first)
                if self.recorded.len() == self.sources.len() && each.all(|c| c == first) =>
            {
                first.clone()
            }
            _ => BTreeMap::new(),
        }
    }
}

/// How restore creates and checks target topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub partitioning: Partitioning,
    pub create_topics: bool,
    /// `restore.partitions`: the count of created topics.
    pub partitions: Option<i32>,
    /// Create topics with the recorded configs (off: `--no-topic-configs`).
    pub with_configs: bool,
}

/// What to do with a target topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// It exists with this many partitions.
    Use { partitions: i32 },
    Create {
        partitions: i32,
        configs: BTreeMap<String, String>,
    },
}

/// Why a target topic cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Missing {
        needed: i32,
    },
    /// `partitions` is what the target has (`configured`: what `restore.partitions` asks).
    TooFewPartitions {
        partitions: i32,
        needed: i32,
        configured: bool,
    },
}

/// Decides about one target topic; `existing` is its partition count when it exists.
pub fn decide(w: &Wanted<'_>, existing: Option<i32>, rules: Rules) -> Result<Decision, Refusal> {
    let needed = w.partitions_needed();
    let original = rules.partitioning == Partitioning::Original;
    match existing {
        Some(partitions) if original && partitions < needed => Err(Refusal::TooFewPartitions {
            partitions,
            needed,
            configured: false,
        }),
        Some(partitions) => Ok(Decision::Use { partitions }),
        None if !rules.create_topics => Err(Refusal::Missing { needed }),
        None => {
            let partitions = rules.partitions.unwrap_or(needed);
            if original && partitions < needed {
                return Err(Refusal::TooFewPartitions {
                    partitions,
                    needed,
                    configured: true,
                });
            }
            let configs = if rules.with_configs {
                w.configs()
            } else {
                BTreeMap::new()
            };
            Ok(Decision::Create {
                partitions,
                configs,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(partitions: i32, configs: &[(&str, &str)]) -> TopicState {
        TopicState {
            name: "src".into(),
            id: None,
            partitions,
            replication_factor: 3,
            configs: configs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            watermarks: vec![],
        }
    }

    fn rules() -> Rules {
        Rules {
            partitioning: Partitioning::Original,
            create_topics: true,
            partitions: None,
            with_configs: true,
        }
    }

    #[test]
    fn a_missing_topic_is_created_with_the_recorded_partitions_and_configs() {
        let t = recorded(6, &[("cleanup.policy", "compact")]);
        let w = Wanted {
            target: "r.src".into(),
            sources: vec!["src".into()],
            archived_partitions: 4,
            recorded: vec![&t],
        };
        assert_eq!(
            decide(&w, None, rules()),
            Ok(Decision::Create {
                partitions: 6,
                configs: BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
            }),
            "partitions 4 and 5 held nothing, the topic has 6"
        );
        let plain = Rules {
            with_configs: false,
            ..rules()
        };
        assert_eq!(
            decide(&w, None, plain),
            Ok(Decision::Create {
                partitions: 6,
                configs: BTreeMap::new()
            })
        );
        // Without a snapshot: the archive's partitions, no configs.
        let bare = Wanted {
            recorded: vec![],
            ..w.clone()
        };
        assert_eq!(
            decide(&bare, None, rules()),
            Ok(Decision::Create {
                partitions: 4,
                configs: BTreeMap::new()
            })
        );
    }

    #[test]
    fn fewer_partitions_than_the_archive_are_refused_with_original_partitioning() {
        let t = recorded(3, &[]);
        let w = Wanted {
            target: "r.src".into(),
            sources: vec!["src".into()],
            archived_partitions: 3,
            recorded: vec![&t],
        };
        assert_eq!(
            decide(&w, Some(2), rules()),
            Err(Refusal::TooFewPartitions {
                partitions: 2,
                needed: 3,
                configured: false
            })
        );
        assert_eq!(
            decide(&w, Some(3), rules()),
            Ok(Decision::Use { partitions: 3 })
        );
        assert_eq!(
            decide(&w, Some(5), rules()),
            Ok(Decision::Use { partitions: 5 })
        );
        let few = Rules {
            partitions: Some(2),
            ..rules()
        };
        assert_eq!(
            decide(&w, None, few),
            Err(Refusal::TooFewPartitions {
                partitions: 2,
                needed: 3,
                configured: true
            })
        );
        // key-hash places every record by its key: any count does.
        let kh = Rules {
            partitioning: Partitioning::KeyHash,
            ..few
        };
        assert_eq!(decide(&w, Some(2), kh), Ok(Decision::Use { partitions: 2 }));
        assert!(matches!(
            decide(&w, None, kh),
            Ok(Decision::Create { partitions: 2, .. })
        ));
        let no_create = Rules {
            create_topics: false,
            ..rules()
        };
        assert_eq!(
            decide(&w, None, no_create),
            Err(Refusal::Missing { needed: 3 })
        );
    }

    #[test]
    fn several_sources_share_configs_only_when_they_agree() {
        let (a, b) = (
            recorded(2, &[("retention.ms", "1")]),
            recorded(5, &[("retention.ms", "2")]),
        );
        let w = Wanted {
            target: "all".into(),
            sources: vec!["a".into(), "b".into()],
            archived_partitions: 1,
            recorded: vec![&a, &b],
        };
        assert_eq!(w.partitions_needed(), 5);
        assert!(w.configs().is_empty());
        let same = Wanted {
            recorded: vec![&a, &a],
            ..w.clone()
        };
        assert_eq!(same.configs().len(), 1);
        let one_unknown = Wanted {
            recorded: vec![&a],
            ..w
        };
        assert!(one_unknown.configs().is_empty(), "b's configs are unknown");
    }
}
