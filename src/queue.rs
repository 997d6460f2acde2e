//! The work queue between the watch and the clearing, with client-go's workqueue
//! semantics: a key waits in the queue at most once however often it is added; it is
//! worked on by one worker at a time; a key added while it is being worked on is worked
//! on again once that work is done (so the newest state is always seen); a failed key
//! comes back after a delay. Keys are handed to a worker as soon as one is free, with no
//! timer in the way.
//!
//! In place of kube-runtime's `Controller` (its store, scheduler and runner), which passes
//! every key through a `DelayQueue` even when it is due at once: a timer tick per object
//! and a timer registration per key, in clear latency and CPU (BENCHMARKS.md, "The engine
//! rebuild: before and after"). The watch (`watch::Events`) and the store feed it.

use ahash::RandomState;
use std::{
    collections::{BTreeMap, HashMap, HashSet, VecDeque},
    fmt::Debug,
    future::Future,
    hash::Hash,
    panic::AssertUnwindSafe,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use futures::{FutureExt, Stream, StreamExt};
use tokio::{sync::Notify, time::Instant};
use tracing::error;

/// A key from the queue's source: news, worked on now even where a retry waits for it; or
/// an object a relist found as it was, whose waiting retry or timer stands (a relist is no
/// news: a server that forced a relist every second once re-patched a refused object every
/// second, its backoff cancelled by each relist); or an object gone from the source, whose
/// timer is not needed any more (`Queue::gone`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arrival<K> {
    News(K),
    Unchanged(K),
    Gone(K),
}

impl<K> From<K> for Arrival<K> {
    fn from(key: K) -> Self {
        Arrival::News(key)
    }
}

/// The ceiling of the work on one key, whatever asks for it (news, a retry, a timer, a
/// relist): `KEY_BURST` at once, then one every `1 / KEY_RATE` seconds, so at most 20 in
/// any minute. A key over it waits for its next turn on a timer. Under the retries' backoff
/// and the news rule as the client's limiter is under the requests: the bound holds by
/// construction, not by a list of causes.
pub const KEY_BURST: f64 = 5.0;
pub const KEY_RATE: f64 = 0.25;

pub struct Queue<K> {
    state: Mutex<State<K>>,
    /// Bounds retries across all keys, as client-go's default controller rate limiter
    /// does beside its per-item backoff: however many objects fail at once (a webhook
    /// refusing all of them, RBAC not there yet), the server gets at most `burst` retries
    /// at once and `rate` per second after that.
    retries: Mutex<Bucket>,
    /// Wakes an idle worker when a key becomes ready.
    wake: Notify,
    /// Wakes `run` when a timer is set that is due before the ones it knew of.
    rearm: Notify,
}

struct State<K> {
    /// Keys ready to be worked on, in order: each is in `dirty`, not in `processing`,
    /// and here once.
    ready: VecDeque<K>,
    /// Keys waiting to be worked on (again).
    dirty: HashSet<K, RandomState>,
    /// Keys being worked on.
    processing: HashSet<K, RandomState>,
    /// Keys to add again later: when, and a sequence number that orders `timers`.
    delayed: HashMap<K, (Instant, u64), RandomState>,
    /// The same keys by when they are due: one timer in `run` for all of them, not a
    /// task and a timer each (a pod waiting hours for its gate's age is one entry here).
    timers: BTreeMap<(Instant, u64), K>,
    seq: u64,
    closed: bool,
    /// The turns each key has left under its ceiling (`KEY_BURST`, `KEY_RATE`), as of when;
    /// a key with all its turns is not kept.
    turns: HashMap<K, (f64, Instant), RandomState>,
    /// How many keys `turns` held after its last sweep.
    turns_swept: usize,
}

impl<K: Hash + Eq + Clone> State<K> {
    /// Drops the key's timer, if it has one.
    fn cancel(&mut self, key: &K) {
        if let Some(at) = self.delayed.remove(key) {
            self.timers.remove(&at);
        }
    }

