//! The start-up requests (`/version`, discovery, `--once`'s and `status`'s LISTs), retried
//! until the server answers: by the one retry loop (`retry::with_backoff`) on the start-up
//! schedule (`retry::START_UP`), for as long as the failure table says a failure is not
//! fatal, and through a 401 or 403 while the server is starting; turned into an error that
//! says what to fix when they fail for good.

use std::time::Duration;

use kube::Client;
use tracing::warn;

use crate::{
    Error, Result,
    budget::Budget,
    failure::{Wait, chain, classify, describe, is_tls_failure},
    retry::{self, Backoff, Next, START_UP},
};

/// How long a 401 or 403 is taken for a server still starting when its `/readyz` answers
/// the same (and so cannot say whether it is ready). kube-apiserver answers every user 403,
/// even on `/version` and `/readyz`, for about a second after it starts serving, before its
/// RBAC policy is in place: an exit there sent the static pod into CrashLoopBackOff.
pub const STARTING: Duration = Duration::from_secs(60);

/// Runs a start-up request, retrying the failures the failure table calls not fatal on the
/// start-up schedule (`retry::START_UP`: a refused connection about once a second, else
/// 0.8 s doubling to 30 s),
/// and a 401 or 403 while the server is starting (`starting`); with a budget, waits at most
/// what is left of it and then gives up with an `Unreachable` error that names the budget and
/// gives the last failure, or says that nothing answered; with none left, sends nothing.
/// A budget of zero tries once and does not wait (as `kubectl wait --timeout=0`): the one
/// attempt is bounded by `--request-timeout`.
pub async fn with_retries<T, F, Fut>(
    client: &Client,
    what: &str,
    url: &str,
    budget: Option<Budget>,
    mut op: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, kube::Error>>,
{
    if budget.is_some_and(|b| b.is_zero()) {
        return op().await.map_err(|e| {
            if !fatal(&e) {
                Error::Unreachable(format!(
                    "could not reach the API server at {url} ({what}, tried once as --timeout is 0s): {}",
                    describe(&e)
                ))
            } else {
                describe_failure(what, url, e)
            }
        });
    }
    let last = std::sync::Mutex::new(String::new());
    let attempt = retrying(client, what, url, &mut op, &last);
    let result = match budget {
        Some(b) => {
            let left = b.left();
            if left.is_zero() {
                return Err(Error::Unreachable(format!(
                    "{what} not sent to the API server at {url}: {SPENT} ({})",
                    b.length()
                )));
            }
            match tokio::time::timeout(left, attempt).await {
                Ok(r) => r,
                Err(_) => {
                    let last = last.lock().map(|l| l.clone()).unwrap_or_default();
                    return Err(spent(b, left, what, url, last));
                }
            }
        }
        None => attempt.await,
    };
    result.map_err(|e| describe_failure(what, url, e))
}

/// What the errors of a spent budget say: `--once` ends there, whatever is left undone.
const SPENT: &str = "--timeout spent";

/// The error when `budget` ran out during `what`, which had `left` of it: the last failure,
/// or that nothing answered.
fn spent(budget: Budget, left: Duration, what: &str, url: &str, last: String) -> Error {
    let last = if last.is_empty() {
        format!("no answer within {}", crate::text::duration(left))
    } else {
        last
    };
    Error::Unreachable(format!(
        "could not reach the API server at {url} within {} ({what}; {SPENT}): {last}",
        budget.length()
    ))
}

/// Whether the failure table says a start-up request gives up on `e`.
fn fatal(e: &kube::Error) -> bool {
    classify(e).policy().fatal
}

/// The attempts, until one succeeds or fails for good; `last` says the last failure. A 401
/// or 403 is fatal unless a look at `/readyz` says the server is starting.
async fn retrying<T, F, Fut>(
    client: &Client,
    what: &str,
    url: &str,
    op: &mut F,
    last: &std::sync::Mutex<String>,
) -> std::result::Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, kube::Error>>,
{
    let mut schedule = Backoff::new(START_UP);
    let mut denied_since = None;
    let attempt = async |_| op().await;
    let judge = async |e: kube::Error, _| {
        let wait = if !fatal(&e) {
            let wait = schedule.after(&e);
            log_retry(what, url, &e, wait);
            wait
        } else if let Some(ready) = starting(client, &e, &mut denied_since).await {
            let wait = schedule.next(Wait::Soon, Duration::ZERO);
            warn!(%url, status.code = code(&e), readyz = %ready, retry_in = ?wait,
                  "{what}: the API server is starting (its /readyz is not 200 yet): a 401 or 403 now is its start-up, not missing RBAC; waiting");
            wait
        } else {
            return Next::GiveUp(e);
        };
        if let Ok(mut l) = last.lock() {
            *l = describe(&e);
        }
        Next::After(wait, e)
    };
    retry::with_backoff(None, attempt, judge)
        .await
        .map_err(retry::Ended::into_inner)
}

fn code(e: &kube::Error) -> u16 {
    match e {
        kube::Error::Api(s) => s.code,
        _ => 0,
    }
}

/// A 401 or 403 from a server that is still starting: its `/readyz` in words when so. While
/// `/readyz` answers anything but 200 the server is starting; when it answers 401 or 403 too,
/// for at most `STARTING` from the first such answer (`denied_since`). The watches ask it
/// too: an API server restarted under a running metainit denies it the same way.
pub(crate) async fn starting(
    client: &Client,
    e: &kube::Error,
    denied_since: &mut Option<std::time::Instant>,
) -> Option<String> {
    if !matches!(code(e), 401 | 403) {
        return None;
    }
    let request = http::Request::get("/readyz").body(Vec::new()).ok()?;
    match client.request_text(request).await {
        Ok(_) => None,
        Err(kube::Error::Api(s)) if matches!(s.code, 401 | 403) => {
            let since = *denied_since.get_or_insert_with(std::time::Instant::now);
            (since.elapsed() < STARTING).then(|| format!("{} {}", s.code, s.reason))
        }
        // Its checks as text: the first one failing says what it waits for.
        Err(kube::Error::Api(s)) => Some(match s.message.lines().find(|l| l.starts_with("[-]")) {
            Some(check) => format!("{} {check}", s.code),
            None => s.code.to_string(),
        }),
        Err(other) => Some(chain(&other)),
    }
}

/// One WARN line per failed start-up attempt; an API error's code, reason and message
/// as fields of their own.
fn log_retry(what: &str, url: &str, e: &kube::Error, wait: Duration) {
    let message = format!("{what}: API server not reachable yet, retrying");
    match e {
        kube::Error::Api(s) => {
            warn!(%url, status.code = s.code, status.reason = %s.reason, status.message = %s.message, retry_in = ?wait, "{message}")
        }
        other => warn!(%url, error = %chain(other), retry_in = ?wait, "{message}"),
    }
}

/// What grants what `what` (a verb and a resource) needs: `probe`'s two reads, or the
/// manifest that has it.
fn rbac_grant(what: &str) -> &'static str {
    if what.starts_with("probe:") {
        "get on services and list on pods in the service's namespace"
    } else if what.contains("webhookconfigurations") || what.contains("endpointslices") {
        "the permissions in manifests/rbac-webhooks.yaml"
    } else {
        "the permissions in manifests/rbac.yaml"
    }
}

/// Turns a fatal start-up failure into an error that says what to fix.
fn describe_failure(what: &str, url: &str, e: kube::Error) -> Error {
    match &e {
        kube::Error::Api(s) if s.code == 401 => Error::Config(format!(
            "{what}: the API server at {url} refused the kubeconfig's credentials (401 Unauthorized): check its user"
        )),
        kube::Error::Api(s) if s.code == 403 => Error::Config(format!(
            "{what}: forbidden ({}); grant {} to the kubeconfig's user",
            s.message,
            rbac_grant(what)
        )),
        kube::Error::Api(s) if s.reason == crate::failure::NOT_A_STATUS => Error::Server(format!(
            "{what}: {url} does not look like a Kubernetes API server: it answered {} with {}",
            s.code,
            crate::failure::body_text(&s.message)
        )),
        kube::Error::SerdeError(_) => Error::Server(format!(
            "{what}: {url} does not look like a Kubernetes API server: its answer is not the JSON expected ({e})"
        )),
        _ if is_tls_failure(&e) => Error::Config(format!(
            "{what}: TLS with {url} failed ({}): check the server URL's scheme and the kubeconfig's certificate-authority",
            chain(&e)
        )),
        _ => Error::Kube(e),
    }
}
