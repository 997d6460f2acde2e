//! The list, then the watch, of one resource: kube-runtime's watcher's steps (page the list,
//! watch from its version, follow bookmarks, list again on a 410), our own so that every end
//! of a watch is seen. kube-runtime's watcher starts a new watch when one ends, at once and
//! without a word, so a proxy that ends every watch at once (an idle timeout in front of the
//! API server) made 1,170 watch starts a minute with `/readyz` 200. Here:
//!
//! - a watch that ends within `SHORT` having delivered no object (bookmarks aside) is a
//!   failure, `Short` (client-go's reflector calls it a "very short watch"); one that lasts
//!   `SHORT` is `Running`, which is what proves a watch (an answered start alone does not);
//! - an `ERROR` event or a line that is no whole event ends the watch (client-go's reflector
//!   stops there too): the next start waits out the failure, and meets the server as it is
//!   then, not the bad lines a stream already held. The lines are read by `lines.rs`, each
//!   capped, a line cut short a failure, not a line dropped;
//! - a continue token seen before in the same list, or a list longer than any sane cluster,
//!   is a failure, `Pages` (`list::Pages`, the same bound as every other list);
//! - a watch that ends after `SHORT` (its `timeoutSeconds`, most often) starts again at once,
//!   from its version, as before.
//!
//! `Events` (mod.rs) decides the waits; the request rate's floor is the client's limiter.

use std::{collections::VecDeque, fmt::Debug, time::Duration};

use futures::{StreamExt, stream::BoxStream};
use kube::{
    Api, Resource,
    api::{ListParams, VersionMatch, WatchEvent, WatchParams},
    core::Status,
    runtime::watcher,
};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::Filter;
use crate::list::{PageLoop, Pages};

/// A watch that ends sooner, having delivered nothing, failed.
pub const SHORT: Duration = Duration::from_secs(1);

/// The `timeoutSeconds` of a watch (kube-runtime's and client-go's: about five minutes).
const WATCH_TIMEOUT: u32 = 290;

/// A watch that sends nothing, not even its end, for longer than its timeout and this
/// margin is given up and started again (kube-runtime's idle timeout).
const IDLE_MARGIN: Duration = Duration::from_secs(5);

/// The page size of the list (client-go's pager's).
const PAGE: u32 = 500;

/// Why the list or the watch failed.
#[derive(Debug)]
pub enum Failure {
    List(kube::Error),
    Pages(PageLoop),
    /// A list page with neither a resourceVersion nor a continue token, or an object
    /// without a resourceVersion.
    NoResourceVersion,
    WatchStart(kube::Error),
    /// The stream broke, or sent a line that is no event.
    Stream(kube::Error),
    /// An `ERROR` event.
    Event(Box<Status>),
    /// The watch ended within `SHORT` with nothing but bookmarks.
    Short {
        lasted: Duration,
        bookmarks: u32,
    },
}

/// What the list and the watch produce.
#[derive(Debug)]
pub enum Step<K> {
    Event(watcher::Event<K>),
    /// The watch has lasted `SHORT`: it runs.
    Running,
}

struct Watching<K> {
    version: String,
    /// Started from version "0" (a list that said "0": an empty store of the double, or a
    /// server that gives no version): the server sends the objects it has first, in no
    /// order of version, so the version of one of them is no place to resume from.
    from_zero: bool,
    stream: BoxStream<'static, kube::Result<WatchEvent<K>>>,
    since: Instant,
    /// An object arrived: its end is no short watch.
    delivered: bool,
    bookmarks: u32,
    running: bool,
}

enum State<K> {
    Empty,
    Paging {
        pages: Pages,
        token: Option<String>,
        objects: VecDeque<K>,
        version: Option<String>,
    },
    Listed {
        version: String,
    },
    Watching(Watching<K>),
}

/// One resource's list and watch.
pub struct Lister<K> {
    api: Api<K>,
    list: ListParams,
    watch: WatchParams,
    state: State<K>,
}

type Out<K> = Option<Result<Step<K>, Failure>>;

