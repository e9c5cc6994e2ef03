//! What an envelope's body can be made from.

use std::borrow::Cow;

use bytes::Bytes;

/// Bytes that can become an envelope's body: owned buffers and [`Bytes`]
/// are taken as they are, borrowed slices and text copied.
///
/// Every constructor that takes a body takes `impl IntoBody`, so a body can
/// be a byte literal, a `Vec<u8>`, text, or the body of another envelope
/// (a [`Bytes`], shared rather than copied).
///
/// ```
/// use agdx_wire::{Bytes, IntoBody};
/// assert_eq!(b"hi".into_body(), Bytes::from_static(b"hi"));
/// assert_eq!("hi".into_body(), vec![b'h', b'i'].into_body());
/// ```
pub trait IntoBody {
    /// The body.
    fn into_body(self) -> Bytes;
}

impl IntoBody for Bytes {
    fn into_body(self) -> Bytes {
        self
    }
}

impl IntoBody for &Bytes {
    fn into_body(self) -> Bytes {
        self.clone()
    }
}

impl IntoBody for Vec<u8> {
    fn into_body(self) -> Bytes {
        self.into()
    }
}

impl IntoBody for &Vec<u8> {
    fn into_body(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl IntoBody for Box<[u8]> {
    fn into_body(self) -> Bytes {
        self.into()
    }
}

impl IntoBody for &[u8] {
    fn into_body(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl<const N: usize> IntoBody for &[u8; N] {
    fn into_body(self) -> Bytes {
        Bytes::copy_from_slice(self)
    }
}

impl<const N: usize> IntoBody for [u8; N] {
    fn into_body(self) -> Bytes {
        Bytes::copy_from_slice(&self)
    }
}

impl IntoBody for String {
    fn into_body(self) -> Bytes {
        self.into()
    }
}

impl IntoBody for &String {
    fn into_body(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}

impl IntoBody for &str {
    fn into_body(self) -> Bytes {
        Bytes::copy_from_slice(self.as_bytes())
    }
}

impl IntoBody for Cow<'_, [u8]> {
    fn into_body(self) -> Bytes {
        match self {
            Cow::Borrowed(slice) => slice.into_body(),
            Cow::Owned(vec) => vec.into_body(),
        }
    }
}
