//! The one paged LIST: 500 objects a page, each page retried like any request, and an
//! expired continue token (410) answered by listing again from the start.

use std::time::Duration;

use kube::{Api, api::ListParams};
use tracing::info;

use crate::{Error, Result, budget::Budget, discovery};

/// The most objects one page asks for.
const PAGE: u32 = 500;

/// How often an expired continue token starts the listing again before its 410 is the answer.
const RESTARTS: u32 = 5;

/// How long a listing may wait for the server.
#[derive(Clone, Copy, Debug)]
pub enum Bound {
    /// Every page and restart within what is left of one budget: `--once`, whose
    /// `--timeout` bounds the whole run.
    Run(Budget),
    /// Each page within a budget of its own: `status`, whose `--timeout` is how long it
    /// waits for each answer (a large cluster's listing may take longer in all).
    EachPage(Duration),
}

impl Bound {
    fn page(self) -> Budget {
        match self {
            Bound::Run(b) => b,
            Bound::EachPage(d) => Budget::from_now(d),
        }
    }
}

/// Every object `params` selects, page by page.
pub async fn all<K>(
    client: &kube::Client,
    api: &Api<K>,
    params: ListParams,
    url: &str,
    bound: Bound,
) -> Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let url_path = api.resource_url();
    let plural = url_path.rsplit('/').next().unwrap_or_default();
    let first = params.limit(PAGE);
    let mut params = first.clone();
    let mut restarts = 0;
    let mut out = Vec::new();
    let mut page_no = 1;
    loop {
        let what = match page_no {
            1 => format!("LIST {plural}"),
            n => format!("LIST {plural}, page {n}"),
        };
        let page = match discovery::with_retries(client, &what, url, Some(bound.page()), || {
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
                page_no = 1;
                continue;
            }
            Err(e) => return Err(e),
        };
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => {
                params = params.continue_token(&token);
                page_no += 1;
            }
            None => return Ok(out),
        }
    }
}
