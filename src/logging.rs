//! Logging to stderr: text or JSON lines, filtered by RUST_LOG (default `info`).

use tracing_subscriber::{EnvFilter, fmt};

use crate::cli::LogFormat;

/// `info`, without kube's own error line for each failed request: metainit logs every
/// failure itself, with what it does about it.
pub const DEFAULT_FILTER: &str =
    "info,kube_client::client::builder=off,kube_runtime::watcher=error";

pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
