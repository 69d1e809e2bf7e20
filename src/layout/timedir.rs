//! Time directories such as `2026/11/29` or `dt=2026-11-29/hr=07`.
//!
//! A [`TimeDirFormat`] is parsed once from the user's pattern, renders the directory of an
//! instant in a time zone, and parses a rendered directory back into the time span it covers
//! (restore uses that span to skip objects that cannot hold records of a time range).

use chrono::{DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use std::fmt;

/// One piece of a time directory pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    Year,
    Month,
    Day,
    Hour,
    Minute,
}

/// The finest time unit a pattern names; a directory covers one such unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Granularity {
    Year,
    Month,
    Day,
    Hour,
    Minute,
}

/// Why a time directory pattern was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeDirError {
    #[error("is empty; use a pattern such as \"yyyy/MM/dd\"")]
    Empty,
    #[error("must contain the year token \"yyyy\"")]
    NoYear,
    #[error("uses \"{0}\" more than once")]
    Repeated(&'static str),
    #[error("uses \"{token}\" without \"{needs}\"; levels go yyyy > MM > dd > HH > mm")]
    MissingLevel {
        token: &'static str,
        needs: &'static str,
    },
    #[error("contains {0:?}; literal text may use letters, digits, '-', '_', '=', '.' and '/'")]
    BadChar(char),
    #[error("must not start or end with '/' or contain \"//\"")]
    BadSlash,
    #[error("contains \"..\", which would leave the dump directory")]
    DotDot,
}

const TOKENS: [(&str, Token); 5] = [
    ("yyyy", Token::Year),
    ("MM", Token::Month),
    ("dd", Token::Day),
    ("HH", Token::Hour),
    ("mm", Token::Minute),
];

fn token_name(t: &Token) -> &'static str {
    match t {
        Token::Year => "yyyy",
        Token::Month => "MM",
        Token::Day => "dd",
        Token::Hour => "HH",
        Token::Minute => "mm",
        Token::Literal(_) => "",
    }
}

/// A parsed time directory pattern: `yyyy`, `yyyy/MM`, `yyyy/MM/dd`, `yyyy/MM/dd/HH`,
/// `yyyy/MM/dd/HH/mm`, or any pattern of the same tokens with literal text between them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeDirFormat {
    tokens: Vec<Token>,
    pattern: String,
    granularity: Granularity,
}

impl fmt::Display for TimeDirFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pattern)
    }
}

