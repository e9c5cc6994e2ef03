//! Who may read or change the files that hold secrets (signing keys, token
//! secrets, token lists) or decide whom to trust (the key registry): the
//! permission checks, in one place. Each looks at a file already open, so
//! what is checked is what is read.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;

/// The permission bits of `file` when its group or others may access it at
/// all: a secret must be its owner's alone.
pub(crate) fn shared(file: &File) -> std::io::Result<Option<u32>> {
    let mode = mode(file)?;
    Ok((mode & 0o077 != 0).then_some(mode))
}

/// The permission bits of `file` when anyone may write it: whoever can
/// change a trust file decides whom it trusts.
pub(crate) fn world_writable(file: &File) -> std::io::Result<Option<u32>> {
    let mode = mode(file)?;
    Ok((mode & 0o002 != 0).then_some(mode))
}

fn mode(file: &File) -> std::io::Result<u32> {
    Ok(file.metadata()?.permissions().mode() & 0o777)
}
