//! nginx's `ngx_parse_http_time` (Kong's `ngx.parse_http_time`): the
//! RFC 1123, RFC 850 and asctime date forms, read as leniently as nginx
//! reads them (the weekday is skipped unchecked, anything after the time
//! or year is ignored).

#[derive(Clone, Copy, PartialEq)]
enum Form {
    Rfc822,
    Rfc850,
    Asctime,
}

/// Days in each month of a leap year (February checked apart).
const MONTH_DAYS: [i64; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// A position in the date text; reads past the end see a NUL, as nginx's
/// length checks make sure never matters for a valid date.
struct Cursor<'a> {
    bytes: &'a [u8],
    p: usize,
}

impl Cursor<'_> {
    fn at(&self, offset: usize) -> u8 {
        self.bytes.get(self.p + offset).copied().unwrap_or(0)
    }

    fn left(&self) -> usize {
        self.bytes.len().saturating_sub(self.p)
    }

    fn digit(&self, offset: usize) -> Option<i64> {
        let byte = self.at(offset);
        byte.is_ascii_digit().then(|| i64::from(byte - b'0'))
    }

    fn two_digits(&self, offset: usize) -> Option<i64> {
        Some(self.digit(offset)? * 10 + self.digit(offset + 1)?)
    }

    /// Skips the weekday (up to a `,`, or a space for asctime) and, except
    /// for asctime, reads the day: the form and the day (0 for asctime).
    fn weekday_and_day(&mut self) -> Option<(Form, i64)> {
        let mut asctime = false;
        while self.p < self.bytes.len() {
            match self.at(0) {
                b',' => break,
                b' ' => {
                    asctime = true;
                    break;
                }
                _ => self.p += 1,
            }
        }
        self.p += 1;
        while self.p < self.bytes.len() && self.at(0) == b' ' {
            self.p += 1;
        }
        if self.left() < 18 {
            return None;
        }
        if asctime {
            return Some((Form::Asctime, 0));
        }
        let day = self.two_digits(0)?;
        let form = match self.at(2) {
            b' ' if self.left() >= 20 => Form::Rfc822,
            b'-' => Form::Rfc850,
            _ => return None,
        };
        self.p += 3;
        Some((form, day))
    }

    /// The month (0 for January), told apart by nginx's few letters.
    fn month(&mut self, form: Form) -> Option<usize> {
        let month = match self.at(0) {
            b'J' if self.at(1) == b'a' => 0,
            b'J' if self.at(2) == b'n' => 5,
            b'J' => 6,
            b'F' => 1,
            b'M' if self.at(2) == b'r' => 2,
            b'M' => 4,
            b'A' if self.at(1) == b'p' => 3,
            b'A' => 7,
            b'S' => 8,
            b'O' => 9,
            b'N' => 10,
            b'D' => 11,
            _ => return None,
        };
        let separator = self.at(3);
        if (form == Form::Rfc822 && separator != b' ') || (form == Form::Rfc850 && separator != b'-') {
            return None;
        }
        self.p += 4;
        Some(month)
    }

    /// ` HH:MM:SS` as seconds into the day.
    fn clock(&mut self) -> Option<i64> {
        if self.at(0) != b' ' || self.at(3) != b':' || self.at(6) != b':' {
            return None;
        }
        let (hour, minute, second) = (self.two_digits(1)?, self.two_digits(4)?, self.two_digits(7)?);
        self.p += 9;
        (hour <= 23 && minute <= 59 && second <= 59).then_some(hour * 3600 + minute * 60 + second)
    }
}

/// Seconds since the epoch, or `None` when nginx would refuse the date.
pub(crate) fn parse(value: &str) -> Option<i64> {
    let mut cursor = Cursor {
        bytes: value.as_bytes(),
        p: 0,
    };
    let (form, mut day) = cursor.weekday_and_day()?;
    let month = cursor.month(form)?;
    let mut year = 0;
    match form {
        Form::Rfc822 => {
            year = cursor.two_digits(0)? * 100 + cursor.two_digits(2)?;
            cursor.p += 4;
        }
        Form::Rfc850 => {
            let short = cursor.two_digits(0)?;
            year = short + if short < 70 { 2000 } else { 1900 };
            cursor.p += 2;
        }
        Form::Asctime => {
            if cursor.at(0) == b' ' {
                cursor.p += 1;
            }
            day = cursor.digit(0)?;
            cursor.p += 1;
            if cursor.at(0) != b' ' {
                day = day * 10 + cursor.digit(0)?;
                cursor.p += 1;
            }
            if cursor.left() < 14 {
                return None;
            }
        }
    }
    let seconds = cursor.clock()?;
    if form == Form::Asctime {
        if cursor.at(0) != b' ' {
            return None;
        }
        year = cursor.two_digits(1)? * 100 + cursor.two_digits(3)?;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    if (day == 29 && month == 1 && !leap) || day > MONTH_DAYS[month] {
        return None;
    }
    Some(days_since_epoch(year, month as i64 + 1, day) * 86_400 + seconds)
}

/// Gauss's formula as nginx writes it: the new year moved to March 1.
fn days_since_epoch(year: i64, month: i64, day: i64) -> i64 {
    let (year, month) = if month <= 2 {
        (year - 1, month + 10)
    } else {
        (year, month - 2)
    };
    365 * year + year / 4 - year / 100 + year / 400 + 367 * month / 12 - 30 + day - 1 - 719_527 + 31 + 28
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn the_three_forms() {
        assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse("Sunday, 06-Nov-94 08:49:37 GMT"), Some(784_111_777));
        assert_eq!(parse("Sun Nov  6 08:49:37 1994"), Some(784_111_777));
        assert_eq!(parse("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(parse("Tue, 29 Feb 2028 23:59:59 GMT"), Some(1_835_481_599));
    }

    #[test]
    fn leniency_and_refusals() {
        // nginx checks neither the weekday nor the zone.
        assert_eq!(parse("Xyz, 06 Nov 1994 08:49:37 PST"), Some(784_111_777));
        for refused in [
            "",
            "yesterday",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Tue, 29 Feb 2027 08:49:37 GMT",
            "Sun, 06 Xov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08-49-37 GMT",
            "1994-11-06T08:49:37Z",
            "Sun, 06 Nov 1994 08:4",
        ] {
            assert_eq!(parse(refused), None, "{refused:?}");
        }
        // Every truncation of every form is refused, never read past the end.
        for full in [
            "Sun, 06 Nov 1994 08:49:37",
            "Sunday, 06-Nov-94 08:49:37",
            "Sun Nov  6 08:49:37 1994",
        ] {
            for end in 0..full.len() {
                assert_eq!(parse(&full[..end]), None, "{:?}", &full[..end]);
            }
            assert!(parse(full).is_some(), "{full}");
        }
    }
}
