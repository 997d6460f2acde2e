//! metainit's entry point: parses the command line, starts logging and runs the chosen
//! command: the daemon, `--once`, `--check-config`, `status`, `probe` or `completions`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use metainit::{
    Error, Result,
    cli::{Cli, Command, RunArgs, completions},
    daemon, kubeconfig, logging, once, probe, status,
};

// One thread runs everything (the blocking pool aside: DNS lookups, and kube's exec
// credential refreshes, which it runs by `spawn_blocking`). metainit waits on the network
// nearly all the time; with the default worker per core, each watch event and answer woke
// another thread by a futex and moved the object between cores. One thread: 16 % fewer
// instructions in the 1,000-object burst and a quarter less CPU per object (BENCHMARKS.md).
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse_or_exit();
    let format = match &cli.command {
        Some(Command::Status(args)) => args.common.log_format,
        Some(Command::Probe(args)) => args.log_format,
        Some(Command::Completions(_)) | None => cli.run.common.log_format,
    };
    logging::init(format);
    let result = match cli.command {
        Some(Command::Status(args)) => status::run(args).await,
        Some(Command::Probe(args)) => probe::run(args.settings(), format).await,
        Some(Command::Completions(args)) => {
            completions::print(args.shell).map(|()| ExitCode::SUCCESS)
        }
        None => run(cli.run).await,
    };
    result.unwrap_or_else(|e: Error| logging::fatal(format, &e))
}

async fn run(args: RunArgs) -> Result<ExitCode> {
    args.check()?;
    if args.check_config {
        let config = kubeconfig::load(&args.common.kubeconfig()).await?;
        metainit::client::build(
            config,
            args.common.request_timeout,
            Default::default(),
            None,
        )?;
        metainit::output::print("configuration OK\n")?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.once {
        once::run(args).await
    } else {
        daemon::run(args).await
    }
}
