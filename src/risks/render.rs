//! The forecast as a user reads it: a block per finding (table), or the findings as JSON or
//! YAML, with how much was read.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Finding, graph::World};

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Forecast {
    pub findings: Vec<Finding>,
    /// How many webhooks and pod templates were read.
    pub webhooks: usize,
    pub templates: usize,
}

impl Forecast {
    pub fn new(world: &World, findings: Vec<Finding>) -> Forecast {
        Forecast {
            findings,
            webhooks: world.webhooks.len(),
            templates: world.templates.len(),
        }
    }
}

/// A block per finding, then one summary line.
pub fn table(f: &Forecast) -> String {
    let mut out = String::new();
    for finding in &f.findings {
        let head = match finding.webhooks.is_empty() {
            true => finding.objects.join(", "),
            false => finding.webhooks.join(" -> "),
        };
        out.push_str(&format!("{}: {head}\n", finding.risk.label()));
        if !finding.webhooks.is_empty() {
            out.push_str(&format!("  objects:  {}\n", finding.objects.join(", ")));
        }
        out.push_str(&format!("  why:      {}\n", finding.why));
        out.push_str(&format!("  fix:      {}\n", finding.fix));
        out.push_str(&format!("  metainit: {}\n\n", finding.metainit));
    }
    out.push_str(&summary(f));
    out.push('\n');
    out
}

/// "3 risks (1 cycle, 2 self-interception), 1 cleared by metainit as configured; read 12
/// webhooks, 40 pod templates", or that none was found.
pub fn summary(f: &Forecast) -> String {
    let read = format!(
        "read {} webhooks, {} pod templates",
        f.webhooks, f.templates
    );
    if f.findings.is_empty() {
        return format!("no risk found; {read}");
    }
    let mut by: BTreeMap<&str, usize> = BTreeMap::new();
    for finding in &f.findings {
        *by.entry(finding.risk.label()).or_default() += 1;
    }
    let kinds: Vec<String> = by.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let covered = f.findings.iter().filter(|x| x.covered).count();
    format!(
        "{} risks ({}), {covered} cleared by metainit as configured; {read}",
        f.findings.len(),
        kinds.join(", ")
    )
}
