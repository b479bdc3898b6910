//! Go duration strings (`metav1.Duration` in v1beta1) and whole seconds (v1beta2).
//!
//! Parsing accepts exactly what Go's `time.ParseDuration` accepts; formatting writes what Go's
//! `time.Duration.String()` writes, so a value the Go providers wrote reads back unchanged.

use std::fmt::Write as _;

const NANOSECOND: u64 = 1;
const MICROSECOND: u64 = 1_000 * NANOSECOND;
const MILLISECOND: u64 = 1_000 * MICROSECOND;
const SECOND: u64 = 1_000 * MILLISECOND;
const MINUTE: u64 = 60 * SECOND;
const HOUR: u64 = 60 * MINUTE;

/// Why a string is not a Go duration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Empty, or not a sequence of decimal numbers each followed by a unit.
    #[error("expected numbers with units such as h, m, s, ms, us or ns")]
    Syntax,
    /// A number is not followed by a unit.
    #[error("a number has no unit")]
    MissingUnit,
    /// The unit is none of ns, us, µs, ms, s, m, h.
    #[error("unknown unit {0:?}")]
    UnknownUnit(String),
    /// The duration does not fit in 64 bits of nanoseconds (about 292 years).
    #[error("the duration is out of range")]
    Overflow,
}

fn unit_nanos(unit: &str) -> Option<u64> {
    Some(match unit {
        "ns" => NANOSECOND,
        // Go accepts the micro sign (U+00B5) and the Greek letter mu (U+03BC).
        "us" | "\u{b5}s" | "\u{3bc}s" => MICROSECOND,
        "ms" => MILLISECOND,
        "s" => SECOND,
        "m" => MINUTE,
        "h" => HOUR,
        _ => return None,
    })
}

/// Parses a Go duration such as `1h2m3.5s`, `-10m` or `500ms` into nanoseconds.
pub fn parse(text: &str) -> Result<i64, DurationError> {
    const LIMIT: u64 = 1 << 63;
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(DurationError::Syntax);
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let bytes = rest.as_bytes();
        if !(bytes[0] == b'.' || bytes[0].is_ascii_digit()) {
            return Err(DurationError::Syntax);
        }
        let digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
        let mut whole: u64 = 0;
        for digit in &bytes[..digits] {
            whole = whole
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(digit - b'0')))
                .filter(|v| *v <= LIMIT)
                .ok_or(DurationError::Overflow)?;
        }
        rest = &rest[digits..];
        // The fraction keeps the digits that fit; later ones cannot change the result.
        let (mut fraction, mut scale, mut fraction_digits) = (0u64, 1f64, 0usize);
        if let Some(after_dot) = rest.strip_prefix('.') {
            let bytes = after_dot.as_bytes();
            fraction_digits = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
            let mut overflowed = false;
            for digit in &bytes[..fraction_digits] {
                if overflowed {
                    continue;
                }
                match fraction
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u64::from(digit - b'0')))
                    .filter(|v| *v <= LIMIT)
                {
                    Some(v) => {
                        fraction = v;
                        scale *= 10.0;
                    }
                    None => overflowed = true,
                }
            }
            rest = &after_dot[fraction_digits..];
        }
        if digits == 0 && fraction_digits == 0 {
            return Err(DurationError::Syntax);
        }
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| *c == '.' || c.is_ascii_digit())
            .map_or(rest.len(), |(i, _)| i);
        if unit_len == 0 {
            return Err(DurationError::MissingUnit);
        }
        let unit = &rest[..unit_len];
        let unit_value =
            unit_nanos(unit).ok_or_else(|| DurationError::UnknownUnit(unit.to_owned()))?;
        rest = &rest[unit_len..];
        if whole > LIMIT / unit_value {
            return Err(DurationError::Overflow);
        }
        let mut value = whole * unit_value;
        if fraction > 0 {
            // Float arithmetic like Go's: exact for every fraction a person writes.
            value += (fraction as f64 * (unit_value as f64 / scale)) as u64;
            if value > LIMIT {
                return Err(DurationError::Overflow);
            }
        }
        total = total
            .checked_add(value)
            .filter(|v| *v <= LIMIT)
            .ok_or(DurationError::Overflow)?;
    }
    if negative {
        // 1<<63 nanoseconds negated is exactly i64::MIN.
        Ok((total as i64).wrapping_neg())
    } else {
        i64::try_from(total).map_err(|_| DurationError::Overflow)
    }
}

