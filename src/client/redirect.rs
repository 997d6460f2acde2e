//! A redirect, answered by the API server or by something in front of it, as an error that
//! names it: hyper does not follow redirects, and kube read a 307's page as the object it
//! asked for ("Error deserializing response"). An API server does not redirect its API
//! requests, so following one would only hide a misaddressed kubeconfig.

use http::{Response, StatusCode, header::LOCATION};
use kube::client::DynBody;
use tower::BoxError;

#[derive(Debug, thiserror::Error)]
#[error(
    "the server answered {code} redirecting to {location}: metainit does not follow \
     redirects; set the kubeconfig's server to the API server's own address"
)]
pub struct Redirected {
    pub code: StatusCode,
    pub location: String,
}

/// A 3xx answer as a `Redirected` error; any other answer as it is.
pub(super) async fn refuse(
    res: Response<Box<DynBody>>,
) -> std::result::Result<Response<Box<DynBody>>, BoxError> {
    if !res.status().is_redirection() {
        return Ok(res);
    }
    let location = res
        .headers()
        .get(LOCATION)
        .and_then(|l| l.to_str().ok())
        .map_or_else(|| "nowhere (no Location)".to_string(), str::to_string);
    Err(Box::new(Redirected {
        code: res.status(),
        location,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Empty};

    fn answer(code: u16, location: Option<&str>) -> Response<Box<DynBody>> {
        let body: Box<DynBody> = Box::new(Empty::new().map_err(|never| match never {}));
        let mut res = Response::builder().status(code);
        if let Some(l) = location {
            res = res.header(LOCATION, l);
        }
        res.body(body).unwrap()
    }

    #[tokio::test]
    async fn a_redirect_is_named_with_its_target() {
        let Err(err) = refuse(answer(307, Some("https://127.0.0.1:6443/api/v1/pods"))).await else {
            panic!("a 307 let through");
        };
        assert_eq!(
            err.to_string(),
            "the server answered 307 Temporary Redirect redirecting to \
             https://127.0.0.1:6443/api/v1/pods: metainit does not follow redirects; set the \
             kubeconfig's server to the API server's own address"
        );
        let Err(err) = refuse(answer(302, None)).await else {
            panic!("a 302 let through");
        };
        assert!(
            err.to_string()
                .contains("302 Found redirecting to nowhere (no Location)")
        );
        assert!(refuse(answer(200, None)).await.is_ok());
        assert!(refuse(answer(404, None)).await.is_ok());
    }
}
