//! Logging to stderr: text or JSON lines, filtered by RUST_LOG (default `info`).

use std::process::ExitCode;

use tracing_subscriber::{EnvFilter, fmt};

use crate::Error;

/// `--log-format`: how each line is written.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// `info`, without kube's own lines for failed requests, which dump Rust debug text
/// (`Status { status: Some(Failure), … }`, `Custom { kind: UnexpectedEof, … }`) for
/// things metainit logs itself, with what it does about them; and a watch stream
/// the server ends is simply resumed.
pub const DEFAULT_FILTER: &str =
    "info,kube_client::client=error,kube_client::client::builder=off,kube_runtime::watcher=error";

pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = fmt()
        .with_env_filter(filter)
        .with_timer(Utc)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

/// The time of a log line as tracing-subscriber's default timer writes it
/// (`2026-11-24T23:40:12.123456Z`: UTC, microseconds), digit by digit into a buffer
/// rather than through `write!` for each field: a line per cleared object, a tenth of
/// the line's cost.
struct Utc;

impl fmt::time::FormatTime for Utc {
    fn format_time(&self, w: &mut fmt::format::Writer<'_>) -> std::fmt::Result {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        match crate::text::rfc3339_micros(now.as_secs(), now.subsec_micros()) {
            Some(text) => w.write_str(std::str::from_utf8(&text).map_err(|_| std::fmt::Error)?),
            // After the year 9999: the default timer's way.
            None => fmt::time::SystemTime.format_time(w),
        }
    }
}

/// The one line that says why the process stops, in the log's format, and its exit code.
/// Written directly, not through the filter: `RUST_LOG=off` must not hide it.
pub fn fatal(format: LogFormat, e: &Error) -> ExitCode {
    fatal_with(format, e, e.exit_code())
}

/// As `fatal`, with the exit code given.
pub fn fatal_with(format: LogFormat, e: &Error, code: i32) -> ExitCode {
    final_line(format, &message(e), code)
}

/// The last line, `error: MESSAGE` or its JSON form, and the exit code.
pub fn final_line(format: LogFormat, message: &str, code: i32) -> ExitCode {
    match format {
        LogFormat::Text => eprintln!("error: {message}"),
        LogFormat::Json => eprintln!("{}", json_line(message, code)),
    }
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// The error as an operator reads it: an API error as `CODE Reason: message`, never
/// kube's debug dump of the Status.
pub fn message(e: &Error) -> String {
    match e {
        Error::Kube(k) => format!(
            "Kubernetes API request failed: {}",
            crate::failure::describe(k)
        ),
        other => other.to_string(),
    }
}

/// A fatal error as a JSON line shaped like the log's own (`timestamp`, `level`,
/// `message`, `target`), with the exit code.
pub fn json_line(message: &str, exit_code: i32) -> String {
    let text = |s: &str| serde_json::Value::from(s).to_string();
    format!(
        r#"{{"timestamp":{},"level":"ERROR","message":{},"exit_code":{exit_code},"target":"metainit"}}"#,
        text(&k8s_openapi::jiff::Timestamp::now().to_string()),
        text(message)
    )
}
