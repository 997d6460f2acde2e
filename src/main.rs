//! metainit's entry point: parses the command line, starts logging and runs the chosen
//! command: the daemon, `--once`, `--check-config`, `status`, `probe` or `completions`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use metainit::{
    Error, Result,
    cli::{Cli, Settings, Task, completions},
    daemon, logging, once, probe, setup, status,
};

// One thread runs everything (the blocking pool aside: DNS lookups, and kube's exec
// credential refreshes, which it runs by `spawn_blocking`). metainit waits on the network
// nearly all the time; with the default worker per core, each watch event and answer woke
// another thread by a futex and moved the object between cores. One thread: 16 % fewer
// instructions in the 1,000-object burst and a quarter less CPU per object (BENCHMARKS.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse_or_exit();
    let format = cli.log_format();
    logging::init(format);
    let result = match cli.settings() {
        Ok(settings) => run(settings).await,
        Err(e) => Err(e),
    };
    result.unwrap_or_else(|e: Error| logging::fatal(format, &e))
}

async fn run(settings: Settings) -> Result<ExitCode> {
    let format = settings.log_format;
    match settings.task {
        Task::Daemon(settings) => daemon::run(*settings).await,
        Task::Once(settings) => once::run(*settings).await,
        Task::CheckConfig(client) => {
            setup::connect(&client, None).await?;
            metainit::output::print("configuration OK\n")?;
            Ok(ExitCode::SUCCESS)
        }
        Task::Status(settings) => status::run(*settings, format).await,
        Task::Probe(settings) => probe::run(settings, format).await,
        Task::Completions(shell) => completions::print(shell).map(|()| ExitCode::SUCCESS),
    }
}
