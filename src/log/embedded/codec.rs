//! How one record's headers are stored, and the record checksum.
//!
//! Headers are kept in one blob, one entry after another:
//!
//! ```text
//! name length (u8) | name (UTF-8) | kind code (u8) | value length (u8) | value bytes
//! ```
//!
//! Kind codes are Apache Iggy's (`Raw` = 1 … `Float64` = 15). Headers pass
//! the checks both backends share (Iggy's limits, see
//! `crate::log::headers`) before they are stored, so a record the embedded
//! log accepts is one Iggy accepts too; those limits keep names and values
//! within one length byte. Headers are stored (and so read back) ordered by
//! name, which is also the order Iggy's map API returns them in.
//!
//! The checksum is xxh3-64 over the offset, the timestamp and the header
//! blob's length (little-endian u64 each), the header blob and the payload,
//! so a damaged payload, damaged headers and a record that moved all fail it.

use agdx_wire::{HeaderBytes, HeaderKind, HeaderName, HeaderValue, Headers, header_name};
use xxhash_rust::xxh3::Xxh3Default;

/// Iggy's code for a header kind.
fn kind_code(kind: HeaderKind) -> u8 {
    match kind {
        HeaderKind::Raw => 1,
        HeaderKind::String => 2,
        HeaderKind::Bool => 3,
        HeaderKind::Int8 => 4,
        HeaderKind::Int16 => 5,
        HeaderKind::Int32 => 6,
        HeaderKind::Int64 => 7,
        HeaderKind::Int128 => 8,
        HeaderKind::Uint8 => 9,
        HeaderKind::Uint16 => 10,
        HeaderKind::Uint32 => 11,
        HeaderKind::Uint64 => 12,
        HeaderKind::Uint128 => 13,
        HeaderKind::Float32 => 14,
        HeaderKind::Float64 => 15,
    }
}

/// The header kind with Iggy's code `code`.
fn kind_from_code(code: u8) -> Option<HeaderKind> {
    Some(match code {
        1 => HeaderKind::Raw,
        2 => HeaderKind::String,
        3 => HeaderKind::Bool,
        4 => HeaderKind::Int8,
        5 => HeaderKind::Int16,
        6 => HeaderKind::Int32,
        7 => HeaderKind::Int64,
        8 => HeaderKind::Int128,
        9 => HeaderKind::Uint8,
        10 => HeaderKind::Uint16,
        11 => HeaderKind::Uint32,
        12 => HeaderKind::Uint64,
        13 => HeaderKind::Uint128,
        14 => HeaderKind::Float32,
        15 => HeaderKind::Float64,
        _ => return None,
    })
}

/// Encodes `headers`, ordered by name; [`crate::log::check_append`] has
/// checked them.
pub(super) fn encode_headers(headers: &Headers) -> Vec<u8> {
    let mut sorted: Vec<&(HeaderName, HeaderValue)> = headers.iter().collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut out = Vec::with_capacity(
        headers
            .iter()
            .map(|(n, v)| 3 + n.len() + v.bytes.len())
            .sum(),
    );
    for (name, value) in sorted {
        // Lengths are 1 to 255 once checked, so each fits its one-byte prefix.
        out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(name.as_bytes());
        out.push(kind_code(value.kind));
        out.push(u8::try_from(value.bytes.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(&value.bytes);
    }
    out
}

/// Decodes a stored header blob; the error says what is wrong with it.
pub(super) fn decode_headers(mut blob: &[u8]) -> Result<Headers, String> {
    let mut headers = Headers::new();
    while !blob.is_empty() {
        let name = take_field(&mut blob, "header name")?;
        let name = header_name(
            std::str::from_utf8(name).map_err(|_| "a header name is not UTF-8".to_owned())?,
        );
        let (&code, rest) = blob
            .split_first()
            .ok_or_else(|| format!("header '{name}' has no kind"))?;
        blob = rest;
        let kind = kind_from_code(code)
            .ok_or_else(|| format!("header '{name}' has unknown kind code {code}"))?;
        let bytes = HeaderBytes::from_slice(take_field(&mut blob, "header value")?);
        headers.push((name, HeaderValue { kind, bytes }));
    }
    Ok(headers)
}

/// Splits a length-prefixed field off the front of `blob`.
fn take_field<'a>(blob: &mut &'a [u8], what: &str) -> Result<&'a [u8], String> {
    let (&len, rest) = blob
        .split_first()
        .ok_or_else(|| format!("a {what} is cut off"))?;
    let len = usize::from(len);
    if rest.len() < len {
        return Err(format!(
            "a {what} claims {len} bytes but only {} remain",
            rest.len()
        ));
    }
    let (field, rest) = rest.split_at(len);
    *blob = rest;
    Ok(field)
}

/// The checksum stored with a record.
pub(super) fn checksum(offset: u64, timestamp_micros: u64, headers: &[u8], payload: &[u8]) -> u64 {
    let mut hasher = Xxh3Default::new();
    hasher.update(&offset.to_le_bytes());
    hasher.update(&timestamp_micros.to_le_bytes());
    hasher.update(&(headers.len() as u64).to_le_bytes());
    hasher.update(headers);
    hasher.update(payload);
    hasher.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_sorted_by_name() {
        let headers: Headers = vec![
            ("z".into(), HeaderValue::u8(7)),
            ("agdx.av".into(), HeaderValue::u32(1)),
            ("conv".into(), HeaderValue::u128(u128::MAX - 5)),
            ("agdx.to".into(), HeaderValue::string("billing")),
        ];
        let blob = encode_headers(&headers);
        let mut expected = headers.clone();
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        let read = decode_headers(&blob).unwrap();
        assert_eq!(read, expected);
        crate::log::headers::assert_names_as_read(&read);
    }

    #[test]
    fn every_kind_code_round_trips() {
        for code in 0..=u8::MAX {
            if let Some(kind) = kind_from_code(code) {
                assert_eq!(kind_code(kind), code);
            }
        }
        assert_eq!((1..=15).filter_map(kind_from_code).count(), 15);
    }

    #[test]
    fn damaged_blobs_are_errors_not_panics() {
        let blob = encode_headers(&vec![("name".into(), HeaderValue::string("value"))]);
        for cut in 0..blob.len() {
            let _ = decode_headers(&blob[..cut]);
        }
        let mut bad_kind = blob.clone();
        bad_kind[5] = 99;
        assert!(
            decode_headers(&bad_kind)
                .unwrap_err()
                .contains("unknown kind")
        );
        assert!(decode_headers(&blob[..blob.len() - 1]).is_err());
    }

    #[test]
    fn checksum_covers_every_part() {
        let base = checksum(1, 2, b"h", b"p");
        assert_ne!(base, checksum(0, 2, b"h", b"p"));
        assert_ne!(base, checksum(1, 3, b"h", b"p"));
        assert_ne!(base, checksum(1, 2, b"H", b"p"));
        assert_ne!(base, checksum(1, 2, b"h", b"P"));
        assert_ne!(base, checksum(1, 2, b"", b"hp"));
    }

    proptest::proptest! {
        /// A stored header blob read back after damage: any bytes, and a
        /// valid blob with one byte changed or cut short, read as headers
        /// or an error, never a panic.
        #[test]
        fn any_blob_reads_without_panicking(
            blobs in crate::log::headers::hostile(encode_headers(&vec![
                ("agdx.ct".into(), HeaderValue::u8(3)),
                ("x-trace".into(), HeaderValue::string("value")),
            ])),
        ) {
            for blob in blobs {
                let _ = decode_headers(&blob);
            }
        }
    }
}
