//! Logging to stderr: text or JSON lines, filtered by RUST_LOG (default `info`).

use std::process::ExitCode;

use tracing_subscriber::{EnvFilter, fmt};

use crate::{Error, cli::LogFormat};

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
        match rfc3339_micros(now.as_secs(), now.subsec_micros()) {
            Some(text) => w.write_str(std::str::from_utf8(&text).map_err(|_| std::fmt::Error)?),
            // After the year 9999: the default timer's way.
            None => fmt::time::SystemTime.format_time(w),
        }
    }
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as k8s-openapi writes a `Time` (whole seconds, UTC); empty after
/// the year 9999.
pub(crate) fn rfc3339_seconds(secs: u64) -> String {
    let Some(text) = rfc3339_micros(secs, 0) else {
        return String::new();
    };
    let mut out = String::with_capacity(20);
    // The digits and separators are ASCII.
    out.extend(text[..19].iter().map(|&b| char::from(b)));
    out.push('Z');
    out
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` for `secs` after the Unix epoch (years up to 9999).
fn rfc3339_micros(secs: u64, micros: u32) -> Option<[u8; 27]> {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Days to the civil date (Howard Hinnant's `civil_from_days`, for days ≥ 0).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    if year > 9999 {
        return None;
    }
    let mut out = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut v: u64| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, rem / 3600);
    put(14, 2, rem % 3600 / 60);
    put(17, 2, rem % 60);
    put(20, 6, u64::from(micros));
    Some(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    /// The same text as the default timer, checked against jiff's RFC 3339 at
    /// microseconds over the whole range: leap days, ends of months and years, 1970, 9999.
    #[test]
    fn times_are_written_as_the_default_timer_writes_them() {
        let mut secs: Vec<u64> = vec![
            0,
            59,
            86_399,
            86_400,
            951_782_400,
            951_868_799,
            1_709_164_800,
            253_402_207_200,
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            secs.push(x % 253_402_207_200);
        }
        for (i, s) in secs.into_iter().enumerate() {
            let micros = (i as u32 * 7919) % 1_000_000;
            let ours = rfc3339_micros(s, micros).unwrap();
            let ts = Timestamp::new(s as i64, (micros * 1000) as i32).unwrap();
            assert_eq!(
                std::str::from_utf8(&ours).unwrap(),
                format!("{ts:.6}"),
                "{s}.{micros}"
            );
        }
        // jiff stops a day short of the end of 9999.
        assert_eq!(
            &rfc3339_micros(253_402_300_799, 999_999).unwrap(),
            b"9999-12-31T23:59:59.999999Z"
        );
        assert_eq!(rfc3339_micros(253_402_300_800, 0), None);
    }
}
