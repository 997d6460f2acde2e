//! A 429's or 503's `Retry-After` header, carried into the error's `Status`.

use http::{
    HeaderValue, Response,
    header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER},
};
use kube::client::DynBody;
use tower::BoxError;

/// The `Status` in an error's body, or, when the body is not one (a proxy's page, plain
/// text), a `Status` with the text, as kube's `handle_api_errors` makes it.
pub fn status_of(code: http::StatusCode, body: &[u8]) -> kube::core::Status {
    let text = String::from_utf8_lossy(body);
    serde_json::from_str::<kube::core::Status>(&text).unwrap_or_else(|_| {
        kube::core::Status::failure(text.trim(), "Failed to parse error data")
            .with_code(code.as_u16())
    })
}

/// A 429's or 503's `Retry-After` header, carried into its `Status` as
/// `details.retryAfterSeconds`, where the failure table reads it: kube reads only the body,
/// and API Priority and Fairness answers 429 with a plain-text body and the header alone.
pub(super) async fn in_status(
    res: Response<Box<DynBody>>,
) -> std::result::Result<Response<Box<DynBody>>, BoxError> {
    use http_body_util::{BodyExt, Full};
    let code = res.status();
    let seconds = match code.as_u16() {
        429 | 503 => res
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u32>().ok()),
        _ => None,
    };
    let Some(seconds) = seconds.filter(|s| *s > 0) else {
        return Ok(res);
    };
    let (mut parts, body) = res.into_parts();
    let mut status = status_of(code, &body.collect().await?.to_bytes());
    match &mut status.details {
        Some(details) if details.retry_after_seconds > 0 => {}
        Some(details) => details.retry_after_seconds = seconds,
        None => {
            status.details = Some(kube::core::response::StatusDetails {
                name: String::new(),
                group: String::new(),
                kind: String::new(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: seconds,
            })
        }
    }
    parts.headers.remove(CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    let body =
        Full::from(serde_json::to_vec(&status)?).map_err(|never| -> BoxError { match never {} });
    Ok(Response::from_parts(parts, Box::new(body) as Box<DynBody>))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a request's caller sees after `retry_after_in_status`.
    async fn seen(code: u16, retry_after: Option<&str>, body: &str) -> kube::core::Status {
        use http_body_util::{BodyExt, Full};
        let mut res = Response::builder().status(code);
        if let Some(r) = retry_after {
            res = res.header(RETRY_AFTER, r);
        }
        let body = Full::from(body.to_string()).map_err(|never| -> BoxError { match never {} });
        let res = res.body(Box::new(body) as Box<DynBody>).unwrap();
        let res = in_status(res).await.unwrap();
        let code = res.status();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        status_of(code, &body)
    }

    #[tokio::test]
    async fn a_retry_after_header_reaches_the_status() {
        // API Priority and Fairness: plain text and the header.
        let apf = seen(
            429,
            Some("3"),
            "Too many requests, please try again later.\n",
        )
        .await;
        assert_eq!(apf.code, 429);
        assert_eq!(apf.message, "Too many requests, please try again later.");
        assert_eq!(apf.reason, "Failed to parse error data");
        assert_eq!(apf.details.map(|d| d.retry_after_seconds), Some(3));
        // A Status of its own: its retryAfterSeconds wins, its other fields are kept.
        let own = r#"{"kind":"Status","status":"Failure","code":429,"reason":"TooManyRequests",
            "message":"slow down","details":{"name":"p","retryAfterSeconds":5}}"#;
        let own = seen(429, Some("1"), own).await;
        assert_eq!(
            (own.reason.as_str(), own.message.as_str()),
            ("TooManyRequests", "slow down")
        );
        let details = own.details.unwrap();
        assert_eq!(
            (details.name.as_str(), details.retry_after_seconds),
            ("p", 5)
        );
        // One without: the header's.
        let bare = r#"{"kind":"Status","status":"Failure","code":503,"message":"starting"}"#;
        assert_eq!(
            seen(503, Some("2"), bare)
                .await
                .details
                .map(|d| d.retry_after_seconds),
            Some(2)
        );
        // Nothing to carry: the body as it came.
        assert_eq!(seen(429, None, "busy").await.details, None);
        assert_eq!(seen(429, Some("soon"), "busy").await.details, None);
        assert_eq!(seen(500, Some("4"), "boom").await.details, None);
    }
}
