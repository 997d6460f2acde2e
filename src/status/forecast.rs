//! The forecast of `status --risks` as a user reads it: a block per finding (table), or the
//! findings as JSON or YAML, with how much was read.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::risks::{Finding, Risk, graph::World};

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
        // A cycle's webhooks in its order; the others' as a list.
        let head = match (finding.webhooks.is_empty(), finding.risk) {
            (true, _) => finding.objects.join(", "),
            (false, Risk::Cycle) => finding.webhooks.join(" -> "),
            (false, _) => finding.webhooks.join(", "),
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
        "read {}, {}",
        count(f.webhooks, "webhook"),
        count(f.templates, "pod template")
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
        "{} ({}), {covered} cleared by metainit as configured; {read}",
        count(f.findings.len(), "risk"),
        kinds.join(", ")
    )
}

/// "1 risk", "2 risks".
fn count(n: usize, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(risk: Risk, covered: bool) -> Finding {
        Finding {
            risk,
            webhooks: vec!["validating/c/w".into()],
            objects: vec!["Deployment ns/d".into()],
            why: "why".into(),
            fix: "fix".into(),
            metainit: "m".into(),
            covered,
        }
    }

    #[test]
    fn the_summary_counts_in_words() {
        let mut f = Forecast {
            findings: vec![],
            webhooks: 1,
            templates: 0,
        };
        assert_eq!(
            summary(&f),
            "no risk found; read 1 webhook, 0 pod templates"
        );
        f.findings.push(finding(Risk::Cycle, true));
        assert_eq!(
            summary(&f),
            "1 risk (1 cycle), 1 cleared by metainit as configured; read 1 webhook, 0 pod templates"
        );
        f.findings.push(finding(Risk::Binding, false));
        f.templates = 1;
        assert!(summary(&f).starts_with("2 risks (1 binding, 1 cycle), 1 cleared"));
        let t = table(&f);
        assert!(
            t.starts_with("cycle: validating/c/w\n  objects:  Deployment ns/d\n  why:      why\n"),
            "{t}"
        );
    }
}
