// The kube-double binary: parse flags, start the double, write a kubeconfig, wait for a signal.
#![forbid(unsafe_code)]

use clap::Parser;
use kube_double::Double;
use kube_double::cli::Cli;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let config = cli.config();
    let generation = config.generation;
    let double = Double::start(config).await?;
    if let Some(path) = &cli.kubeconfig_out {
        double.write_kubeconfig(path, cli.kubeconfig_token.as_deref())?;
    }
    tracing::info!(url = %double.url(), %generation, "kube-double listening");
    wait_for_signal().await?;
    double.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> std::io::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r,
        _ = term.recv() => Ok(()),
    }
}
