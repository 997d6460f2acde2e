//! metainit's entry point: parses the command line, starts logging and runs the chosen
//! command: the daemon, `--once`, `--check-config` or `status`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use metainit::{
    Error, Result,
    cli::{Cli, Command, RunArgs},
    daemon, kubeconfig, logging, once, status,
};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::try_parse().unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Some(Command::Status(args)) => {
            logging::init(args.common.log_format);
            status::run(args).await
        }
        None => {
            logging::init(cli.run.common.log_format);
            run(cli.run).await
        }
    };
    result.unwrap_or_else(|e: Error| {
        eprintln!("error: {e}");
        ExitCode::from(e.exit_code() as u8)
    })
}

async fn run(args: RunArgs) -> Result<ExitCode> {
    args.check()?;
    if args.check_config {
        let config = kubeconfig::load(&args.common).await?;
        metainit::client::build(
            config,
            args.common.request_timeout,
            Default::default(),
            None,
        )?;
        println!("configuration OK");
        return Ok(ExitCode::SUCCESS);
    }
    if args.once {
        once::run(args).await
    } else {
        daemon::run(args).await
    }
}
