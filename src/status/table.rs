//! What `status` prints: the table, aligned like kubectl's, with a summary line, or the
//! report as JSON or YAML; and the line that names what is held back too long.

use std::time::Duration;

use super::webhooks::WebhookRow;
use super::{Report, Row};
use crate::{Error, Result, text};

/// `-o`: how the report is printed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Table,
    Json,
    Yaml,
}

/// Which objects are held back longer than `--max-age`, oldest first (at most 10 named).
pub fn over_age(rows: &[&Row], max: Duration) -> String {
    const SHOWN: usize = 10;
    let named: Vec<String> = rows
        .iter()
        .take(SHOWN)
        .map(|r| {
            format!(
                "{} {}{} ({} by {})",
                r.kind,
                r.namespace
                    .as_ref()
                    .map(|n| format!("{n}/"))
                    .unwrap_or_default(),
                r.name,
                text::age(r.age_seconds),
                r.blocked_by.join(",")
            )
        })
        .collect();
    let more = match rows.len().saturating_sub(SHOWN) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "{} held back longer than --max-age {}: {}{more}",
        rows.len(),
        text::duration(max),
        named.join(", ")
    )
}

/// The table, aligned like kubectl's: columns padded to the widest cell plus three spaces.
pub fn table(report: &Report) -> String {
    let mut out = objects_table(report);
    if let Some(rows) = &report.webhooks {
        out.push('\n');
        out.push_str(&webhooks_table(rows));
    }
    out
}

/// The webhooks that are down or exempted, or one line saying none is.
pub fn webhooks_table(rows: &[WebhookRow]) -> String {
    if rows.is_empty() {
        return "no webhook of a labelled configuration is down or exempted\n".into();
    }
    let mut cells = vec![
        ["CONFIGURATION", "WEBHOOK", "SERVICE", "READY", "STATE"]
            .map(String::from)
            .to_vec(),
    ];
    for r in rows {
        cells.push(vec![
            format!("{}/{}", r.kind, r.configuration),
            r.webhook.clone(),
            r.service.clone(),
            r.ready_endpoints.to_string(),
            r.describe(),
        ]);
    }
    aligned(&cells)
}

