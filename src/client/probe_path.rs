//! The probe's path: `probe`'s one plain-HTTP GET of a pod's endpoint, no API server
//! involved (its API requests take the `Client`): hyper's pooled client over a bare TCP
//! connector (the `http://` stack of `build` without kube's layers: no base URI, no
//! credentials, no limiter), bounded from the connect to the answer's last byte.

use std::time::Duration;

use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};

/// What a GET got: a status code and the body's first line, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Status {
        code: StatusCode,
        body: String,
    },
    /// No answer: the connection refused or reset, nothing within the timeout, not HTTP.
    Failed(String),
}

/// GETs `uri`, waiting at most `timeout` in all.
pub async fn get(uri: Uri, timeout: Duration) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let request = match Request::get(uri).body(Empty::<Bytes>::new()) {
        Ok(r) => r,
        Err(e) => return Answer::Failed(e.to_string()),
    };
    let exchange = async {
        let res = client.request(request).await.map_err(|e| why(&e))?;
        let code = res.status();
        let body = res.into_body().collect().await.map_err(|e| why(&e))?;
        let text = String::from_utf8_lossy(&body.to_bytes()).into_owned();
        Ok(Answer::Status {
            code,
            body: crate::failure::one_line(&text, 200),
        })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => Answer::Failed(e),
        Err(_) => Answer::Failed(format!(
            "no answer within {} (--timeout)",
            crate::text::duration(timeout)
        )),
    }
}

/// A failed exchange in words: the system's reason when there is one ("connection
/// refused"), else the whole chain.
fn why(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
                std::io::ErrorKind::ConnectionReset => "connection reset".into(),
                _ => io.to_string(),
            };
        }
        cur = err.source();
    }
    crate::failure::chain(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_status_a_refusal_and_a_silence() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut c, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = c.read(&mut buf).await;
            let answer = "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 28\r\n\r\nnot ready: not watching yet\n";
            c.write_all(answer.as_bytes()).await.unwrap();
            // The second connection is accepted and never answered.
            let (_held, _) = listener.accept().await.unwrap();
            std::future::pending::<()>().await;
        });
        let uri: Uri = format!("http://{addr}/readyz").parse().unwrap();
        let limit = Duration::from_millis(500);
        assert_eq!(
            get(uri.clone(), limit).await,
            Answer::Status {
                code: StatusCode::SERVICE_UNAVAILABLE,
                body: "not ready: not watching yet".into()
            }
        );
        assert_eq!(
            get(uri, limit).await,
            Answer::Failed("no answer within 500ms (--timeout)".into())
        );
        server.abort();
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: Uri = format!("http://{}/readyz", closed.local_addr().unwrap())
            .parse()
            .unwrap();
        drop(closed);
        assert_eq!(
            get(uri, limit).await,
            Answer::Failed("connection refused".into())
        );
    }
}
