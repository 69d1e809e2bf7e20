//! What every task type has: a name, the topics it reads (and leaves out), where a new group
//! starts.

use std::fmt;

/// A task name: 4-64 ASCII letters, digits, `-` or `_`. It also names the consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskName(String);

impl TaskName {
    pub fn parse(s: &str) -> Result<Self, String> {
        let ok_len = (4..=64).contains(&s.len());
        let ok_chars = s
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if ok_len && ok_chars {
            Ok(Self(s.to_string()))
        } else {
            Err(format!(
                "{s:?} must be 4-64 characters of letters, digits, '-' or '_'"
            ))
        }
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which topics a task reads.
#[derive(Debug, Clone)]
pub enum TopicSelector {
    List(Vec<String>),
    /// Matched against whole topic names; internal topics (`__...`) never match.
    Regex(regex::Regex),
}

impl TopicSelector {
    pub fn matches(&self, topic: &str) -> bool {
        match self {
            TopicSelector::List(l) => l.iter().any(|t| t == topic),
            TopicSelector::Regex(r) => !topic.starts_with("__") && r.is_match(topic),
        }
    }
}

impl PartialEq for TopicSelector {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::List(a), Self::List(b)) => a == b,
            (Self::Regex(a), Self::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

impl fmt::Display for TopicSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicSelector::List(l) => write!(f, "[{}]", l.join(", ")),
            TopicSelector::Regex(r) => write!(f, "/{}/", as_written(r)),
        }
    }
}

/// A whole-name pattern as the user wrote it, without the anchors validation added.
fn as_written(r: &regex::Regex) -> &str {
    let p = r.as_str();
    p.strip_prefix("^(?:")
        .and_then(|x| x.strip_suffix(")$"))
        .unwrap_or(p)
}

/// The topics a dump or replicate task reads: its selection (`topics` or `topic_regex`) minus
/// the topics one of `exclude_topics` matches. Exclusions exist because Rust's regex has no
/// look-ahead: "every `orders.` topic but the `.tmp` ones" cannot be one expression.
#[derive(Debug, Clone)]
pub struct TaskTopics {
    pub select: TopicSelector,
    /// Whole-name patterns; a topic any of them matches is left out.
    pub exclude: Vec<regex::Regex>,
}

impl TaskTopics {
    /// Topics `select` names, without exclusions.
    pub fn all(select: TopicSelector) -> Self {
        Self {
            select,
            exclude: Vec::new(),
        }
    }

    pub fn matches(&self, topic: &str) -> bool {
        self.select.matches(topic) && !self.excluded(topic)
    }

    /// Whether an exclusion leaves `topic` out.
    pub fn excluded(&self, topic: &str) -> bool {
        self.exclude.iter().any(|r| r.is_match(topic))
    }

    /// A listed selection minus the excluded topics; `None` for a regex, whose topics come
    /// from listing the cluster's.
    pub fn listed(&self) -> Option<Vec<String>> {
        match &self.select {
            TopicSelector::List(l) => {
                Some(l.iter().filter(|t| !self.excluded(t)).cloned().collect())
            }
            TopicSelector::Regex(_) => None,
        }
    }
}

impl PartialEq for TaskTopics {
    fn eq(&self, other: &Self) -> bool {
        self.select == other.select
            && self.exclude.len() == other.exclude.len()
            && self
                .exclude
                .iter()
                .zip(&other.exclude)
                .all(|(a, b)| a.as_str() == b.as_str())
    }
}

/// `[a, b]` or `/re/`, then ` except /x/, /y/` when exclusions are set (so a task's topics
/// without exclusions read as they did before they existed: replicate stores them).
impl fmt::Display for TaskTopics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.select)?;
        for (i, r) in self.exclude.iter().enumerate() {
            let sep = if i == 0 { " except" } else { "," };
            write!(f, "{sep} /{}/", as_written(r))?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOffset {
    Earliest,
    Latest,
}

impl StartOffset {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Earliest => "earliest",
            Self::Latest => "latest",
        }
    }
}