/// Writes `value / 10^precision` as a fraction without trailing zeros (`.5`, or nothing) and
/// returns the integer part.
fn push_fraction(out: &mut String, value: u64, precision: u32) -> u64 {
    let divisor = 10u64.pow(precision);
    let fraction = value % divisor;
    if fraction != 0 {
        let digits = format!("{fraction:0width$}", width = precision as usize);
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    value / divisor
}

/// Formats nanoseconds as Go's `time.Duration.String()` does, e.g. `10m0s`, `1h0m0s`, `1.5s`, `500ms`.
pub fn format(nanos: i64) -> String {
    let magnitude = nanos.unsigned_abs();
    let mut out = String::new();
    if nanos < 0 {
        out.push('-');
    }
    if magnitude == 0 {
        return "0s".to_owned();
    }
    if magnitude < SECOND {
        let (precision, unit) = if magnitude < MICROSECOND {
            (0, "ns")
        } else if magnitude < MILLISECOND {
            (3, "\u{b5}s")
        } else {
            (6, "ms")
        };
        let mut fraction = String::new();
        let whole = push_fraction(&mut fraction, magnitude, precision);
        let _ = write!(out, "{whole}{fraction}{unit}");
        return out;
    }
    let mut fraction = String::new();
    let seconds = push_fraction(&mut fraction, magnitude, 9);
    let (hours, minutes, seconds) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    if hours > 0 {
        let _ = write!(out, "{hours}h{minutes}m");
    } else if minutes > 0 {
        let _ = write!(out, "{minutes}m");
    }
    let _ = write!(out, "{seconds}{fraction}s");
    out
}

/// Whole seconds of a Go duration, truncated toward zero and capped to the `i32` range.
pub fn to_seconds(text: &str) -> Result<i32, DurationError> {
    let seconds = parse(text)? / SECOND as i64;
    Ok(seconds.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32)
}

/// The Go duration string of whole seconds, e.g. 600 → `10m0s`.
pub fn from_seconds(seconds: i32) -> String {
    format(i64::from(seconds) * SECOND as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_go_parses() {
        let cases: &[(&str, i64)] = &[
            ("0", 0),
            ("-0", 0),
            ("0s", 0),
            ("5s", 5 * SECOND as i64),
            ("+5s", 5 * SECOND as i64),
            ("-5s", -5 * SECOND as i64),
            ("10m", 10 * MINUTE as i64),
            ("10m0s", 10 * MINUTE as i64),
            ("1h2m3s", (HOUR + 2 * MINUTE + 3 * SECOND) as i64),
            ("1.5h", (HOUR + 30 * MINUTE) as i64),
            ("1.004s", 1_004_000_000),
            (".5s", 500_000_000),
            ("5.s", 5 * SECOND as i64),
            ("500ms", 500_000_000),
            ("10us", 10_000),
            ("10\u{b5}s", 10_000),
            ("10\u{3bc}s", 10_000),
            ("3ns", 3),
            ("1h1h", 2 * HOUR as i64),
            ("2m3.25s4ms", 123_254_000_000),
            ("9223372036854775807ns", i64::MAX),
            ("-9223372036854775808ns", i64::MIN),
            ("0.100000000000000000000h", 6 * MINUTE as i64),
        ];
        for (text, nanos) in cases {
            assert_eq!(parse(text), Ok(*nanos), "{text}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        let cases: &[(&str, DurationError)] = &[
            ("", DurationError::Syntax),
            ("-", DurationError::Syntax),
            ("s", DurationError::Syntax),
            (".s", DurationError::Syntax),
            ("+.s", DurationError::Syntax),
            ("1", DurationError::MissingUnit),
            ("10m5", DurationError::MissingUnit),
            ("1d", DurationError::UnknownUnit("d".into())),
            ("3 s", DurationError::UnknownUnit(" s".into())),
            ("1h-5m", DurationError::UnknownUnit("h-".into())),
            ("9223372036854775808ns", DurationError::Overflow),
            ("3000000h", DurationError::Overflow),
            ("99999999999999999999s", DurationError::Overflow),
        ];
        for (text, error) in cases {
            assert_eq!(parse(text).as_ref(), Err(error), "{text}");
        }
    }

    #[test]
    fn formats_like_go() {
        let cases: &[(i64, &str)] = &[
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1\u{b5}s"),
            (2_200_000, "2.2ms"),
            (500_000_000, "500ms"),
            (SECOND as i64, "1s"),
            (1_500_000_000, "1.5s"),
            (600 * SECOND as i64, "10m0s"),
            (HOUR as i64, "1h0m0s"),
            ((HOUR + 2 * MINUTE + 3 * SECOND) as i64, "1h2m3s"),
            (90_061 * SECOND as i64, "25h1m1s"),
            (-5 * SECOND as i64, "-5s"),
            (-1_500_000, "-1.5ms"),
            (i64::MAX, "2562047h47m16.854775807s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ];
        for (nanos, text) in cases {
            assert_eq!(format(*nanos), *text, "{nanos}");
            assert_eq!(parse(text), Ok(*nanos), "{text} parses back");
        }
    }

    #[test]
    fn seconds_truncate_and_cap() {
        assert_eq!(to_seconds("10m"), Ok(600));
        assert_eq!(to_seconds("1.9s"), Ok(1));
        assert_eq!(to_seconds("-1.9s"), Ok(-1));
        assert_eq!(to_seconds("500ms"), Ok(0));
        assert_eq!(to_seconds("1000000h"), Ok(i32::MAX));
        assert_eq!(to_seconds("-1000000h"), Ok(i32::MIN));
        assert_eq!(to_seconds("ten minutes"), Err(DurationError::Syntax));
        assert_eq!(from_seconds(600), "10m0s");
        assert_eq!(from_seconds(0), "0s");
        assert_eq!(from_seconds(86_400), "24h0m0s");
        assert_eq!(from_seconds(i32::MIN), "-596523h14m8s");
        for seconds in [0, 1, 59, 60, 61, 3599, 3600, 86_399, i32::MAX, -7] {
            assert_eq!(to_seconds(&from_seconds(seconds)), Ok(seconds));
        }
    }
}
