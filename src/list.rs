//! The one paged LIST: 500 objects a page, each page retried like any request, and an
//! expired continue token (410) answered by listing again from the start. `Pages` is the
//! bound on following continue tokens, here and in the watch's list (`watch::stream`): a
//! token seen before in the same list, or more pages than the largest sane cluster has,
//! ends the list as a failure (the listing once followed a server that repeated its token
//! 1,167 times a minute, for ever).

use std::{collections::HashSet, time::Duration};

use kube::{Api, api::ListParams};
use tracing::{info, warn};

use crate::{
    Error, Result,
    budget::Budget,
    discovery,
    failure::Wait,
    retry::{Backoff, WATCH},
};

/// The most objects one page asks for.
const PAGE: u32 = 500;

/// How often an expired continue token, or a page loop, starts the listing again before
/// it is the answer.
const RESTARTS: u32 = 5;

/// The most objects one list may hold: far above the largest clusters Kubernetes supports
/// (150,000 pods, its scalability thresholds), and a bound on a server that never stops
/// handing out new continue tokens.
pub const MOST_OBJECTS: u32 = 1_000_000;

/// The most pages one list may take.
pub const MOST_PAGES: u32 = MOST_OBJECTS / PAGE;

/// A list that does not end: its continue tokens go round, or there are too many pages.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PageLoop {
    #[error(
        "the server sent continue token {token:?} again on page {page} of the list (a server \
         or proxy that repeats a page: the list would never end)"
    )]
    Repeated { token: String, page: u32 },
    #[error(
        "the list did not end after {MOST_PAGES} pages of {PAGE} (more than {MOST_OBJECTS} \
         objects: a server or proxy that never stops handing out continue tokens?)"
    )]
    TooLong,
}

/// The page size to ask for again after a page whose answer was over its cap
/// (`client::cap::PAGE`): half as many objects, so that a cluster of large objects is still
/// listed; `None` if `e` is no such answer, or the page was one object already.
pub fn smaller(e: &(dyn std::error::Error + 'static), limit: Option<u32>) -> Option<u32> {
    let cap = crate::client::cap::too_large(e)?;
    let limit = limit.unwrap_or(PAGE);
    (limit > 1).then(|| {
        let half = limit / 2;
        warn!(objects = limit, cap = %crate::text::bytes(cap.limit as u64), asking_for = half,
              "a page of the list was over its cap: asking for smaller pages");
        half
    })
}

/// The continue tokens of one list, from its first page.
#[derive(Debug, Default)]
pub struct Pages {
    seen: HashSet<String>,
    pages: u32,
}

impl Pages {
    /// The token to ask for next after a page that ended with `token` (`None`: the list is
    /// complete), or why the list cannot go on.
    pub fn next(&mut self, token: Option<String>) -> std::result::Result<Option<String>, PageLoop> {
        self.pages += 1;
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Ok(None);
        };
        if self.pages >= MOST_PAGES {
            return Err(PageLoop::TooLong);
        }
        if !self.seen.insert(token.clone()) {
            return Err(PageLoop::Repeated {
                token,
                page: self.pages,
            });
        }
        Ok(Some(token))
    }
}

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