    /// When the earliest timer is due.
    fn next_due(&self) -> Option<Instant> {
        self.timers.first_key_value().map(|((due, _), _)| *due)
    }

    /// Sets the key's timer to `due`, in place of the one it had; whether it is now the
    /// earliest (the run loop's timer must be re-armed).
    fn set_timer(&mut self, key: K, due: Instant) -> bool {
        self.cancel(&key);
        let earliest = self.next_due().is_none_or(|first| due < first);
        self.seq += 1;
        let at = (due, self.seq);
        self.timers.insert(at, key.clone());
        self.delayed.insert(key, at);
        earliest
    }

    /// Takes one of the key's turns under its ceiling, or says when its next one comes.
    fn turn(&mut self, key: &K, now: Instant) -> Result<(), Instant> {
        let refilled = |(left, at): (f64, Instant)| {
            let grown = now.saturating_duration_since(at).as_secs_f64() * KEY_RATE;
            (left + grown).min(KEY_BURST)
        };
        let left = self.turns.get(key).copied().map_or(KEY_BURST, refilled);
        if left < 1.0 {
            return Err(now + Duration::from_secs_f64((1.0 - left) / KEY_RATE));
        }
        self.turns.insert(key.clone(), (left - 1.0, now));
        // Keys whose turns are all back are as good as not kept: swept now and then.
        if self.turns.len() > 2 * self.turns_swept + 1024 {
            self.turns.retain(|_, t| refilled(*t) < KEY_BURST);
            self.turns_swept = self.turns.len();
        }
        Ok(())
    }
}

