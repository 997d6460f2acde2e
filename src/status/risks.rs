//! `metainit status --risks`: the forecast of `crate::risks`, read and printed; exit 0
//! when there is nothing to report, 3 when there is, 2 when it cannot tell.

use std::process::ExitCode;

use super::{Output, Settings, forecast};
use crate::{
    Error, Result,
    logging::LogFormat,
    risks::{self, Running},
    shutdown::Shutdown,
};

/// The exit code of a forecast with findings: apart from 1 (`--max-age`) and 2 (errors).
pub const FOUND: u8 = 3;

pub async fn run(settings: &Settings, format: LogFormat) -> Result<ExitCode> {
    let stop = Shutdown::on_signals_saying("signal received: stopping the forecast");
    let forecast = tokio::select! {
        f = read(settings) => f,
        _ = stop.requested() => return Ok(crate::logging::final_line(format, super::ON_SIGNAL, 1)),
    };
    let forecast = match forecast {
        Ok(f) => f,
        Err(e) => return Ok(crate::logging::fatal_with(format, &e, 2)),
    };
    let text = match settings.output {
        Output::Table => forecast::table(&forecast),
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

async fn read(settings: &Settings) -> Result<forecast::Forecast> {
    let label_key = settings.label_key.clone();
    let conn = crate::setup::connect(&settings.client, None).await?;
    let world = risks::read::world(&conn.client, &conn.url, &label_key, settings.timeout).await?;
    let running = Running {
        label_key,
        webhooks: settings.webhooks,
        release_gates: settings
            .rules
            .rules
            .iter()
            .map(|r| (r.gate.clone(), crate::text::duration(r.after)))
            .collect(),
    };
    let mut findings = risks::forecast(&world, &running);
    // `-n NS`: the findings that name an object or a webhook's service in NS.
    if let Some(ns) = &settings.namespace {
        let inside = format!(" {ns}/");
        findings.retain(|f| f.objects.iter().any(|o| o.contains(&inside)));
    }
    Ok(forecast::Forecast::new(&world, findings))
}
