//! The rules a record's headers follow on every backend: Apache Iggy's
//! limits on user headers, so a record one backend accepts, the other
//! accepts too.

use agdx_wire::{HeaderKind, Headers};

use super::LogError;

/// Longest header name or value, in bytes.
pub(crate) const MAX_HEADER_FIELD: usize = 255;

/// Most bytes the headers of one record take in Iggy's header block
/// (Iggy's `MAX_USER_HEADERS_SIZE`).
pub(crate) const MAX_HEADERS_BYTES: usize = 100_000;

/// Bytes before each name and each value in Iggy's header block: a kind
/// code and a u32 length.
pub(crate) const FIELD_FRAMING: usize = 5;

/// The size of `headers` in Iggy's header block.
pub(crate) fn block_size(headers: &Headers) -> usize {
    headers
        .iter()
        .map(|(name, value)| 2 * FIELD_FRAMING + name.len() + value.bytes.len())
        .sum()
}

/// Checks `headers` against Iggy's rules: names and values of 1 to
/// [`MAX_HEADER_FIELD`] bytes, each name at most once, fixed-size kinds with
/// exactly their width, string values in UTF-8, and at most
/// [`MAX_HEADERS_BYTES`] in all.
pub(crate) fn check_headers(headers: &Headers) -> Result<(), LogError> {
    for (name, value) in headers {
        if name.is_empty() || name.len() > MAX_HEADER_FIELD {
            return Err(LogError::InvalidInput(format!(
                "header name {name:?} has {} bytes; header names have 1 to {MAX_HEADER_FIELD} bytes",
                name.len()
            )));
        }
        let len = value.bytes.len();
        if let Some(width) = value.kind.fixed_width()
            && width != len
        {
            return Err(LogError::InvalidInput(format!(
                "header '{name}' is a {} value of {len} bytes; that kind takes exactly {width} bytes",
                value.kind
            )));
        }
        if len == 0 || len > MAX_HEADER_FIELD {
            return Err(LogError::InvalidInput(format!(
                "header '{name}' has a value of {len} bytes; header values have 1 to {MAX_HEADER_FIELD} bytes (put larger data in the payload)"
            )));
        }
        if value.kind == HeaderKind::String && std::str::from_utf8(&value.bytes).is_err() {
            return Err(LogError::InvalidInput(format!(
                "header '{name}' is a string value that is not valid UTF-8; send it as a raw value"
            )));
        }
    }
    if let Some(twice) = repeated_name(headers) {
        return Err(LogError::InvalidInput(format!(
            "header '{twice}' appears twice on one record; give each header name one value"
        )));
    }
    let size = block_size(headers);
    if size > MAX_HEADERS_BYTES {
        return Err(LogError::InvalidInput(format!(
            "the headers take {size} bytes ({FIELD_FRAMING} bytes of framing before each name and value included); a record's headers take at most {MAX_HEADERS_BYTES} bytes, so put the rest in the payload"
        )));
    }
    Ok(())
}

/// A name `headers` hold more than once, if any. A record carries a few
/// headers (four on a command), so each is compared with those before it,
/// with nothing allocated; many are sorted first.
fn repeated_name(headers: &Headers) -> Option<&str> {
    const COMPARED_IN_PLACE: usize = 16;
    if headers.len() <= COMPARED_IN_PLACE {
        return headers.iter().enumerate().find_map(|(i, (name, _))| {
            headers[..i]
                .iter()
                .any(|(earlier, _)| earlier == name)
                .then_some(name.as_ref())
        });
    }
    let mut names: Vec<&str> = headers.iter().map(|(name, _)| name.as_ref()).collect();
    names.sort_unstable();
    names
        .windows(2)
        .find(|pair| pair[0] == pair[1])
        .map(|pair| pair[0])
}

/// Asserts that headers a backend read back name the agent record keys by
/// their constants (borrowed: reading a record allocates nothing for its
/// names) and any other name owned.
#[cfg(test)]
pub(crate) fn assert_names_as_read(headers: &Headers) {
    for (name, _) in headers {
        let borrowed = matches!(name, std::borrow::Cow::Borrowed(_));
        let known = agdx_wire::agent_record_header_kind(name).is_some();
        assert_eq!(borrowed, known, "header {name:?}");
    }
}

/// Bytes a header reader may meet from another client or a damaged file:
/// any bytes, and `valid` with one byte changed, and cut short.
#[cfg(test)]
pub(crate) fn hostile(valid: Vec<u8>) -> impl proptest::strategy::Strategy<Value = [Vec<u8>; 3]> {
    use proptest::prelude::*;
    let len = valid.len();
    (
        proptest::collection::vec(any::<u8>(), 0..300),
        0..len,
        any::<u8>(),
    )
        .prop_map(move |(noise, at, byte)| {
            let mut changed = valid.clone();
            changed[at] = byte;
            [noise, changed, valid[..at].to_vec()]
        })
}

#[cfg(test)]
mod tests {
    use agdx_wire::{HeaderBytes, HeaderValue};

    use super::*;

    fn refused(headers: Headers) -> String {
        match check_headers(&headers) {
            Err(LogError::InvalidInput(message)) => message,
            other => panic!("{headers:?} passed: {other:?}"),
        }
    }

    #[test]
    fn accepts_the_agdx_headers() {
        let headers = vec![
            ("agdx.ct".into(), HeaderValue::u8(3)),
            ("agdx.av".into(), HeaderValue::u32(1)),
            ("gen_ai.conversation.id".into(), HeaderValue::u128(7)),
            ("agdx.to".into(), HeaderValue::string("billing")),
        ];
        check_headers(&headers).unwrap();
        check_headers(&Vec::new()).unwrap();
    }

    #[test]
    fn refuses_what_iggy_refuses() {
        let long = "x".repeat(MAX_HEADER_FIELD + 1);
        assert!(refused(vec![("".into(), HeaderValue::u8(1))]).contains("1 to 255"));
        assert!(refused(vec![(long.clone().into(), HeaderValue::u8(1))]).contains("1 to 255"));
        assert!(refused(vec![("a".into(), HeaderValue::string(""))]).contains("1 to 255"));
        assert!(refused(vec![("a".into(), HeaderValue::string(&long))]).contains("1 to 255"));
        let narrow = HeaderValue {
            kind: HeaderKind::Uint32,
            bytes: HeaderBytes::from_slice(&[1, 2]),
        };
        assert!(refused(vec![("a".into(), narrow)]).contains("exactly 4 bytes"));
        let not_utf8 = HeaderValue {
            kind: HeaderKind::String,
            bytes: HeaderBytes::from_slice(&[0xff]),
        };
        assert!(refused(vec![("a".into(), not_utf8)]).contains("UTF-8"));
        let twice = vec![
            ("a".into(), HeaderValue::u8(1)),
            ("b".into(), HeaderValue::u8(2)),
            ("a".into(), HeaderValue::u8(3)),
        ];
        assert!(refused(twice).contains("'a' appears twice"));
        for count in [2, 16, 17, 40] {
            let distinct: Headers = (0..count)
                .map(|n| (format!("h{n}").into(), HeaderValue::u8(1)))
                .collect();
            check_headers(&distinct).unwrap();
            let mut repeated = distinct;
            repeated[count - 1].0 = "h0".into();
            assert!(refused(repeated).contains("'h0' appears twice"), "{count}");
        }
        let many: Headers = (0..200)
            .map(|n| {
                (
                    format!("{n:0>255}").into(),
                    HeaderValue::string(&long[..255]),
                )
            })
            .collect();
        assert!(refused(many).contains("at most 100000 bytes"));
    }
}
