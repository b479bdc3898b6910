//! Durations on the command line: `90s`, `15m`, `1h` or plain seconds.

use std::time::Duration;

/// Parses `90s`, `15m`, `1h` or plain seconds; zero is refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 15m"))?;
    let seconds = match unit {
        "" | "s" => value,
        "m" => value * 60,
        "h" => value * 3600,
        _ => return Err(format!("{text:?}: unit must be s, m or h")),
    };
    if seconds == 0 {
        return Err(format!("{text:?}: the duration must be positive"));
    }
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_errors() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("0s").unwrap_err().contains("positive"));
        assert!(parse_duration("5d").unwrap_err().contains("unit must be"));
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .contains("not a duration")
        );
    }
}
