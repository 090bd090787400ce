//! Kong's rate-limiting windows: UTC-aligned second, minute, hour, day,
//! calendar month and calendar year.

use crate::bundled::proxy_cache::http::days_from_civil;

/// Kong's periods with the `EXPIRATION` (seconds) its reset header uses.
pub(crate) const PERIODS: [(&str, i64); 6] = [
    ("second", 1),
    ("minute", 60),
    ("hour", 3600),
    ("day", 86_400),
    ("month", 2_592_000),
    ("year", 31_536_000),
];

/// The civil (year, month) of a day count since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64) {
    let (year, month, _) = strait_runtime::clock::civil_from_days(days);
    (year, i64::from(month))
}

/// The windows (Unix seconds, UTC) holding one instant: each period's
/// start (Kong's `timestamp.get_timestamps`) and end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Windows {
    pub starts: [i64; 6],
    pub ends: [i64; 6],
}

impl Windows {
    /// The windows of `now`, computed once per second per thread (the
    /// calendar arithmetic of months and years is most of their cost).
    pub fn at(now: i64) -> Windows {
        thread_local! {
            static LAST: std::cell::Cell<Option<(i64, Windows)>> = const { std::cell::Cell::new(None) };
        }
        LAST.with(|last| match last.get() {
            Some((at, windows)) if at == now => windows,
            _ => {
                let windows = Windows::compute(now);
                last.set(Some((now, windows)));
                windows
            }
        })
    }

    fn compute(now: i64) -> Windows {
        let day = now.div_euclid(86_400);
        let (year, month) = civil_from_days(day);
        let (next_year, next_month) = if month == 12 { (year + 1, 1) } else { (year, month + 1) };
        Windows {
            starts: [
                now,
                now - now.rem_euclid(60),
                now - now.rem_euclid(3600),
                day * 86_400,
                days_from_civil(year, month, 1) * 86_400,
                days_from_civil(year, 1, 1) * 86_400,
            ],
            ends: [
                now + 1,
                now - now.rem_euclid(60) + 60,
                now - now.rem_euclid(3600) + 3600,
                (day + 1) * 86_400,
                days_from_civil(next_year, next_month, 1) * 86_400,
                days_from_civil(year + 1, 1, 1) * 86_400,
            ],
        }
    }
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_align_to_utc_calendar_periods() {
        // 2024-02-29T13:45:30Z
        let now = 1_709_214_330;
        let windows = Windows::at(now);
        assert_eq!(windows.starts[0], now);
        assert_eq!(windows.starts[1], 1_709_214_300); // 13:45:00
        assert_eq!(windows.starts[2], 1_709_211_600); // 13:00:00
        assert_eq!(windows.starts[3], 1_709_164_800); // 2024-02-29
        assert_eq!(windows.starts[4], 1_706_745_600); // 2024-02-01
        assert_eq!(windows.starts[5], 1_704_067_200); // 2024-01-01
        assert_eq!(windows.ends[3], 1_709_251_200); // 2024-03-01
        assert_eq!(windows.ends[4], 1_709_251_200); // 2024-03-01: a 29-day month
        assert_eq!(windows.ends[5], 1_735_689_600); // 2025-01-01
        assert_eq!(Windows::at(0).starts[5], 0);
        // December's window ends with the year.
        let december = Windows::at(1_703_980_800); // 2023-12-31
        assert_eq!(december.ends[4], 1_704_067_200);
        assert_eq!(civil_from_days(days_from_civil(2000, 12, 31)), (2000, 12));
    }

    #[test]
    fn a_31_day_month_lasts_31_days() {
        let windows = Windows::at(1_704_067_200); // 2024-01-01
        assert_eq!(windows.ends[4] - windows.starts[4], 31 * 86_400);
    }
}