/// Columns padded to the widest cell plus three spaces, as kubectl prints them.
fn aligned(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

fn objects_table(report: &Report) -> String {
    if report.items.is_empty() {
        return summary(report) + "\n";
    }
    let with_release = !report.release_rules.is_empty();
    let mut header = ["KIND", "NAME", "AGE", "BLOCKED BY", "LABELLED", "OWNER"]
        .map(String::from)
        .to_vec();
    let with_added = report.items.iter().any(|r| !r.added_by.is_empty());
    if with_added {
        header.push("ADDED BY".into());
    }
    if with_release {
        header.push("RELEASE".into());
    }
    let with_kept = report.items.iter().any(|r| r.kept_by.is_some());
    if with_kept {
        header.push("KEPT BY".into());
    }
    let mut rows = vec![header];
    for r in &report.items {
        let mut row = vec![
            r.kind.clone(),
            match &r.namespace {
                Some(ns) => format!("{ns}/{}", r.name),
                None => r.name.clone(),
            },
            text::age(r.age_seconds),
            r.blocked_by.join(","),
            if r.labelled { "yes" } else { "no" }.into(),
            r.owner.clone().unwrap_or_else(|| "<none>".into()),
        ];
        if with_added {
            row.push(added_by(r));
        }
        if with_release {
            row.push(r.release.clone().unwrap_or_else(|| "-".into()));
        }
        if with_kept {
            row.push(r.kept_by.clone().unwrap_or_else(|| "-".into()));
        }
        rows.push(row);
    }
    let mut out = aligned(&rows);
    out.push_str(&summary(report));
    out.push('\n');
    out
}

/// Who added the row's gates: the field manager once if it added them all, else
/// `GATE=MANAGER` for each gate it is known for; `-` if for none.
fn added_by(r: &Row) -> String {
    let mut managers: Vec<&String> = r.added_by.values().collect();
    managers.dedup();
    match managers.as_slice() {
        [] => "-".into(),
        [one] if r.added_by.len() == r.blocked_by.len() => one.to_string(),
        _ => r
            .added_by
            .iter()
            .map(|(gate, m)| format!("{gate}={m}"))
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// One line: how many are held, by which names, and the oldest.
pub fn summary(report: &Report) -> String {
    if report.items.is_empty() {
        return format!("nothing held back ({} mode)", report.mode);
    }
    let by: Vec<String> = report
        .by_name
        .iter()
        .map(|(n, c)| format!("{c} by {n}"))
        .collect();
    let oldest = &report.items[0];
    let labelled = report.items.iter().filter(|r| r.labelled).count();
    format!(
        "{} held back ({labelled} labelled {}): {}; oldest {} {}{} ({})",
        report.items.len(),
        report.label_key,
        by.join(", "),
        oldest.kind,
        oldest
            .namespace
            .as_ref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default(),
        oldest.name,
        text::age(oldest.age_seconds)
    )
}

pub(super) fn print(report: &Report, output: Output) -> Result<()> {
    let text = match output {
        Output::Table => table(report),
        Output::Json => {
            serde_json::to_string_pretty(report).map_err(|e| Error::Output(e.to_string()))? + "\n"
        }
        Output::Yaml => {
            serde_saphyr::to_string(report).map_err(|e| Error::Output(e.to_string()))?
        }
    };
    crate::output::print(&text)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn table_is_aligned_and_summarised() {
        let report = Report {
            mode: "scheduling-gates".into(),
            label_key: "k8s.opsani.io/initializer".into(),
            items: vec![
                Row {
                    kind: "Pod".into(),
                    namespace: Some("kueue-system".into()),
                    name: "kueue-controller-manager-7d9f".into(),
                    age_seconds: 700,
                    blocked_by: vec!["kueue.x-k8s.io/admission".into()],
                    labelled: true,
                    owner: Some("ReplicaSet/kueue-controller-manager".into()),
                    release: None,
                    kept_by: None,
                    added_by: BTreeMap::new(),
                },
                Row {
                    kind: "Pod".into(),
                    namespace: Some("default".into()),
                    name: "job-1".into(),
                    age_seconds: 30,
                    blocked_by: vec!["kueue.x-k8s.io/admission".into(), "example.com/b".into()],
                    labelled: false,
                    owner: None,
                    release: None,
                    kept_by: None,
                    added_by: BTreeMap::new(),
                },
            ],
            by_name: BTreeMap::from([
                ("example.com/b".into(), 1),
                ("kueue.x-k8s.io/admission".into(), 2),
            ]),
            release_rules: Vec::new(),
            webhooks: None,
        };
        let t = table(&report);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");

        let col = |l: &str, word: &str| l.find(word).unwrap();
        assert_eq!(col(lines[0], "AGE"), col(lines[1], "11m"));
        assert_eq!(col(lines[0], "OWNER"), col(lines[2], "<none>"));
        assert_eq!(
            lines[3],
            "2 held back (1 labelled k8s.opsani.io/initializer): 1 by example.com/b, 2 by kueue.x-k8s.io/admission; \
             oldest Pod kueue-system/kueue-controller-manager-7d9f (11m)"
        );
        assert!(!lines[0].contains("KEPT BY"), "no column when none is kept");
        // A pod whose gates the server kept: the field manager that puts them back.
        let mut kept = report;
        kept.items[1].kept_by = Some("kubectl-create (Update)".into());
        let k = table(&kept);
        let klines: Vec<&str> = k.lines().collect();
        assert_eq!(
            col(klines[0], "KEPT BY"),
            col(klines[2], "kubectl-create (Update)")
        );
        assert!(klines[1].ends_with("   -"), "{k}");
        // Who added each gate: once if one manager added them all, else gate by gate.
        let mut added = kept;
        added.items[0].added_by = BTreeMap::from([(
            "kueue.x-k8s.io/admission".to_string(),
            "kube-controller-manager (Update)".to_string(),
        )]);
        let a = table(&added);
        let alines: Vec<&str> = a.lines().collect();
        assert_eq!(
            col(alines[0], "ADDED BY"),
            col(alines[1], "kube-controller-manager (Update)"),
            "{a}"
        );
        added.items[1].added_by = BTreeMap::from([(
            "example.com/b".to_string(),
            "kubectl-create (Update)".to_string(),
        )]);
        let a = table(&added);
        let alines: Vec<&str> = a.lines().collect();
        assert_eq!(
            alines[2].find("example.com/b=kubectl-create (Update)"),
            Some(col(alines[0], "ADDED BY")),
            "a manager known for one gate of two: named with its gate: {a}"
        );
        assert!(
            col(alines[0], "ADDED BY") < col(alines[0], "KEPT BY"),
            "{a}"
        );
    }
}
