//! Times in trust configuration: epoch microseconds inside, RFC 3339 text
//! (`2025-06-01T12:00:00Z`) in files and messages.

use std::time::{Duration, UNIX_EPOCH};

/// `micros` as RFC 3339 UTC text, to the microsecond when it has any.
pub fn format_time(micros: u64) -> String {
    let time = UNIX_EPOCH + Duration::from_micros(micros);
    if micros.is_multiple_of(1_000_000) {
        humantime::format_rfc3339_seconds(time).to_string()
    } else {
        humantime::format_rfc3339_micros(time).to_string()
    }
}

/// Text that is not an RFC 3339 time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a time: write it as RFC 3339 UTC, e.g. 2025-06-01T12:00:00Z")]
pub struct TimeParseError(pub String);

/// Parses RFC 3339 text (a `Z` or no zone means UTC) into epoch microseconds.
pub fn parse_time(text: &str) -> Result<u64, TimeParseError> {
    let bad = || TimeParseError(text.to_owned());
    let time = humantime::parse_rfc3339_weak(text.trim()).map_err(|_| bad())?;
    let since = time.duration_since(UNIX_EPOCH).map_err(|_| bad())?;
    u64::try_from(since.as_micros()).map_err(|_| bad())
}

/// Serde of an optional time as RFC 3339 text (absent when `None`).
pub(crate) mod rfc3339_opt {
    pub fn serialize<S: serde::Serializer>(micros: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match micros {
            Some(micros) => s.serialize_str(&super::format_time(*micros)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        let text = <Option<String> as serde::Deserialize>::deserialize(d)?;
        text.map(|t| super::parse_time(&t).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_through_text() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(
            parse_time("2025-06-01T12:00:00Z"),
            Ok(1_748_779_200_000_000)
        );
        let precise = 1_748_779_200_123_456;
        assert_eq!(parse_time(&format_time(precise)), Ok(precise));
        assert!(parse_time("yesterday").is_err());
    }
}
