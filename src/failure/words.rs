//! A failed request in words: one line for a log or a message, and the server's answer as
//! log fields of their own.

/// kube's reason for an error answer whose body is not a Status (a proxy's HTML page,
/// a plain-text 404, an empty body).
pub const NOT_A_STATUS: &str = "Failed to parse error data";

/// An error answer's body that is not a Status, in words: never a bare colon.
pub fn body_text(body: &str) -> String {
    let one_line = one_line(body, 120);
    if one_line.is_empty() {
        "an empty body, not a Status".into()
    } else {
        format!("a body that is not a Status: {one_line}")
    }
}

/// On one line, at most `n` characters.
pub fn one_line(s: &str, n: usize) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        format!("{}...", one_line.chars().take(n).collect::<String>())
    }
}

/// The server's answer behind an error, as log fields of their own: the HTTP code, and
/// the Status's reason when the server sent a Status (for any other body kube makes one up,
/// which is not the server's word).
pub fn status_fields(e: &kube::Error) -> (Option<u16>, Option<&str>) {
    match e {
        kube::Error::Api(s) if s.reason == NOT_A_STATUS => (Some(s.code), None),
        kube::Error::Api(s) => (
            Some(s.code),
            Some(s.reason.as_str()).filter(|r| !r.is_empty()),
        ),
        _ => (None, None),
    }
}

/// One line for a log or a message: a Status as `CODE Reason: message`, anything else
/// with its causes (kube's own text often hides them in a source).
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason == NOT_A_STATUS => {
            format!("{} with {}", s.code, body_text(&s.message))
        }
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                "Failure"
            } else {
                &s.reason
            };
            format!("{} {reason}: {}", s.code, s.message)
        }
        // Said as it is: no answer of the server failed.
        kube::Error::Service(kept) if kept.is::<crate::blocker::Kept>() => kept.to_string(),
        other => chain(other),
    }
}

/// A Status as one line, `CODE Reason: message`, leaving out what the server left empty
/// (an ERROR event with no reason once read "500 : ").
pub fn status_text(s: &kube::core::Status) -> String {
    let mut out = s.code.to_string();
    if !s.reason.is_empty() {
        out.push(' ');
        out.push_str(&s.reason);
    }
    if !s.message.is_empty() {
        out.push_str(": ");
        out.push_str(&s.message);
    }
    out
}

/// An error and its sources, as one line: kube's own message often hides the cause
/// ("client error (Connect)") in a source.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn a_status_leaves_out_what_is_empty() {
        let status = |code, reason: &str, message: &str| Status {
            code,
            reason: reason.into(),
            message: message.into(),
            ..Status::default()
        };
        assert_eq!(status_text(&status(500, "", "")), "500");
        assert_eq!(status_text(&status(500, "", "boom")), "500: boom");
        assert_eq!(
            status_text(&status(410, "Expired", "too old")),
            "410 Expired: too old"
        );
        assert_eq!(
            status_text(&status(503, "ServiceUnavailable", "")),
            "503 ServiceUnavailable"
        );
    }

    #[test]
    fn describe_gives_code_reason_and_message() {
        let e = kube::Error::Api(Box::new(Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "pods \"p\" is forbidden".into(),
            ..Status::default()
        }));
        assert_eq!(describe(&e), "403 Forbidden: pods \"p\" is forbidden");
        let not_a_status = |body: &str| {
            kube::Error::Api(Box::new(Status::failure(body, NOT_A_STATUS).with_code(502)))
        };
        assert_eq!(
            describe(&not_a_status("")),
            "502 with an empty body, not a Status"
        );
        assert_eq!(
            describe(&not_a_status("<html>\n Bad Gateway </html>")),
            "502 with a body that is not a Status: <html> Bad Gateway </html>"
        );
        assert_eq!(status_fields(&e), (Some(403), Some("Forbidden")));
        assert_eq!(
            status_fields(&not_a_status("")),
            (Some(502), None),
            "kube's made-up reason is not the server's"
        );
        assert_eq!(
            status_fields(&kube::Error::LinesCodecMaxLineLengthExceeded),
            (None, None)
        );
    }
}
