//! UTC calendar dates from Unix seconds, with no time-zone database.

use std::fmt;

/// A UTC calendar date.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Date {
    pub year: i32,
    pub month: u32,
    pub day: u32,
}

/// Days since 1970-01-01 → (year, month, day), Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

impl Date {
    /// The UTC date of a Unix time.
    pub fn from_unix_seconds(secs: i64) -> Date {
        let (year, month, day) = civil_from_days(secs.div_euclid(86_400));
        Date {
            year: year as i32,
            month,
            day,
        }
    }

    /// Parse `YYYY-MM-DD` (a real calendar date).
    pub fn parse(s: &str) -> Option<Date> {
        let mut it = s.split('-');
        let (y, m, d) = (it.next()?, it.next()?, it.next()?);
        if it.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
            return None;
        }
        let date = Date {
            year: y.parse().ok()?,
            month: m.parse().ok()?,
            day: d.parse().ok()?,
        };
        (date.month >= 1 && date.month <= 12 && date.day >= 1 && date.day <= date.month_days())
            .then_some(date)
    }

    fn month_days(&self) -> u32 {
        let leap = (self.year % 4 == 0 && self.year % 100 != 0) || self.year % 400 == 0;
        match self.month {
            2 if leap => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        }
    }

    /// Today, UTC, from the system clock.
    pub fn today() -> Date {
        Date::from_unix_seconds(unix_now())
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

/// Seconds since the Unix epoch (0 when the clock is before it).
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// RFC 3339 UTC timestamp (`2026-12-01T18:54:17Z`) of a Unix time.
pub fn rfc3339_utc(secs: i64) -> String {
    let d = Date::from_unix_seconds(secs);
    let rem = secs.rem_euclid(86_400);
    format!(
        "{d}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(Date::from_unix_seconds(0).to_string(), "1970-01-01");
        assert_eq!(
            Date::from_unix_seconds(951_782_400).to_string(),
            "2000-02-29"
        );
        assert_eq!(Date::from_unix_seconds(-86_400).to_string(), "1969-12-31");
        assert_eq!(rfc3339_utc(1_796_151_257), "2026-12-01T18:54:17Z");
        assert_eq!(Date::parse("2024-02-29").map(|d| d.day), Some(29));
        assert_eq!(Date::parse("2023-02-29"), None);
        assert_eq!(Date::parse("2023-2-01"), None);
    }
}