impl TimeDirFormat {
    /// Parses a pattern; tokens are matched greedily, anything else is literal text.
    pub fn parse(pattern: &str) -> Result<Self, TimeDirError> {
        if pattern.is_empty() {
            return Err(TimeDirError::Empty);
        }
        if pattern.starts_with('/') || pattern.ends_with('/') || pattern.contains("//") {
            return Err(TimeDirError::BadSlash);
        }
        if pattern.split('/').any(|s| s == ".." || s == ".") || pattern.contains("..") {
            return Err(TimeDirError::DotDot);
        }
        let mut tokens: Vec<Token> = Vec::new();
        let mut rest = pattern;
        'outer: while !rest.is_empty() {
            for (text, token) in &TOKENS {
                if let Some(after) = rest.strip_prefix(text) {
                    if tokens.contains(token) {
                        return Err(TimeDirError::Repeated(text));
                    }
                    tokens.push(token.clone());
                    rest = after;
                    continue 'outer;
                }
            }
            let c = rest.chars().next().unwrap_or_default();
            if !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '=' | '.' | '/')) {
                return Err(TimeDirError::BadChar(c));
            }
            match tokens.last_mut() {
                Some(Token::Literal(s)) => s.push(c),
                _ => tokens.push(Token::Literal(c.to_string())),
            }
            rest = &rest[c.len_utf8()..];
        }
        let has = |t: &Token| tokens.contains(t);
        if !has(&Token::Year) {
            return Err(TimeDirError::NoYear);
        }
        let chain = [
            (Token::Month, Token::Year),
            (Token::Day, Token::Month),
            (Token::Hour, Token::Day),
            (Token::Minute, Token::Hour),
        ];
        for (t, needs) in &chain {
            if has(t) && !has(needs) {
                return Err(TimeDirError::MissingLevel {
                    token: token_name(t),
                    needs: token_name(needs),
                });
            }
        }
        let granularity = if has(&Token::Minute) {
            Granularity::Minute
        } else if has(&Token::Hour) {
            Granularity::Hour
        } else if has(&Token::Day) {
            Granularity::Day
        } else if has(&Token::Month) {
            Granularity::Month
        } else {
            Granularity::Year
        };
        Ok(Self {
            tokens,
            pattern: pattern.to_string(),
            granularity,
        })
    }

    pub fn granularity(&self) -> Granularity {
        self.granularity
    }

    /// Number of `/`-separated levels a rendered directory has.
    pub fn depth(&self) -> usize {
        self.pattern.matches('/').count() + 1
    }

    /// The start of the period (in local time of `tz`) that holds `ts_ms`; two instants share a
    /// directory exactly when their period starts are equal, and a later period sorts later.
    pub fn period_start(&self, ts_ms: i64, tz: Tz) -> NaiveDateTime {
        let local = local_time(ts_ms, tz);
        truncate(local, self.granularity)
    }

    /// Renders the directory of a period start returned by [`Self::period_start`].
    pub fn render(&self, period: NaiveDateTime) -> String {
        let mut out = String::with_capacity(self.pattern.len() + 4);
        for t in &self.tokens {
            match t {
                Token::Literal(s) => out.push_str(s),
                Token::Year => out.push_str(&format!("{:04}", period.year())),
                Token::Month => out.push_str(&format!("{:02}", period.month())),
                Token::Day => out.push_str(&format!("{:02}", period.day())),
                Token::Hour => out.push_str(&format!("{:02}", period.hour())),
                Token::Minute => out.push_str(&format!("{:02}", period.minute())),
            }
        }
        out
    }

    /// The UTC span `[start, end)` in ms of a period, when both ends are unambiguous local
    /// times: every instant inside it then belongs to this period, so a caller may skip
    /// [`Self::period_start`] for timestamps in the span (the dump hot path does).
    pub fn exact_span(&self, period: NaiveDateTime, tz: Tz) -> Option<(i64, i64)> {
        let single = |t: NaiveDateTime| match tz.from_local_datetime(&t) {
            LocalResult::Single(x) => Some(x.timestamp_millis()),
            _ => None,
        };
        Some((
            single(period)?,
            single(next_period(period, self.granularity)?)?,
        ))
    }

    /// Parses a rendered directory back into the UTC span `[start, end)` it covers, or `None`
    /// when the text does not follow the pattern.
    pub fn parse_dir(&self, dir: &str, tz: Tz) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let (mut y, mut mo, mut d, mut h, mut mi) = (None, 1u32, 1u32, 0u32, 0u32);
        let mut rest = dir;
        for (i, t) in self.tokens.iter().enumerate() {
            match t {
                Token::Literal(s) => rest = rest.strip_prefix(s.as_str())?,
                Token::Year => {
                    // `render` pads years to four digits, so years from 10000 on take five:
                    // the year is the digit run minus what the tokens right after it need.
                    let run = rest.bytes().take_while(u8::is_ascii_digit).count();
                    let after = self.tokens[i + 1..]
                        .iter()
                        .take_while(|t| !matches!(t, Token::Literal(_)))
                        .count();
                    let n = run.checked_sub(2 * after).filter(|n| *n >= 4)?;
                    let (v, r) = take_digits(rest, n)?;
                    y = Some(i32::try_from(v).ok()?);
                    rest = r;
                }
                other => {
                    let (v, r) = take_digits(rest, 2)?;
                    match other {
                        Token::Month => mo = v,
                        Token::Day => d = v,
                        Token::Hour => h = v,
                        _ => mi = v,
                    }
                    rest = r;
                }
            }
        }
        if !rest.is_empty() {
            return None;
        }
        let start = NaiveDate::from_ymd_opt(y?, mo, d)?.and_hms_opt(h, mi, 0)?;
        let end = next_period(start, self.granularity)?;
        Some((earliest_utc(start, tz)?, latest_utc(end, tz)?))
    }
}

fn take_digits(s: &str, n: usize) -> Option<(u32, &str)> {
    let head = s.get(..n)?;
    if n > 6 || !head.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((head.parse().ok()?, &s[n..]))
}

fn local_time(ts_ms: i64, tz: Tz) -> NaiveDateTime {
    let utc = DateTime::<Utc>::from_timestamp_millis(ts_ms).unwrap_or(DateTime::<Utc>::UNIX_EPOCH);
    utc.with_timezone(&tz).naive_local()
}

fn truncate(t: NaiveDateTime, g: Granularity) -> NaiveDateTime {
    let date = t.date();
    let (mo, d) = match g {
        Granularity::Year => (1, 1),
        Granularity::Month => (date.month(), 1),
        _ => (date.month(), date.day()),
    };
    let (h, mi) = match g {
        Granularity::Hour => (t.hour(), 0),
        Granularity::Minute => (t.hour(), t.minute()),
        _ => (0, 0),
    };
    NaiveDate::from_ymd_opt(date.year(), mo, d)
        .and_then(|d| d.and_hms_opt(h, mi, 0))
        .unwrap_or(t)
}

