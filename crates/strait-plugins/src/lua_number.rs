//! Numbers as Lua reads and writes them, where Kong's behaviour shows
//! them on the wire: `tonumber` on a header, `tostring` (`%.14g`) in a
//! signed string or a StatsD line.

/// Lua's `tonumber` for what a header holds: decimal or `0x` hex.
pub(crate) fn parse(text: &str) -> Option<f64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let value = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok()? as f64,
        None if digits
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')) =>
        {
            digits.parse::<f64>().ok()?
        }
        None => return None,
    };
    Some(if negative { -value } else { value })
}

/// A number as Lua's `tostring` writes it (`%.14g`).
pub(crate) fn format(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        return format!("{}", value as i64);
    }
    let text = format!("{value:.14e}");
    let Some((mantissa, exponent)) = text.split_once('e') else {
        return text;
    };
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..14).contains(&exponent) {
        let decimals = (13 - exponent).max(0) as usize;
        let fixed = format!("{value:.decimals$}");
        return fixed.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
    format!(
        "{mantissa}e{}{:02}",
        if exponent < 0 { '-' } else { '+' },
        exponent.abs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_read_and_write_as_lua_does() {
        assert_eq!(parse("1614265330"), Some(1614265330.0));
        assert_eq!(parse("0x10"), Some(16.0));
        assert_eq!(parse("soon"), None);
        assert_eq!(format(1614265330.0), "1614265330");
        assert_eq!(format(1614265330.5), "1614265330.5");
        assert_eq!(format(0.1), "0.1");
    }
}
