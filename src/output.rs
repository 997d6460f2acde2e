//! What the commands print on stdout: `status`'s report, `--once`'s summary, the
//! `--check-config` line. A reader that has gone (`metainit status | head -1`) is not an
//! error: what it would have read is dropped, and the command ends as it would have.

use std::io::{ErrorKind, Write};

use crate::{Error, Result};

/// Writes `text` to stdout.
pub fn print(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(Error::Output(e.to_string())),
        _ => Ok(()),
    }
}