/// Every object `params` selects, page by page. A list that does not end (`Pages`) is
/// listed again from the start after the watch's backoff, and is the answer after
/// `RESTARTS` tries.
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
    let mut pages = Pages::default();
    let mut backoff = Backoff::new(WATCH);
    loop {
        let what = match pages.pages + 1 {
            1 => format!("LIST {plural}"),
            n => format!("LIST {plural}, page {n}"),
        };
        let page = match discovery::with_retries(client, &what, url, Some(bound.page()), || {
            api.list(&params)
        })
        .await
        {
            Ok(page) => page,
            Err(e) if let Some(half) = smaller(&e, params.limit) => {
                params.limit = Some(half);
                continue;
            }
            Err(Error::Kube(kube::Error::Api(s))) if s.code == 410 && restarts < RESTARTS => {
                restarts += 1;
                info!("list continue token expired; listing again");
                (params, pages) = (first.clone(), Pages::default());
                out.clear();
                continue;
            }
            Err(e) => return Err(e),
        };
        out.extend(page.items);
        match pages.next(page.metadata.continue_) {
            Ok(Some(token)) => params = params.continue_token(&token),
            Ok(None) => return Ok(out),
            Err(e) => {
                let wait = backoff.next(Wait::Step, Duration::ZERO);
                if restarts >= RESTARTS || wait >= bound.page().left() {
                    return Err(Error::Unreachable(format!("{what} at {url}: {e}")));
                }
                restarts += 1;
                warn!(error = %e, retry_in = ?wait, "{what}: listing again from the start");
                tokio::time::sleep(wait).await;
                (params, pages) = (first.clone(), Pages::default());
                out.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(t: &str) -> Option<String> {
        Some(t.to_string())
    }

    #[test]
    fn a_page_over_its_cap_is_asked_for_again_in_halves_down_to_one() {
        let cap = crate::client::cap::TooLarge {
            limit: crate::client::cap::PAGE,
            what: "one page of a list",
        };
        let over = kube::Error::Service(Box::new(cap));
        assert_eq!(smaller(&over, Some(500)), Some(250));
        assert_eq!(smaller(&over, None), Some(250), "the default page");
        assert_eq!(smaller(&over, Some(3)), Some(1));
        assert_eq!(
            smaller(&over, Some(1)),
            None,
            "one object over the cap: the failure"
        );
        let wrapped = Error::Kube(over);
        assert_eq!(smaller(&wrapped, Some(8)), Some(4), "in an error's chain");
        assert!(
            crate::failure::classify(match &wrapped {
                Error::Kube(e) => e,
                _ => unreachable!(),
            })
            .policy()
            .fatal,
            "not retried as it was"
        );
        let other = kube::Error::Service("reset".into());
        assert_eq!(smaller(&other, Some(500)), None);
    }

    #[test]
    fn a_list_ends_on_its_last_page() {
        let mut pages = Pages::default();
        assert_eq!(pages.next(token("a")), Ok(token("a")));
        assert_eq!(pages.next(token("b")), Ok(token("b")));
        assert_eq!(pages.next(Some(String::new())), Ok(None));
        assert_eq!(Pages::default().next(None), Ok(None));
    }

    #[test]
    fn a_token_seen_before_ends_the_list() {
        let mut pages = Pages::default();
        assert_eq!(pages.next(token("a")), Ok(token("a")));
        let repeated = pages.next(token("a")).unwrap_err();
        assert_eq!(
            repeated,
            PageLoop::Repeated {
                token: "a".into(),
                page: 2
            }
        );
        assert!(
            repeated
                .to_string()
                .starts_with("the server sent continue token \"a\" again on page 2 of the list")
        );
        let mut cycling = Pages::default();
        for t in ["a", "b", "c"] {
            assert!(cycling.next(token(t)).is_ok());
        }
        assert!(matches!(
            cycling.next(token("b")),
            Err(PageLoop::Repeated { .. })
        ));
    }

    /// The limiter lets the later pages of a whole list of the largest size through at
    /// once (`client::limit`): the list's own bound is what stops a pager.
    #[test]
    fn a_whole_list_fits_in_the_later_pages_burst() {
        let (burst, _) = crate::client::RequestKind::Continue.bucket();
        assert!(burst >= MOST_PAGES - 1, "{burst} < {MOST_PAGES} - 1");
    }

    #[test]
    fn endless_new_tokens_end_at_the_most_pages() {
        let mut pages = Pages::default();
        for n in 1..MOST_PAGES {
            assert!(pages.next(Some(n.to_string())).is_ok(), "page {n}");
        }
        let err = pages.next(token("x")).unwrap_err();
        assert_eq!(err, PageLoop::TooLong);
        assert_eq!(
            err.to_string(),
            "the list did not end after 2000 pages of 500 (more than 1000000 objects: a \
             server or proxy that never stops handing out continue tokens?)"
        );
    }
}
