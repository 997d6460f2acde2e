//! `metainit status`: every object held back right now, labelled or not. Read-only.

use std::process::ExitCode;

use crate::{Error, Result, cli::StatusArgs};

pub async fn run(_args: StatusArgs) -> Result<ExitCode> {
    Err(Error::Config("metainit status is not available yet".into()))
}