impl<K> Lister<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    pub fn new(api: Api<K>, filter: &Filter) -> Self {
        let mut list = ListParams::default()
            .limit(PAGE)
            .at("0")
            .matching(VersionMatch::NotOlderThan);
        let mut watch = WatchParams::default().timeout(WATCH_TIMEOUT);
        if let Some(l) = &filter.labels {
            list = list.labels(l);
            watch = watch.labels(l);
        }
        if let Some(f) = &filter.fields {
            list = list.fields(f);
            watch = watch.fields(f);
        }
        Lister {
            api,
            list,
            watch,
            state: State::Empty,
        }
    }

    /// Lists everything again at the next step.
    pub fn restart(&mut self) {
        self.state = State::Empty;
    }

    /// The next event, or failure. Dropped while it waits, the list or watch under way is
    /// given up and the next call lists again.
    pub async fn next(&mut self) -> Result<Step<K>, Failure> {
        loop {
            let state = std::mem::replace(&mut self.state, State::Empty);
            let out = match state {
                State::Empty => self.begin(),
                State::Paging {
                    pages,
                    token,
                    objects,
                    version,
                } => self.page(pages, token, objects, version).await,
                State::Listed { version } => self.start(version).await,
                State::Watching(w) => self.watching(w).await,
            };
            if let Some(out) = out {
                return out;
            }
        }
    }

    fn begin(&mut self) -> Out<K> {
        self.list.limit = Some(PAGE);
        self.state = State::Paging {
            pages: Pages::default(),
            token: None,
            objects: VecDeque::new(),
            version: None,
        };
        Some(Ok(Step::Event(watcher::Event::Init)))
    }

    async fn page(
        &mut self,
        mut pages: Pages,
        token: Option<String>,
        mut objects: VecDeque<K>,
        version: Option<String>,
    ) -> Out<K> {
        if let Some(next) = objects.pop_front() {
            self.state = State::Paging {
                pages,
                token,
                objects,
                version,
            };
            return Some(Ok(Step::Event(watcher::Event::InitApply(next))));
        }
        if let (None, Some(version)) = (&token, &version) {
            self.state = State::Listed {
                version: version.clone(),
            };
            return Some(Ok(Step::Event(watcher::Event::InitDone)));
        }
        let mut params = self.list.clone();
        params.continue_token = token.clone();
        let list = match self.api.list(&params).await {
            Ok(list) => list,
            // Over its cap: the same page again, in smaller pages until the list's end.
            Err(e) if let Some(half) = crate::list::smaller(&e, self.list.limit) => {
                self.list.limit = Some(half);
                self.state = State::Paging {
                    pages,
                    token,
                    objects,
                    version,
                };
                return None;
            }
            Err(e) => return Some(Err(Failure::List(e))),
        };
        let version = list.metadata.resource_version.filter(|v| !v.is_empty());
        let token = match pages.next(list.metadata.continue_) {
            Ok(token) => token,
            Err(e) => return Some(Err(Failure::Pages(e))),
        };
        if version.is_none() && token.is_none() {
            return Some(Err(Failure::NoResourceVersion));
        }
        self.state = State::Paging {
            pages,
            token,
            objects: list.items.into(),
            version,
        };
        None
    }

    async fn start(&mut self, version: String) -> Out<K> {
        match super::lines::watch(&self.api, &self.watch, &version).await {
            Ok(stream) => {
                self.state = State::Watching(Watching {
                    from_zero: version == "0",
                    version,
                    stream,
                    since: Instant::now(),
                    delivered: false,
                    bookmarks: 0,
                    running: false,
                });
                None
            }
            Err(e) => {
                self.state = State::Listed { version };
                Some(Err(Failure::WatchStart(e)))
            }
        }
    }

    async fn watching(&mut self, mut w: Watching<K>) -> Out<K> {
        let idle = Duration::from_secs(u64::from(WATCH_TIMEOUT)) + IDLE_MARGIN;
        let item = tokio::select! {
            // What the stream holds first: an end or an error it already sent comes before
            // the time that would prove it running.
            biased;
            item = w.stream.next() => item,
            _ = tokio::time::sleep_until(w.since + SHORT), if !w.running => {
                w.running = true;
                self.state = State::Watching(w);
                return Some(Ok(Step::Running));
            }
            _ = tokio::time::sleep(idle) => None,
        };
        let out = match item {
            Some(Ok(WatchEvent::Added(o) | WatchEvent::Modified(o))) => {
                w.delivered = true;
                Self::object(&mut w, o, watcher::Event::Apply)
            }
            Some(Ok(WatchEvent::Deleted(o))) => {
                w.delivered = true;
                Self::object(&mut w, o, watcher::Event::Delete)
            }
            Some(Ok(WatchEvent::Bookmark(b))) => {
                w.bookmarks += 1;
                w.version = b.metadata.resource_version;
                None
            }
            // An `ERROR` event or a line that is no event ends the watch, as client-go's
            // reflector does; the next one starts after the failure's wait, from the version
            // (a 410: the state is `Empty`, list again). Reading on would spend a wait on
            // every bad line the stream already held, long after the server healed.
            Some(Ok(WatchEvent::Error(s))) => {
                if s.code != 410 {
                    self.state = Self::after(w);
                }
                return Some(Err(Failure::Event(s)));
            }
            Some(Err(e)) => {
                self.state = Self::after(w);
                return Some(Err(Failure::Stream(e)));
            }
            None => return Self::ended(&mut self.state, w),
        };
        if !matches!(out, Some(Err(Failure::NoResourceVersion))) {
            self.state = State::Watching(w);
        }
        out
    }

    /// An object event, unless the object has no version to resume from.
    fn object(w: &mut Watching<K>, o: K, event: fn(K) -> watcher::Event<K>) -> Out<K> {
        match o.meta().resource_version.clone().filter(|v| !v.is_empty()) {
            Some(version) => {
                w.version = version;
                Some(Ok(Step::Event(event(o))))
            }
            None => Some(Err(Failure::NoResourceVersion)),
        }
    }

    /// The stream's end: the next watch starts from its version, at once unless it was short;
    /// after a watch from "0" that delivered objects, the next step lists again (its objects
    /// came in no order of version: resuming from the last one's could skip the others).
    fn ended(state: &mut State<K>, w: Watching<K>) -> Out<K> {
        let lasted = w.since.elapsed();
        let (delivered, running, bookmarks) = (w.delivered, w.running, w.bookmarks);
        *state = Self::after(w);
        if delivered || running || lasted >= SHORT {
            return None;
        }
        Some(Err(Failure::Short { lasted, bookmarks }))
    }

    /// Where a watch that ended leaves the next step: a watch from its version; after a
    /// watch from "0" that delivered objects, a list (see `ended`).
    fn after(w: Watching<K>) -> State<K> {
        if w.from_zero && w.delivered {
            State::Empty
        } else {
            State::Listed { version: w.version }
        }
    }
}
