// A small raw HTTP client for the double's tests: plain requests and line-by-line watch streams.
#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Every wait in these tests is bounded by this unless a test says otherwise.
pub const WAIT: Duration = Duration::from_secs(10);

pub struct Resp {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub text: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }
}

#[derive(Clone)]
pub struct Client {
    base: String,
    token: Option<String>,
    http: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Client {
    pub fn new(base: &str) -> Client {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(2)));
        Client {
            base: base.to_string(),
            token: None,
            http: HyperClient::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector),
        }
    }

    pub fn with_token(&self, token: &str) -> Client {
        Client {
            token: Some(token.to_string()),
            ..self.clone()
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        accept: Option<&str>,
        body: Option<String>,
    ) -> Result<hyper::Response<Incoming>, String> {
        let mut b = hyper::Request::builder()
            .method(method)
            .uri(format!("{}{}", self.base, path))
            .header("user-agent", "kube-double-tests/1.0");
        if let Some(ct) = content_type {
            b = b.header("content-type", ct);
        }
        if let Some(a) = accept {
            b = b.header("accept", a);
        }
        if let Some(t) = &self.token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        let req = b
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| e.to_string())?;
        self.http.request(req).await.map_err(|e| format!("{e:?}"))
    }

    /// One request; `Err` when the connection fails (refused, reset).
    pub async fn try_request(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        accept: Option<&str>,
        body: Option<String>,
    ) -> Result<Resp, String> {
        let fut = async {
            let r = self.send(method, path, content_type, accept, body).await?;
            let status = r.status().as_u16();
            let headers = r.headers().clone();
            let bytes = r
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok(Resp {
                status,
                headers,
                text: String::from_utf8_lossy(&bytes).into_owned(),
            })
        };
        tokio::time::timeout(Duration::from_secs(40), fut)
            .await
            .map_err(|_| "request timed out".to_string())?
    }

    pub async fn request(
        &self,
        method: &str,
        path: &str,
        ct: Option<&str>,
        body: Option<String>,
    ) -> Resp {
        self.try_request(method, path, ct, None, body)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.request("GET", path, None, None).await
    }

    pub async fn get_accept(&self, path: &str, accept: &str) -> Resp {
        self.try_request("GET", path, None, Some(accept), None)
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }

    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.request(
            "POST",
            path,
            Some("application/json"),
            Some(body.to_string()),
        )
        .await
    }

    pub async fn put(&self, path: &str, body: Value) -> Resp {
        self.request(
            "PUT",
            path,
            Some("application/json"),
            Some(body.to_string()),
        )
        .await
    }

    pub async fn patch(&self, path: &str, ct: &str, body: Value) -> Resp {
        self.request("PATCH", path, Some(ct), Some(body.to_string()))
            .await
    }

    pub async fn json_patch(&self, path: &str, body: Value) -> Resp {
        self.patch(path, "application/json-patch+json", body).await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.request("DELETE", path, None, None).await
    }

    pub async fn watch(&self, path: &str) -> Watch {
        self.watch_accept(path, None).await
    }

    pub async fn watch_accept(&self, path: &str, accept: Option<&str>) -> Watch {
        let r = tokio::time::timeout(WAIT, self.send("GET", path, None, accept, None))
            .await
            .unwrap_or_else(|_| panic!("watch {path}: timed out"))
            .unwrap_or_else(|e| panic!("watch {path}: {e}"));
        Watch {
            status: r.status().as_u16(),
            headers: r.headers().clone(),
            body: r.into_body(),
            buf: Vec::new(),
        }
    }
}

/// What reading a watch stream produced.
#[derive(Debug)]
pub enum Line {
    Event(Value),
    /// A line that is not JSON.
    Malformed(String),
    /// Clean end of the stream.
    End,
    /// The connection broke mid-stream.
    Broken(String),
}

pub struct Watch {
    pub status: u16,
    pub headers: http::HeaderMap,
    body: Incoming,
    buf: Vec<u8>,
}

impl Watch {
    /// The next line, waiting at most `wait`; panics on timeout.
    pub async fn next_within(&mut self, wait: Duration) -> Line {
        tokio::time::timeout(wait, self.next_line())
            .await
            .unwrap_or_else(|_| panic!("no watch line within {wait:?}"))
    }

    pub async fn next(&mut self) -> Line {
        self.next_within(WAIT).await
    }

    async fn next_line(&mut self) -> Line {
        loop {
            if let Some(i) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                return match serde_json::from_str(&text) {
                    Ok(v) => Line::Event(v),
                    Err(_) => Line::Malformed(text),
                };
            }
            match self.body.frame().await {
                None => return Line::End,
                Some(Err(e)) => return Line::Broken(e.to_string()),
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        self.buf.extend_from_slice(&d);
                    }
                }
            }
        }
    }

    /// The next event that is not a BOOKMARK; panics on anything else.
    pub async fn event(&mut self) -> Value {
        loop {
            match self.next().await {
                Line::Event(v) if v["type"] == "BOOKMARK" => continue,
                Line::Event(v) => return v,
                other => panic!("expected an event, got {other:?}"),
            }
        }
    }

    /// Asserts nothing but bookmarks arrive for `d`.
    pub async fn quiet_for(&mut self, d: Duration) {
        let deadline = tokio::time::Instant::now() + d;
        loop {
            match tokio::time::timeout_at(deadline, self.next_line()).await {
                Err(_) => return,
                Ok(Line::Event(v)) if v["type"] == "BOOKMARK" => continue,
                Ok(other) => panic!("expected silence, got {other:?}"),
            }
        }
    }
}

pub fn pod(name: &str) -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    })
}

pub fn labelled_pod(name: &str, labels: Value) -> Value {
    let mut p = pod(name);
    p["metadata"]["labels"] = labels;
    p
}

pub const PODS: &str = "/api/v1/namespaces/default/pods";

/// Polls `cond` every 10 ms until it holds; panics after `WAIT`.
pub async fn eventually(mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
