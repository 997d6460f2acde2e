//! The causes of `metainit_watch_restarts_total`.

/// Why a watch restarted: the `cause` of `metainit_watch_restarts_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchCause {
    ListFailed,
    WatchStartFailed,
    /// The resource version expired (410 as a watch event): an ordinary relist.
    Expired,
    WatchError,
    StreamFailed,
    NoResourceVersion,
    /// The server's revision went backwards (etcd restored from a snapshot).
    RevisionBackwards,
    /// A watch that ended within a second with no event (`watch::SHORT`); a list whose
    /// continue tokens went round (`list::Pages`).
    ShortWatch,
    ListLoop,
}

impl WatchCause {
    /// Every cause, each exported at 0 from the start.
    pub const ALL: [WatchCause; 9] = [
        WatchCause::ListFailed,
        WatchCause::WatchStartFailed,
        WatchCause::Expired,
        WatchCause::WatchError,
        WatchCause::StreamFailed,
        WatchCause::NoResourceVersion,
        WatchCause::RevisionBackwards,
        WatchCause::ShortWatch,
        WatchCause::ListLoop,
    ];

    /// The metric's label.
    pub fn label(self) -> &'static str {
        match self {
            WatchCause::ListFailed => "list_failed",
            WatchCause::WatchStartFailed => "watch_start_failed",
            WatchCause::Expired => "expired",
            WatchCause::WatchError => "watch_error",
            WatchCause::StreamFailed => "stream_failed",
            WatchCause::NoResourceVersion => "no_resource_version",
            WatchCause::RevisionBackwards => "revision_backwards",
            WatchCause::ShortWatch => "short_watch",
            WatchCause::ListLoop => "list_loop",
        }
    }
}
