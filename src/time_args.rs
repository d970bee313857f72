//! Time as operators type it, on the command line and in the console:
//! lengths (`90d`, `2h30m`) and instants (RFC 3339, a date, `now`, or a
//! length ago).

use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};

/// A length of time: a number and a unit, repeated: `90d`, `2h30m`, `45s`,
/// `500ms`, `1w`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "invalid duration {text:?}: use a number and a unit (ms, s, m, h, d, w), e.g. 90d or 2h30m"
        )
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let millis_per = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 604_800_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        let millis = number.checked_mul(millis_per).ok_or_else(bad)?;
        total = total
            .checked_add(Duration::from_millis(millis))
            .ok_or_else(bad)?;
    }
    Ok(total)
}

/// An instant: RFC 3339 (`2026-03-01T10:00:00Z`), a date (midnight UTC),
/// `now`, or a length of time ago (`2h`, `90d`).
pub fn parse_instant(text: &str) -> Result<DateTime<Utc>, String> {
    let trimmed = text.trim();
    if trimmed == "now" {
        return Ok(Utc::now());
    }
    if let Ok(at) = DateTime::parse_from_rfc3339(trimmed) {
        return Ok(at.with_timezone(&Utc));
    }
    if let Ok(date) = NaiveDate::parse_from_str(trimmed, "%Y-%m-%d")
        && let Some(midnight) = date.and_hms_opt(0, 0, 0)
    {
        return Ok(midnight.and_utc());
    }
    match parse_duration(trimmed) {
        Ok(ago) => chrono::Duration::from_std(ago)
            .ok()
            .and_then(|ago| Utc::now().checked_sub_signed(ago))
            .ok_or_else(|| format!("{text:?} reaches too far back")),
        Err(_) => Err(format!(
            "invalid time {text:?}: use RFC 3339 (2026-03-01T10:00:00Z), a date (2026-03-01), now, or a time ago (2h, 90d)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_duration("2h30m"), Ok(Duration::from_secs(9_000)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("90").is_err());
        assert!(parse_duration("d").is_err());
        assert!(parse_duration("5y").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999w").is_err());
    }

    #[test]
    fn instants_parse_absolute_and_relative() {
        assert_eq!(
            parse_instant("2026-03-01T10:00:00+01:00").unwrap(),
            "2026-03-01T09:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(
            parse_instant("2026-03-01").unwrap(),
            "2026-03-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
        let two_hours_ago = parse_instant("2h").unwrap();
        let expected = Utc::now() - chrono::Duration::hours(2);
        assert!((two_hours_ago - expected).num_seconds().abs() < 5);
        assert!(parse_instant("yesterday").is_err());
    }
}
