//! The one paged LIST: 500 objects a page, each page retried like any request, and an
//! expired continue token (410) answered by listing again from the start.

use std::time::Duration;

use kube::{Api, api::ListParams};
use tracing::info;

use crate::{Error, Result, discovery, object::Held};

/// The most objects one page asks for.
const PAGE: u32 = 500;

/// How often an expired continue token starts the listing again before its 410 is the answer.
const RESTARTS: u32 = 5;

/// Every object `params` selects, page by page.
pub async fn all(
    client: &kube::Client,
    api: &Api<Held>,
    params: ListParams,
    url: &str,
    deadline: Option<Duration>,
) -> Result<Vec<Held>> {
    let first = params.limit(PAGE);
    let mut params = first.clone();
    let mut restarts = 0;
    let mut out = Vec::new();
    loop {
        let page = match discovery::with_retries(client, "LIST", url, deadline, || {
            api.list(&params)
        })
        .await
        {
            Ok(page) => page,
            Err(Error::Kube(kube::Error::Api(s))) if s.code == 410 && restarts < RESTARTS => {
                restarts += 1;
                info!("list continue token expired; listing again");
                params = first.clone();
                out.clear();
                continue;
            }
            Err(e) => return Err(e),
        };
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}
