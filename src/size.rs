//! Byte sizes written as `256MiB`, `4 MiB`, `64MB` or a plain number of bytes.

use serde::Deserialize;
use std::fmt;

/// A size in bytes, parsed once at the edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn mib(n: u64) -> Self {
        Self(n << 20)
    }

    pub fn bytes(self) -> u64 {
        self.0
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (num, unit) = s.split_at(split);
        let n: u64 = num.parse().map_err(|_| {
            format!("{s:?} is not a size; write e.g. \"256MiB\", \"4 MiB\" or 1048576")
        })?;
        let mult: u64 = match unit.trim() {
            "" | "B" => 1,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            other => {
                return Err(format!(
                    "unknown size unit {other:?}; use B, KiB, MiB, GiB (or KB, MB, GB)"
                ))
            }
        };
        n.checked_mul(mult)
            .map(Self)
            .ok_or_else(|| format!("{s:?} is too large"))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1 << 30 && b.is_multiple_of(1 << 30) {
            write!(f, "{}GiB", b >> 30)
        } else if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
            write!(f, "{}MiB", b >> 20)
        } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
            write!(f, "{}KiB", b >> 10)
        } else {
            write!(f, "{b}B")
        }
    }
}

/// A size as written in TOML: a number of bytes or a string with a unit.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawSize {
    Bytes(u64),
    Text(String),
}

impl RawSize {
    pub fn resolve(&self) -> Result<ByteSize, String> {
        match self {
            RawSize::Bytes(n) => Ok(ByteSize(*n)),
            RawSize::Text(s) => ByteSize::parse(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(ByteSize::parse("256MiB"), Ok(ByteSize(256 << 20)));
        assert_eq!(ByteSize::parse("4 MiB"), Ok(ByteSize(4 << 20)));
        assert_eq!(ByteSize::parse("64MB"), Ok(ByteSize(64_000_000)));
        assert_eq!(ByteSize::parse("1024"), Ok(ByteSize(1024)));
        assert!(ByteSize::parse("12 parsecs")
            .unwrap_err()
            .contains("unknown size unit"));
        assert!(ByteSize::parse("MiB").unwrap_err().contains("not a size"));
        assert!(ByteSize::parse("99999999999GiB")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn displays_compactly() {
        assert_eq!(ByteSize::mib(256).to_string(), "256MiB");
        assert_eq!(ByteSize(1 << 30).to_string(), "1GiB");
        assert_eq!(ByteSize(1500).to_string(), "1500B");
    }
}
