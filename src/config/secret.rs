//! Secrets and `${VAR}` / `${file:/path}` expansion. A [`Secret`] never prints its value: not in
//! `Debug`, logs, errors or the `validate` report; only [`Secret::expose`] hands it to a client
//! library. Expansion errors name the variable or the file, never what it holds.

use std::fmt;
use std::io::Read;
use std::path::Path;

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

    /// Where the value came from ("from ${S3_SECRET_KEY}", "from file /run/secrets/pw" or
    /// "inline"), safe to print.
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
    #[error("has an invalid variable name {0:?}; use letters, digits and '_' (or ${{file:/path}} for a file)")]
    BadName(String),
    /// `reason` is the I/O error's or a size/encoding complaint, never the content.
    #[error("cannot read file {path} (from ${{file:{path}}}): {reason}; mount the file there or fix the path")]
    File { path: String, reason: String },
}

/// The most a `${file:...}` file may hold: secrets are short, and a path to a device or a log
/// must not make loading read without end.
const MAX_FILE: u64 = 64 * 1024;

/// The content of a `${file:...}` file, one trailing newline (`\n` or `\r\n`) stripped: files
/// written by `echo` or a text editor end with one, Kubernetes secrets usually not.
fn read_file(path: &str) -> Result<String, ExpandError> {
    let fail = |reason: String| ExpandError::File {
        path: path.to_string(),
        reason,
    };
    if path.is_empty() {
        return Err(fail("the path is empty".into()));
    }
    let file = std::fs::File::open(Path::new(path)).map_err(|e| fail(e.to_string()))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(fail(format!("it holds more than {} KiB", MAX_FILE / 1024)));
    }
    let mut text = String::from_utf8(bytes).map_err(|_| fail("it is not UTF-8 text".into()))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(text)
}

/// Expands `${NAME}`, `${NAME:-default}` and `${file:/path}` (the file's content); `$${` is a
/// literal `${`.
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
            if let Some(path) = inner.strip_prefix(FILE) {
                out.push_str(&read_file(path)?);
                rest = &r[end + 1..];
                continue;
            }
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

/// What `${file:PATH}` starts with.
const FILE: &str = "file:";

/// Where a string's `${...}` take their values from, as a secret's origin shows them:
/// `${NAME}` for a variable, `file PATH` for a file.
pub fn sources(s: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        if i > 0 && rest.as_bytes()[i - 1] == b'$' {
            rest = &rest[i + 2..];
            continue;
        }
        let r = &rest[i + 2..];
        let Some(end) = r.find('}') else { break };
        let inner = &r[..end];
        match inner.strip_prefix(FILE) {
            Some(path) => names.push(format!("file {path}")),
            None => {
                let name = inner.split(":-").next().unwrap_or_default();
                names.push(format!("${{{name}}}"));
            }
        }
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
    fn lists_sources() {
        assert_eq!(
            sources("${A}x${B:-1}$${C}${file:/run/secrets/pw}"),
            ["${A}", "${B}", "file /run/secrets/pw"]
        );
    }

    #[test]
    fn a_file_gives_its_content_without_one_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, content: &[u8]| {
            let p = dir.path().join(name);
            std::fs::write(&p, content).unwrap();
            p.display().to_string()
        };
        let plain = write("plain", b"s3cr3t");
        let newline = write("newline", b"s3cr3t\n");
        let crlf = write("crlf", b"s3cr3t\r\n");
        let two = write("two", b"s3cr3t\n\n");
        for (path, want) in [
            (&plain, "s3cr3t"),
            (&newline, "s3cr3t"),
            (&crlf, "s3cr3t"),
            (&two, "s3cr3t\n"),
        ] {
            assert_eq!(expand(&format!("${{file:{path}}}"), env).unwrap(), want);
        }
        // Beside text and variables, like ${NAME}.
        assert_eq!(
            expand(&format!("${{USER_1}}:${{file:{plain}}}!"), env).unwrap(),
            "alice:s3cr3t!"
        );
    }

    #[test]
    fn an_unreadable_file_is_named_never_its_content() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing").display().to_string();
        let e = expand(&format!("${{file:{missing}}}"), env).unwrap_err();
        assert!(
            matches!(&e, ExpandError::File { path, .. } if *path == missing),
            "{e:?}"
        );
        assert!(e.to_string().contains(&missing), "{e}");
        let big = dir.path().join("big");
        std::fs::write(&big, "x".repeat(MAX_FILE as usize + 1)).unwrap();
        let e = expand(&format!("${{file:{}}}", big.display()), env).unwrap_err();
        assert!(e.to_string().contains("more than 64 KiB"), "{e}");
        assert!(!e.to_string().contains("xxxx"), "{e}");
        let binary = dir.path().join("binary");
        std::fs::write(&binary, [0xff, 0xfe, b's']).unwrap();
        let e = expand(&format!("${{file:{}}}", binary.display()), env).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
        assert!(matches!(
            expand("${file:}", env),
            Err(ExpandError::File { .. })
        ));
    }
}