/// A token bucket that hands out reservations: each retry takes a token now, or the
/// next one to come, and waits for it.
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: f64, burst: f64) -> Bucket {
        Bucket {
            rate,
            burst,
            tokens: burst,
            last: Instant::now(),
        }
    }

    /// Takes a token: how long to wait for it.
    fn reserve(&mut self, now: Instant) -> Duration {
        let refill = now.saturating_duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.burst) - 1.0;
        self.last = now;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> Queue<K> {
    /// A queue whose retries (`add_after`) are bounded to `concurrency` at once and
    /// three times `concurrency` per second, across all keys.
    pub fn new(concurrency: usize) -> Arc<Self> {
        let c = concurrency.max(1) as f64;
        Arc::new(Self {
            retries: Mutex::new(Bucket::new(3.0 * c, c)),
            state: Mutex::new(State {
                ready: VecDeque::new(),
                dirty: HashSet::default(),
                processing: HashSet::default(),
                delayed: HashMap::default(),
                timers: BTreeMap::new(),
                seq: 0,
                closed: false,
                turns: HashMap::default(),
                turns_swept: 0,
            }),
            wake: Notify::new(),
            rearm: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks for work on `key` now, from any task; a retry that was waiting for it is no
    /// longer needed.
    pub fn add(&self, key: K) {
        let mut s = self.lock();
        if s.closed {
            return;
        }
        s.cancel(&key);
        if s.processing.contains(&key) {
            s.dirty.insert(key);
        } else if s.dirty.insert(key.clone()) {
            s.ready.push_back(key);
            drop(s);
            self.wake.notify_one();
        }
    }

    /// Asks for work on `key` now, unless a retry or a timer waits for it already, or it
    /// is being worked on: what arrives is no news (the work under way has the same state
    /// to go on, and its failure sets the retry).
    pub fn add_unless_waiting(&self, key: K) {
        let s = self.lock();
        if !s.delayed.contains_key(&key) && !s.processing.contains(&key) {
            drop(s);
            self.add(key);
        }
    }

    /// The object of `key` is gone: a timer or retry waiting for it would keep the key
    /// until it is due (an orphaned gate's age: hours), so the key is worked on now instead
    /// (the work on a gone key forgets what was kept of it); and again after the work under
    /// way, which may set a timer. A key with neither is left alone: most objects gone
    /// (pods bound, deleted) never had a timer, and cost no work.
    pub fn gone(&self, key: K) {
        let s = self.lock();
        if s.delayed.contains_key(&key) || s.processing.contains(&key) {
            drop(s);
            self.add(key);
        }
    }

    /// Drops the timer or retry waiting for `key`, if there is one.
    pub fn cancel(&self, key: &K) {
        self.lock().cancel(key);
    }

    /// Asks for work on `key` again after `delay`, or later if the retries of all keys
    /// are over their rate; unless it is already due sooner. Returns the wait: until the
    /// earlier timer, if there is one.
    pub fn add_after(&self, key: K, delay: Duration) -> Duration {
        let now = Instant::now();
        let s = self.lock();
        if s.closed {
            return delay;
        }
        if let Some(&(due, _)) = s.delayed.get(&key)
            && due <= now + delay
        {
            return due.saturating_duration_since(now);
        }
        let limited = self
            .retries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reserve(now);
        let delay = delay.max(limited);
        self.schedule(s, key, now + delay);
        delay
    }

    /// Asks for work on `key` at `due`, unless it is already due sooner: a timer (a pod's
    /// gate reaching its age), not a retry, so the retries' rate does not apply.
    pub fn add_at(&self, key: K, due: Instant) {
        let s = self.lock();
        if s.closed || s.delayed.get(&key).is_some_and(|d| d.0 <= due) {
            return;
        }
        self.schedule(s, key, due);
    }

    fn schedule(&self, mut s: MutexGuard<'_, State<K>>, key: K, due: Instant) {
        let earliest = s.set_timer(key, due);
        drop(s);
        if earliest {
            self.rearm.notify_one();
        }
    }

    /// Adds every key whose timer is due; returns when the next one is.
    fn fire(&self, now: Instant) -> Option<Instant> {
        let mut due = Vec::new();
        let next = {
            let mut s = self.lock();
            while let Some(entry) = s.timers.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let key = entry.remove();
                s.delayed.remove(&key);
                due.push(key);
            }
            s.next_due()
        };
        for key in due {
            self.add(key);
        }
        next
    }

    /// The next ready key, now being worked on; a key over its ceiling (`KEY_BURST`) is
    /// put on a timer for its next turn instead.
    fn take(&self) -> Option<K> {
        let mut s = self.lock();
        let now = Instant::now();
        let mut rearm = false;
        let taken = loop {
            let Some(key) = s.ready.pop_front() else {
                break None;
            };
            s.dirty.remove(&key);
            match s.turn(&key, now) {
                Ok(()) => {
                    s.processing.insert(key.clone());
                    break Some(key);
                }
                Err(due) => {
                    if s.delayed.get(&key).is_none_or(|d| d.0 < due) {
                        rearm |= s.set_timer(key, due);
                    }
                }
            }
        };
        drop(s);
        if rearm {
            self.rearm.notify_one();
        }
        taken
    }

    /// Waits for the next ready key; `None` once the queue is closed.
    async fn next(&self) -> Option<K> {
        loop {
            // Registered before looking, so that an `add` right after is not missed.
            let notified = self.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().closed {
                return None;
            }
            if let Some(key) = self.take() {
                return Some(key);
            }
            notified.await;
        }
    }

    /// Work on `key` is done: if it was added meanwhile, it is ready again.
    fn done(&self, key: &K) {
        let mut s = self.lock();
        s.processing.remove(key);
        if s.dirty.contains(key) && !s.closed {
            s.ready.push_back(key.clone());
            drop(s);
            self.wake.notify_one();
        }
    }

    /// Keys being worked on, and keys waiting (not counting later retries).
    pub fn counts(&self) -> (usize, usize) {
        let s = self.lock();
        (s.processing.len(), s.dirty.len())
    }

    /// How many timers and retries wait.
    #[cfg(test)]
    pub(crate) fn timers(&self) -> usize {
        let s = self.lock();
        assert_eq!(s.timers.len(), s.delayed.len(), "the two maps agree");
        s.timers.len()
    }

    /// One worker: the next ready key, its work, and the key done, until the queue closes.
    /// A panic in the work (a bug) is caught and logged: the key is done, to be worked on
    /// again when it is added again (its next change, the next resync), and the worker
    /// goes on. Otherwise the key would stay in `processing` for ever and the pool lose a
    /// worker each time. Release builds abort on a panic instead (Cargo.toml), and the
    /// kubelet or the Deployment restarts the process.
    async fn worker<F, Fut>(self: Arc<Self>, work: Arc<F>)
    where
        K: Debug,
        F: Fn(K) -> Fut,
        Fut: Future<Output = ()>,
    {
        while let Some(key) = self.next().await {
            if let Err(panic) = AssertUnwindSafe(work(key.clone())).catch_unwind().await {
                let message = (panic.downcast_ref::<&str>().copied())
                    .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                    .unwrap_or("(not a string)");
                error!(key = ?key, panic = message, "the work on a key panicked; the key is done until it is added again");
            }
            self.done(&key);
            // Lets what the work left behind run before the next key: hyper hands a
            // connection back to its pool from a task of its own, and without this the
            // next request finds none idle and opens another.
            tokio::task::yield_now().await;
        }
    }

    /// Adds the keys `source` yields and works on them with `concurrency` workers, as
    /// client-go's controllers do: each worker takes the next ready key as soon as it is
    /// done with one, so in a burst no task waits to be woken for a key. Until `stop`
    /// resolves; then the workers start no more and this waits for the work started.
    pub async fn run<F, Fut, A>(
        self: Arc<Self>,
        source: impl Stream<Item = A>,
        concurrency: usize,
        work: F,
        stop: impl Future<Output = ()>,
    ) where
        K: Debug,
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
        A: Into<Arrival<K>>,
    {
        let work = Arc::new(work);
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..concurrency.max(1) {
            workers.spawn(Arc::clone(&self).worker(Arc::clone(&work)));
        }
        tokio::pin!(stop);
        tokio::pin!(source);
        let mut source_open = true;
        // One timer for every delayed key, armed for the earliest: re-armed when a sooner
        // one is set (`rearm`) and when it fires. A key added meanwhile drops its timer; if
        // that was the earliest, the timer fires for nothing and is re-armed then.
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut armed = None;
        let mut next = self.lock().next_due();
        loop {
            if next != armed {
                armed = next;
                if let Some(due) = armed {
                    timer.as_mut().reset(due);
                }
            }
            tokio::select! {
                biased;
                _ = &mut stop => break,
                _ = self.rearm.notified() => next = self.lock().next_due(),
                _ = timer.as_mut(), if armed.is_some() => {
                    armed = None;
                    next = self.fire(Instant::now());
                }
                key = source.next(), if source_open => match key {
                    Some(key) => match key.into() {
                        Arrival::News(key) => self.add(key),
                        Arrival::Unchanged(key) => self.add_unless_waiting(key),
                        Arrival::Gone(key) => self.gone(key),
                    },
                    None => source_open = false,
                },
            }
        }
        self.lock().closed = true;
        self.wake.notify_waiters();
        while workers.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Notify;

    /// A worker that records what it worked on, at most how many at once, and waits for
    /// a go-ahead per key when told to.
    #[derive(Default)]
    struct Log {
        worked: Mutex<Vec<u32>>,
        now: AtomicUsize,
        most: AtomicUsize,
        hold: Mutex<HashMap<u32, Arc<Notify>>>,
    }

    impl Log {
        fn worker(
            self: &Arc<Self>,
        ) -> impl Fn(u32) -> futures::future::BoxFuture<'static, ()> + use<> {
            let log = Arc::clone(self);
            move |key| {
                let log = Arc::clone(&log);
                Box::pin(async move {
                    let n = log.now.fetch_add(1, Ordering::SeqCst) + 1;
                    log.most.fetch_max(n, Ordering::SeqCst);
                    let gate = log.hold.lock().unwrap().get(&key).cloned();
                    if let Some(gate) = gate {
                        gate.notified().await;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    log.worked.lock().unwrap().push(key);
                    log.now.fetch_sub(1, Ordering::SeqCst);
                })
            }
        }

        fn worked(&self) -> Vec<u32> {
            let mut w = self.worked.lock().unwrap().clone();
            w.sort_unstable();
            w
        }
    }

    /// A queue's `run`, in a task, until `stop`.
    struct Running {
        stop: Arc<Notify>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Running {
        fn start(
            queue: &Arc<Queue<u32>>,
            source: impl Stream<Item = u32> + Send + 'static,
            concurrency: usize,
            log: &Arc<Log>,
        ) -> Running {
            let stop = Arc::new(Notify::new());
            let s = Arc::clone(&stop);
            let task = tokio::spawn(Arc::clone(queue).run(
                source,
                concurrency,
                log.worker(),
                async move { s.notified().await },
            ));
            Running { stop, task }
        }

        async fn stop(self) {
            self.stop.notify_one();
            self.task.await.unwrap();
        }
    }

    async fn until(what: &str, cond: impl Fn() -> bool) {
        for _ in 0..10_000 {
            if cond() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("never: {what}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_many_times_while_waiting_is_worked_on_once() {
        let queue = Queue::new(4);
        let log = Arc::new(Log::default());
        for _ in 0..5 {
            queue.add(1);
            queue.add(2);
        }
        let running = Running::start(&queue, futures::stream::pending(), 4, &log);
        until("both worked on", || log.worked().len() == 2).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(log.worked(), vec![1, 2]);
        running.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_worked_on_is_worked_on_again_after_never_at_once() {
        let queue = Queue::new(4);
        let log = Arc::new(Log::default());
        let gate = Arc::new(Notify::new());
        log.hold.lock().unwrap().insert(7, Arc::clone(&gate));
        let running = Running::start(&queue, futures::stream::pending(), 4, &log);
        queue.add(7);
        until("7 started", || queue.counts() == (1, 0)).await;
        queue.add(7);
        queue.add(7);
        assert_eq!(queue.counts(), (1, 1), "one in flight, one waiting");
        log.hold.lock().unwrap().clear();
        gate.notify_one();
        until("7 worked on twice", || log.worked() == vec![7, 7]).await;
        assert_eq!(log.most.load(Ordering::SeqCst), 1, "never two at once");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(log.worked(), vec![7, 7], "and not a third time");
        running.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_than_concurrency_at_once_and_all_get_done() {
        let queue = Queue::new(4);
        let log = Arc::new(Log::default());
        for k in 0..50 {
            queue.add(k);
        }
        let running = Running::start(&queue, futures::stream::pending(), 3, &log);
        until("all worked on", || log.worked().len() == 50).await;
        assert_eq!(log.worked(), (0..50).collect::<Vec<_>>());
        assert_eq!(log.most.load(Ordering::SeqCst), 3);
        running.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn keys_from_the_source_are_worked_on() {
        let queue = Queue::new(4);
        let log = Arc::new(Log::default());
        let source = futures::stream::iter([1, 2, 2, 3]).chain(futures::stream::pending());
        let running = Running::start(&queue, source, 4, &log);
        until("all worked on", || {
            let mut w = log.worked();
            w.dedup();
            w == vec![1, 2, 3]
        })
        .await;
        running.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_later_retry_waits_its_delay_a_sooner_one_wins_and_add_cancels_it() {
        let queue = Queue::new(4);
        let log = Arc::new(Log::default());
        let running = Running::start(&queue, futures::stream::pending(), 4, &log);
        let start = Instant::now();
        queue.add_after(1, Duration::from_secs(10));
        queue.add_after(1, Duration::from_secs(2));
        queue.add_after(1, Duration::from_secs(5));
        until("1 retried", || log.worked() == vec![1]).await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(3),
            "{took:?}"
        );
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(log.worked(), vec![1], "the superseded retries do nothing");

        queue.add_after(2, Duration::from_secs(3));
        queue.add(2);
        until("2 worked on", || log.worked() == vec![1, 2]).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(
            log.worked(),
            vec![1, 2],
            "the retry was cancelled by the add"
        );
        running.stop().await;
    }

    /// A relist's unchanged object leaves a waiting retry alone (the source's `Unchanged`),
    /// news cancels it, and an unchanged object with nothing waiting is worked on now.
    #[tokio::test(start_paused = true)]
    async fn an_unchanged_arrival_leaves_a_waiting_retry_alone() {
        let queue = Queue::new(4);
        let log = Arc::new(Log::default());
        let (tx, rx) = futures::channel::mpsc::unbounded::<Arrival<u32>>();
        let stop = Arc::new(Notify::new());
        let s = Arc::clone(&stop);
        let task = tokio::spawn(
            Arc::clone(&queue).run(rx, 4, log.worker(), async move { s.notified().await }),
        );
        let start = Instant::now();
        queue.add_after(1, Duration::from_secs(10));
        for _ in 0..5 {
            tx.unbounded_send(Arrival::Unchanged(1)).unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert_eq!(log.worked(), Vec::<u32>::new(), "the retry waits its delay");
        until("1 retried", || log.worked() == vec![1]).await;
        assert!(
            start.elapsed() >= Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );

        tx.unbounded_send(Arrival::Unchanged(2)).unwrap();
        until("2, with nothing waiting, at once", || {
            log.worked() == vec![1, 2]
        })
        .await;
        queue.add_after(3, Duration::from_secs(10));
        tx.unbounded_send(Arrival::News(3)).unwrap();
        until("3's news at once", || log.worked() == vec![1, 2, 3]).await;
        assert!(
            start.elapsed() < Duration::from_secs(12),
            "{:?}",
            start.elapsed()
        );
        stop.notify_one();
        task.await.unwrap();
    }

    /// A gone object's timer goes with it: its key is worked on now (the work forgets it),
    /// not when the timer is due; and again after the work under way, which may have set
    /// a timer meanwhile. A gone key with neither costs no work.
    #[tokio::test(start_paused = true)]
    async fn a_gone_arrival_drops_the_timer_and_works_on_the_key_now() {
        let queue = Queue::new(4);
        let log = Arc::new(Log::default());
        let gate = Arc::new(Notify::new());
        log.hold.lock().unwrap().insert(3, Arc::clone(&gate));
        let (tx, rx) = futures::channel::mpsc::unbounded::<Arrival<u32>>();
        let stop = Arc::new(Notify::new());
        let s = Arc::clone(&stop);
        let task = tokio::spawn(
            Arc::clone(&queue).run(rx, 4, log.worker(), async move { s.notified().await }),
        );
        let start = Instant::now();
        queue.add_at(1, start + Duration::from_secs(3600));
        queue.add_after(2, Duration::from_secs(30));
        tx.unbounded_send(Arrival::Gone(1)).unwrap();
        tx.unbounded_send(Arrival::Gone(2)).unwrap();
        until("1 and 2 worked on", || log.worked() == vec![1, 2]).await;
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(queue.timers(), 0);

        tx.unbounded_send(Arrival::Gone(4)).unwrap();
        queue.add(3);
        until("3 started", || queue.counts() == (1, 0)).await;
        tx.unbounded_send(Arrival::Gone(3)).unwrap();
        until("3 to be worked on again", || queue.counts() == (1, 1)).await;
        log.hold.lock().unwrap().clear();
        gate.notify_one();
        until("3 worked on twice", || log.worked() == vec![1, 2, 3, 3]).await;
        tokio::time::sleep(Duration::from_secs(7200)).await;
        assert_eq!(log.worked(), vec![1, 2, 3, 3], "4 had nothing waiting");
        stop.notify_one();
        task.await.unwrap();
    }

    /// The wait returned (the log's "retrying in") is the real one when the key is
    /// already due sooner.
    #[tokio::test(start_paused = true)]
    async fn a_retry_already_due_sooner_returns_when_it_is_due() {
        let queue: Arc<Queue<u32>> = Queue::new(4);
        assert_eq!(
            queue.add_after(1, Duration::from_secs(10)),
            Duration::from_secs(10)
        );
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(
            queue.add_after(1, Duration::from_secs(30)),
            Duration::from_secs(6)
        );
        assert_eq!(
            queue.add_after(1, Duration::from_secs(6)),
            Duration::from_secs(6)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_of_many_keys_are_bounded_in_rate_not_only_each_by_its_backoff() {
        // Concurrency 4: at most 4 retries at once, then 12 per second.
        let queue = Queue::new(4);
        let log = Arc::new(Log::default());
        let running = Running::start(&queue, futures::stream::pending(), 16, &log);
        let waits: Vec<Duration> = (0..40)
            .map(|k| queue.add_after(k, Duration::from_millis(100)))
            .collect();
        assert!(waits[..4].iter().all(|w| *w == Duration::from_millis(100)));
        assert!(waits[4] > Duration::from_millis(80) && waits[4] <= Duration::from_millis(100));
        let last = *waits.last().unwrap();
        assert!(
            last >= Duration::from_millis(2900) && last <= Duration::from_millis(3000),
            "36 retries over the burst, 12 a second: {last:?}"
        );
        let start = Instant::now();
        until("all retried", || log.worked().len() == 40).await;
        assert!(start.elapsed() >= Duration::from_millis(2900));
        running.stop().await;
        // A key already due sooner takes no token, and waits for its earlier timer.
        let queue: Arc<Queue<u32>> = Queue::new(1);
        queue.add_after(1, Duration::from_millis(100));
        assert_eq!(
            queue.add_after(1, Duration::from_secs(5)),
            Duration::from_millis(100)
        );
        assert_eq!(
            queue.add_after(2, Duration::from_millis(100)),
            Duration::from_secs_f64(1.0 / 3.0).max(Duration::from_millis(100)),
            "the second token is a third of a second away"
        );
    }

    /// News 20 times a second for a minute, each cutting the key's retry, and work that
    /// fails at once each time: at most 20 attempts in the minute (the ceiling), where the
    /// news alone made one every 50 ms. Another key is not held back by it.
    #[tokio::test(start_paused = true)]
    async fn no_key_is_worked_on_more_than_its_ceiling_whatever_asks() {
        let queue: Arc<Queue<u32>> = Queue::new(4);
        let worked = Arc::new(Mutex::new(Vec::new()));
        let (w, q) = (Arc::clone(&worked), Arc::clone(&queue));
        let work = move |key: u32| {
            w.lock().unwrap().push((key, Instant::now()));
            q.add_after(key, Duration::from_millis(100));
            async {}
        };
        let (tx, rx) = futures::channel::mpsc::unbounded::<Arrival<u32>>();
        let stop = Arc::new(Notify::new());
        let s = Arc::clone(&stop);
        let task =
            tokio::spawn(Arc::clone(&queue).run(rx, 4, work, async move { s.notified().await }));
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            tx.unbounded_send(Arrival::News(1)).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tx.unbounded_send(Arrival::News(2)).unwrap();
        until("2 worked on", || {
            worked.lock().unwrap().iter().any(|(k, _)| *k == 2)
        })
        .await;
        let times: Vec<Instant> = worked
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| *k == 1)
            .map(|(_, t)| *t)
            .collect();
        let most = (0..times.len())
            .map(|i| {
                times[i..]
                    .iter()
                    .take_while(|t| **t < times[i] + Duration::from_secs(60))
                    .count()
            })
            .max()
            .unwrap_or(0);
        assert!((15..=20).contains(&most), "{most} attempts in a minute");
        let two = worked
            .lock()
            .unwrap()
            .iter()
            .find(|(k, _)| *k == 2)
            .unwrap()
            .1;
        assert!(
            two.duration_since(start) < Duration::from_millis(60_100),
            "2 at once"
        );
        stop.notify_one();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn timers_fire_when_due_in_order_unlimited_and_a_sooner_one_rearms() {
        let queue = Queue::new(1);
        let log = Arc::new(Log::default());
        let running = Running::start(&queue, futures::stream::pending(), 4, &log);
        let start = Instant::now();
        // A hundred pods due in an hour: timers, not retries, so not spaced by the
        // retries' rate (1 at once, 3 a second).
        for k in 0..100 {
            queue.add_at(k, start + Duration::from_secs(3600));
        }
        // Set after the hour-long ones: the run loop re-arms for it.
        queue.add_at(500, start + Duration::from_secs(5));
        queue.add_at(500, start + Duration::from_secs(50));
        until("500 worked on", || log.worked() == vec![500]).await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(5) && took < Duration::from_secs(6),
            "the sooner time holds: {took:?}"
        );
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(log.worked(), vec![500], "not again at 50 s");
        // Cancelled by `add`: worked on now, and not again at its hour.
        queue.add(7);
        until("7 worked on", || log.worked().len() == 2).await;
        tokio::time::sleep_until(start + Duration::from_secs(3599)).await;
        assert_eq!(
            log.worked(),
            vec![7, 500],
            "none of the hour-long ones early"
        );
        until("all due", || log.worked().len() == 101).await;
        let took = start.elapsed();
        assert!(
            took >= Duration::from_secs(3600) && took < Duration::from_secs(3602),
            "{took:?}"
        );
        let mut want: Vec<u32> = (0..100).collect();
        want.push(500);
        want.retain(|k| *k != 7);
        want.push(7);
        want.sort_unstable();
        assert_eq!(log.worked(), want, "each once");
        assert_eq!(queue.lock().timers.len(), 0);
        assert_eq!(queue.lock().delayed.len(), 0);
        running.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn stop_starts_nothing_new_and_waits_for_the_work_started() {
        let queue = Queue::new(4);
        let log = Arc::new(Log::default());
        let gate = Arc::new(Notify::new());
        log.hold.lock().unwrap().insert(1, Arc::clone(&gate));
        let running = Running::start(&queue, futures::stream::pending(), 1, &log);
        queue.add(1);
        queue.add(2);
        until("1 started", || queue.counts() == (1, 1)).await;
        let stopping = tokio::spawn(running.stop());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!stopping.is_finished(), "waits for 1");
        gate.notify_one();
        stopping.await.unwrap();
        assert_eq!(log.worked(), vec![1], "2 was never started");
        queue.add(3);
        queue.add_after(4, Duration::from_millis(1));
        assert_eq!(queue.counts(), (0, 1), "closed: nothing more is queued");
    }

    /// A unit of work that panics (a bug) neither ends its worker nor pins its key: with
    /// one worker, the keys after it are still worked on, nothing stays in `processing`,
    /// and the key is worked on again when it is added again.
    #[tokio::test(start_paused = true)]
    async fn a_panic_in_the_work_neither_kills_the_worker_nor_pins_the_key() {
        let queue = Queue::new(1);
        let worked = Arc::new(Mutex::new(Vec::new()));
        let panicked = Arc::new(AtomicUsize::new(0));
        let (w, p) = (Arc::clone(&worked), Arc::clone(&panicked));
        let work = move |key: u32| {
            let (w, p) = (Arc::clone(&w), Arc::clone(&p));
            async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                if key == 2 && p.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("a bug on key 2");
                }
                w.lock().unwrap().push(key);
            }
        };
        let stop = Arc::new(Notify::new());
        let s = Arc::clone(&stop);
        let source = futures::stream::iter([1, 2, 3, 4]).chain(futures::stream::pending());
        let task = tokio::spawn(
            Arc::clone(&queue).run(source, 1, work, async move { s.notified().await }),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(panicked.load(Ordering::SeqCst), 1);
        assert_eq!(*worked.lock().unwrap(), vec![1, 3, 4], "the worker went on");
        assert_eq!(queue.counts(), (0, 0), "key 2 is not left in processing");
        queue.add(2);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            *worked.lock().unwrap(),
            vec![1, 3, 4, 2],
            "2 is worked on again"
        );
        stop.notify_one();
        task.await.unwrap();
    }
}
