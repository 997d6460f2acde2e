//! `metainit status --risks`: the forecast of `crate::risks`, read and printed; exit 0
//! when there is nothing to report, 3 when there is, 2 when it cannot tell.

use std::process::ExitCode;

use crate::{
    Error, Result,
    cli::{Output, StatusArgs},
    risks::{self, Running, render},
    shutdown::Shutdown,
};

/// The exit code of a forecast with findings: apart from 1 (`--max-age`) and 2 (errors).
pub const FOUND: u8 = 3;

pub async fn run(args: &StatusArgs) -> Result<ExitCode> {
    let format = args.common.log_format;
    let stop = Shutdown::on_signals_saying("signal received: stopping the forecast");
    let forecast = tokio::select! {
        f = forecast(args) => f,
        _ = stop.requested() => return Ok(crate::logging::final_line(format, super::ON_SIGNAL, 1)),
    };
    let forecast = match forecast {
        Ok(f) => f,
        Err(e) => return Ok(crate::logging::fatal_with(format, &e, 2)),
    };
    let text = match args.output {
        Output::Table => render::table(&forecast),
        Output::Json => {
            serde_json::to_string_pretty(&forecast).map_err(|e| Error::Output(e.to_string()))?
                + "\n"
        }
        Output::Yaml => {
            serde_saphyr::to_string(&forecast).map_err(|e| Error::Output(e.to_string()))?
        }
    };
    crate::output::print(&text)?;
    Ok(match forecast.findings.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(FOUND),
    })
}

async fn forecast(args: &StatusArgs) -> Result<render::Forecast> {
    let common = &args.common;
    args.check()?;
    let label_key = args.label_key()?;
    let conn = crate::setup::connect(&common.kubeconfig(), common.request_timeout, None).await?;
    let world = risks::read::world(&conn.client, &conn.url, &label_key, common.timeout).await?;
    let running = Running {
        label_key,
        webhooks: args.webhooks,
        release_gates: args
            .rules
            .release_gate
            .iter()
            .map(|r| (r.gate.clone(), crate::text::duration(r.after)))
            .collect(),
    };
    let mut findings = risks::forecast(&world, &running);
    // `-n NS`: the findings that name an object or a webhook's service in NS.
    if let Some(ns) = &common.namespace {
        let inside = format!(" {ns}/");
        findings.retain(|f| f.objects.iter().any(|o| o.contains(&inside)));
    }
    Ok(render::Forecast::new(&world, findings))
}
