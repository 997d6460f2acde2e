//! metainit clears pending initializers (Kubernetes 1.7 to 1.13) and scheduling gates
//! (1.26 and later) on objects that carry a label key, so that the controllers those
//! mechanisms wait for can start.
#![forbid(unsafe_code)]

// The modules by layer: each imports only from its own layer or the layers above it here
// (and no two import each other, even roundabout: python3 ../shared/tools/shape.py).
//
// Pure rules: the object's slim view, the blockers, the failure table (every error's class
// and what is done about it), the orphaned-gate release rules, input checks, the text of
// times and of what the commands print, the `--timeout` budget.
pub mod blocker;
pub mod budget;
pub mod failure;
pub mod object;
pub mod output;
pub mod release;
pub mod text;
pub mod validation;
// Plumbing: every retry (its schedules, the one backoff type and the one retry loop), the
// client and its kubeconfig, discovery and the start-up requests, health, metrics, Events,
// logging, the Leases by which instances share the work.
pub mod admin;
pub mod client;
pub mod discovery;
pub mod events;
pub mod kubeconfig;
pub mod logging;
pub mod metrics;
pub mod peers;
pub mod retry;
pub mod shutdown;
// The engine: the one watch, its store, the queue, one attempt at an object, the paged
// LIST.
pub mod clear;
pub mod list;
pub mod queue;
pub mod store;
pub mod watch;
// Features: the webhook deadlock; the cold-start forecast, which `status --risks` prints
// (orphaned gates are rules above and the daemon's work).
pub mod risks;
pub mod webhooks;
// Entry points: the command line, what they share, the daemon, `--once`, `status`,
// `probe`, `main.rs`.
pub mod cli;
pub mod daemon;
pub mod once;
pub mod probe;
pub mod setup;
pub mod status;

/// The git commit this binary was built from (build.rs), or "unknown".
pub const GIT_COMMIT: &str = env!("METAINIT_GIT_COMMIT");

/// What `--version` prints after the name: the crate's version and the commit.
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("METAINIT_GIT_COMMIT"),
    ")"
);

/// Everything that can go wrong, with a short label for the failures metric.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input: a flag, an environment variable, the kubeconfig. Exit code 2.
    #[error("{0}")]
    Config(String),

    /// The server answered, but it is not a Kubernetes API server we can work with. Exit code 2.
    #[error("{0}")]
    Server(String),

    /// The API server could not be reached before the deadline.
    #[error("{0}")]
    Unreachable(String),

    #[error("Kubernetes API request failed: {0}")]
    Kube(#[source] kube::Error),

    #[error("cannot serve the admin endpoints on {addr}: {source}")]
    Admin {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot write the output: {0}")]
    Output(String),
}

impl Error {
    /// The process exit code this error should end the process with.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Config(_) | Error::Server(_) | Error::Admin { .. } => 2,
            _ => 1,
        }
    }

    /// A short label, for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            Error::Config(_) => "config",
            Error::Server(_) => "server",
            Error::Unreachable(_) => "unreachable",
            Error::Kube(_) => "kube",
            Error::Admin { .. } => "admin",
            Error::Output(_) => "output",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
