//! Secrets and `${VAR}` expansion. A [`Secret`] never prints its value: not in `Debug`, logs,
//! errors or the `validate` report; only [`Secret::expose`] hands it to a client library.

use std::fmt;

/// A password or key. Debug output shows only where it came from.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret {
    value: String,
    origin: String,
}

impl Secret {
    pub fn new(value: String, origin: impl Into<String>) -> Self {
        Self {
            value,
            origin: origin.into(),
        }
    }

    /// The value, for the one call that needs it (client configuration).
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// Where the value came from ("from ${S3_SECRET_KEY}" or "inline"), safe to print.
    pub fn origin(&self) -> &str {
        &self.origin
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret(<redacted, {}>)", self.origin)
    }
}

/// Why `${...}` expansion failed; names the variable, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExpandError {
    #[error("environment variable {0} is not set; export it or write the value in the file")]
    Unset(String),
    #[error("has an unterminated \"${{\"; write ${{NAME}} (or $${{ for a literal)")]
    Unterminated,
    #[error("has an invalid variable name {0:?}; use letters, digits and '_'")]
    BadName(String),
}

/// Expands `${NAME}` and `${NAME:-default}`; `$${` is a literal `${`.
pub fn expand(s: &str, lookup: impl Fn(&str) -> Option<String>) -> Result<String, ExpandError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        if let Some(r) = after.strip_prefix("$${") {
            out.push_str("${");
            rest = r;
        } else if let Some(r) = after.strip_prefix("${") {
            let end = r.find('}').ok_or(ExpandError::Unterminated)?;
            let inner = &r[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (inner, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(ExpandError::BadName(name.to_string()));
            }
            match (lookup(name), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => return Err(ExpandError::Unset(name.to_string())),
            }
            rest = &r[end + 1..];
        } else {
            out.push('$');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The names of the variables a string refers to, for reporting a secret's origin.
pub fn variables(s: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        if i > 0 && rest.as_bytes()[i - 1] == b'$' {
            rest = &rest[i + 2..];
            continue;
        }
        let r = &rest[i + 2..];
        let Some(end) = r.find('}') else { break };
        let name = r[..end].split(":-").next().unwrap_or_default();
        names.push(name.to_string());
        rest = &r[end + 1..];
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "USER_1" => Some("alice".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expands_variables_defaults_and_literals() {
        assert_eq!(expand("plain", env).unwrap(), "plain");
        assert_eq!(expand("${USER_1}", env).unwrap(), "alice");
        assert_eq!(expand("a-${USER_1}-b", env).unwrap(), "a-alice-b");
        assert_eq!(expand("${MISSING:-dflt}", env).unwrap(), "dflt");
        assert_eq!(expand("${EMPTY:-dflt}", env).unwrap(), "");
        assert_eq!(
            expand("cost $5 and $${X}", env).unwrap(),
            "cost $5 and ${X}"
        );
    }

    #[test]
    fn expansion_errors_name_the_variable_only() {
        assert_eq!(
            expand("${NOPE}", env),
            Err(ExpandError::Unset("NOPE".into()))
        );
        assert_eq!(expand("${NOPE", env), Err(ExpandError::Unterminated));
        assert_eq!(
            expand("${A B}", env),
            Err(ExpandError::BadName("A B".into()))
        );
    }

    #[test]
    fn secret_debug_never_shows_the_value() {
        let s = Secret::new("hunter2".into(), "from ${PW}");
        let shown = format!("{s:?}");
        assert!(!shown.contains("hunter2"));
        assert!(shown.contains("from ${PW}"));
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn lists_variables() {
        assert_eq!(
            variables("${A}x${B:-1}$${C}"),
            vec!["A".to_string(), "B".to_string()]
        );
    }
}
