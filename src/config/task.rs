//! What every task type has: a name, the topics it reads, where a new group starts.

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
            // Shown as the user wrote it, without the anchors validation added.
            TopicSelector::Regex(r) => {
                let p = r.as_str();
                let inner = p
                    .strip_prefix("^(?:")
                    .and_then(|x| x.strip_suffix(")$"))
                    .unwrap_or(p);
                write!(f, "/{inner}/")
            }
        }
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