fn next_period(start: NaiveDateTime, g: Granularity) -> Option<NaiveDateTime> {
    match g {
        Granularity::Year => NaiveDate::from_ymd_opt(start.year() + 1, 1, 1)?.and_hms_opt(0, 0, 0),
        Granularity::Month => {
            let (y, m) = if start.month() == 12 {
                (start.year() + 1, 1)
            } else {
                (start.year(), start.month() + 1)
            };
            NaiveDate::from_ymd_opt(y, m, 1)?.and_hms_opt(0, 0, 0)
        }
        Granularity::Day => Some(start + chrono::Duration::days(1)),
        Granularity::Hour => Some(start + chrono::Duration::hours(1)),
        Granularity::Minute => Some(start + chrono::Duration::minutes(1)),
    }
}

/// Local times in a DST gap or overlap map to the widest UTC span, so skipping stays safe.
fn earliest_utc(t: NaiveDateTime, tz: Tz) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&t) {
        LocalResult::Single(x) => Some(x.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, b) => Some(a.min(b).with_timezone(&Utc)),
        LocalResult::None => Some(Utc.from_utc_datetime(&(t - chrono::Duration::hours(2)))),
    }
}

fn latest_utc(t: NaiveDateTime, tz: Tz) -> Option<DateTime<Utc>> {
    match tz.from_local_datetime(&t) {
        LocalResult::Single(x) => Some(x.with_timezone(&Utc)),
        LocalResult::Ambiguous(a, b) => Some(a.max(b).with_timezone(&Utc)),
        LocalResult::None => Some(Utc.from_utc_datetime(&(t + chrono::Duration::hours(2)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    #[test]
    fn standard_levels_render() {
        let t = ms("2026-11-29T07:05:09Z");
        let cases = [
            ("yyyy", "2026"),
            ("yyyy/MM", "2026/11"),
            ("yyyy/MM/dd", "2026/11/29"),
            ("yyyy/MM/dd/HH", "2026/11/29/07"),
            ("yyyy/MM/dd/HH/mm", "2026/11/29/07/05"),
            ("dt=yyyy-MM-dd/hr=HH", "dt=2026-11-29/hr=07"),
        ];
        for (pattern, want) in cases {
            let f = TimeDirFormat::parse(pattern).unwrap();
            assert_eq!(f.render(f.period_start(t, Tz::UTC)), want, "{pattern}");
            assert_eq!(f.depth(), want.split('/').count());
        }
    }

    #[test]
    fn time_zone_moves_the_day() {
        let f = TimeDirFormat::parse("yyyy/MM/dd/HH").unwrap();
        let t = ms("2026-11-29T23:30:00Z");
        assert_eq!(f.render(f.period_start(t, Tz::UTC)), "2026/11/29/23");
        assert_eq!(
            f.render(f.period_start(t, chrono_tz::Asia::Tokyo)),
            "2026/11/30/08"
        );
        assert_eq!(
            f.render(f.period_start(t, chrono_tz::America::New_York)),
            "2026/11/29/18"
        );
    }

    #[test]
    fn rejects_bad_patterns_with_reasons() {
        use TimeDirError::*;
        assert_eq!(TimeDirFormat::parse(""), Err(Empty));
        assert_eq!(TimeDirFormat::parse("MM/dd"), Err(NoYear));
        assert_eq!(TimeDirFormat::parse("yyyy/yyyy"), Err(Repeated("yyyy")));
        assert_eq!(
            TimeDirFormat::parse("yyyy/dd"),
            Err(MissingLevel {
                token: "dd",
                needs: "MM"
            })
        );
        assert_eq!(
            TimeDirFormat::parse("yyyy/MM/dd/mm"),
            Err(MissingLevel {
                token: "mm",
                needs: "HH"
            })
        );
        assert_eq!(TimeDirFormat::parse("yyyy MM"), Err(BadChar(' ')));
        assert_eq!(TimeDirFormat::parse("/yyyy"), Err(BadSlash));
        assert_eq!(TimeDirFormat::parse("yyyy//MM"), Err(BadSlash));
        assert_eq!(TimeDirFormat::parse("../yyyy"), Err(DotDot));
    }

    #[test]
    fn later_records_have_later_periods() {
        let f = TimeDirFormat::parse("yyyy/MM/dd").unwrap();
        let a = f.period_start(ms("2026-11-29T23:59:59Z"), Tz::UTC);
        let b = f.period_start(ms("2026-11-30T00:00:00Z"), Tz::UTC);
        let c = f.period_start(ms("2026-11-29T00:00:00Z"), Tz::UTC);
        assert!(b > a);
        assert_eq!(a, c);
    }

    #[test]
    fn parse_dir_gives_the_span() {
        let f = TimeDirFormat::parse("dt=yyyy-MM-dd/hr=HH").unwrap();
        let (s, e) = f.parse_dir("dt=2026-11-29/hr=07", Tz::UTC).unwrap();
        assert_eq!(s.to_rfc3339(), "2026-11-29T07:00:00+00:00");
        assert_eq!(e.to_rfc3339(), "2026-11-29T08:00:00+00:00");
        assert!(f.parse_dir("dt=2026-11-29/hr=7", Tz::UTC).is_none());
        assert!(f.parse_dir("dt=2026-11-29/hr=07x", Tz::UTC).is_none());
        assert!(f.parse_dir("2026/11/29", Tz::UTC).is_none());

        let m = TimeDirFormat::parse("yyyy/MM").unwrap();
        let (s, e) = m.parse_dir("2026/12", Tz::UTC).unwrap();
        assert_eq!(s.to_rfc3339(), "2026-12-01T00:00:00+00:00");
        assert_eq!(e.to_rfc3339(), "2027-01-01T00:00:00+00:00");

        let d = TimeDirFormat::parse("yyyy/MM/dd").unwrap();
        let (s, _) = d.parse_dir("2026/11/29", chrono_tz::Asia::Tokyo).unwrap();
        assert_eq!(s.to_rfc3339(), "2026-11-28T15:00:00+00:00");
    }

    #[test]
    fn exact_span_agrees_with_period_start() {
        let cases = [
            ("yyyy/MM/dd/HH", chrono_tz::Europe::Berlin),
            ("yyyy/MM/dd", chrono_tz::America::New_York),
            ("yyyy/MM", Tz::UTC),
            ("yyyy/MM/dd/HH/mm", chrono_tz::Asia::Kolkata),
        ];
        // hours around both 2026 Berlin transitions and a month end
        let starts = [
            ms("2026-03-29T00:00:00Z"),
            ms("2026-10-25T00:00:00Z"),
            ms("2026-11-30T22:00:00Z"),
        ];
        for (pattern, tz) in cases {
            let f = TimeDirFormat::parse(pattern).unwrap();
            for start in starts {
                for step in 0..(4 * 60) {
                    let t = start + step * 60_000 + 17_000;
                    let period = f.period_start(t, tz);
                    if let Some((a, b)) = f.exact_span(period, tz) {
                        assert!(a <= t && t < b, "{pattern} {tz}: {t} outside its own span");
                        for probe in [a, b - 1, (a + b) / 2] {
                            assert_eq!(
                                f.period_start(probe, tz),
                                period,
                                "{pattern} {tz}: span of {period} holds {probe} of another period"
                            );
                        }
                    }
                }
            }
        }
        let hour = TimeDirFormat::parse("yyyy/MM/dd/HH").unwrap();
        let ambiguous = NaiveDate::from_ymd_opt(2026, 10, 25)
            .unwrap()
            .and_hms_opt(2, 0, 0)
            .unwrap();
        assert_eq!(
            hour.exact_span(ambiguous, chrono_tz::Europe::Berlin),
            None,
            "the repeated hour has no single span"
        );
    }

    #[test]
    fn render_and_parse_agree() {
        let f = TimeDirFormat::parse("yyyy/MM/dd/HH/mm").unwrap();
        for t in [
            0i64,
            1_700_000_000_000,
            ms("2026-03-29T01:30:00Z"),
            ms("2026-10-25T00:30:00Z"),
        ] {
            for tz in [Tz::UTC, chrono_tz::Europe::Berlin] {
                let dir = f.render(f.period_start(t, tz));
                let (s, e) = f.parse_dir(&dir, tz).unwrap();
                assert!(
                    s.timestamp_millis() <= t && t < e.timestamp_millis(),
                    "{dir} {tz}"
                );
            }
        }
    }

    #[test]
    fn five_digit_years_round_trip() {
        // 10000-03-04T05:06:00Z: dump renders five digits; restore must read them back.
        let t = NaiveDate::from_ymd_opt(10000, 3, 4)
            .and_then(|d| d.and_hms_opt(5, 6, 0))
            .unwrap()
            .and_utc()
            .timestamp_millis();
        for pattern in ["yyyy/MM/dd", "yyyyMMdd/HH", "dt=yyyy-MM-dd/HHmm", "yyyy"] {
            let f = TimeDirFormat::parse(pattern).unwrap();
            let dir = f.render(f.period_start(t, Tz::UTC));
            assert!(dir.contains("10000"), "{pattern}: {dir}");
            let (s, e) = f
                .parse_dir(&dir, Tz::UTC)
                .unwrap_or_else(|| panic!("{pattern}: {dir} not parsed"));
            assert!(
                s.timestamp_millis() <= t && t < e.timestamp_millis(),
                "{dir}"
            );
        }
        let f = TimeDirFormat::parse("yyyyMMdd").unwrap();
        assert_eq!(
            f.parse_dir("2026123", Tz::UTC),
            None,
            "too short for yyyyMMdd"
        );
        assert!(f.parse_dir("20261202", Tz::UTC).is_some());
    }
}
