//! Who may read or change the files that hold secrets (signing keys, token
//! secrets, token lists) or decide whom to trust (the key registry): the
//! permission checks, in one place. A file is checked once open, so what
//! is checked is what is read.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use zeroize::Zeroizing;

/// Why [`read_text`] read nothing.
pub(crate) enum Refused {
    /// The file could not be opened or read.
    Io(std::io::Error),
    /// Its permission bits (`0o777` at most) are not allowed.
    Mode(u32),
}

/// Whether the group or others may access a file of `mode` at all: a
/// secret must be its owner's alone.
pub(crate) fn shared(mode: u32) -> bool {
    mode & 0o077 != 0
}

/// Whether anyone may write a file of `mode`: whoever can change a trust
/// file decides whom it trusts.
pub(crate) fn world_writable(mode: u32) -> bool {
    mode & 0o002 != 0
}

/// The text of the file at `path`, unless `refuse` says its permission
/// bits are wrong. Zeroed when dropped, as the text may be a secret.
pub(crate) fn read_text(
    path: &Path,
    refuse: fn(u32) -> bool,
) -> Result<Zeroizing<String>, Refused> {
    let file = std::fs::File::open(path).map_err(Refused::Io)?;
    let mode = file.metadata().map_err(Refused::Io)?.permissions().mode() & 0o777;
    if refuse(mode) {
        return Err(Refused::Mode(mode));
    }
    let mut text = Zeroizing::new(String::new());
    std::io::Read::read_to_string(&mut &file, &mut text).map_err(Refused::Io)?;
    Ok(text)
}
