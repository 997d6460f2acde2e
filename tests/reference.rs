//! The book's reference tables, checked against the code they describe (the man pages and
//! completions are generated outright: tests/generated.rs). Each table is prose a person
//! writes (what a flag or a metric means); what the code decides is checked here, so that
//! a flag, a variable, a default, a metric, its type or a label value added, renamed or
//! removed in the code fails until the page says the same:
//!
//! - docs/src/reference/command-line.md, "The daemon's flags": one row for every shown long
//!   flag of `metainit` and none for a flag that is gone; each row names the flag's
//!   environment variable and its default, as clap has them;
//! - docs/src/reference/environment.md names every variable;
//! - docs/src/reference/metrics.md: one row for every metric `/metrics` serves, with its
//!   type, and none for a metric that is gone; every label value served at 0 from the start
//!   (`reason`, `cause`) is in its row;
//! - docs/src/reference/behaviour.md, "Request ceiling": one row for each kind of request
//!   the limiter tells apart, with its burst and its most in any minute.

use std::collections::BTreeMap;

use clap::CommandFactory;

fn page(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The rows of the first table after `heading`, as cells.
fn table(text: &str, heading: &str) -> Vec<Vec<String>> {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("no heading {heading:?}"));
    text[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_flags_table_names_every_flag_its_variable_and_its_default() {
    let cmd = metainit::cli::Cli::command();
    let rows = table(
        &page("docs/src/reference/command-line.md"),
        "## The daemon's flags",
    );
    let environment = page("docs/src/reference/environment.md");
    let mut problems = Vec::new();
    let mut flags = Vec::new();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version") {
            continue;
        }
        let flag = format!("`--{long}");
        flags.push(flag.clone());
        let Some(row) = rows.iter().find(|r| {
            r[0].split(" or ")
                .flat_map(|f| f.split(", "))
                .any(|f| f == format!("{flag}`") || f.starts_with(&format!("{flag} ")))
        }) else {
            problems.push(format!("--{long}: no row"));
            continue;
        };
        if let Some(env) = arg.get_env() {
            let env = format!("`{}`", env.to_string_lossy());
            if !row[1].contains(&env) {
                problems.push(format!(
                    "--{long}: the variable is {env}, the row says {}",
                    row[1]
                ));
            }
            if !environment.contains(&env) {
                problems.push(format!("--{long}: environment.md does not name {env}"));
            }
        }
        for default in arg.get_default_values() {
            let default = format!("`{}`", default.to_string_lossy());
            if !row[2].contains(&default) {
                problems.push(format!(
                    "--{long}: the default is {default}, the row says {}",
                    row[2]
                ));
            }
        }
    }
    for row in &rows {
        let named = row[0]
            .split(['`', ' ', ','])
            .filter(|w| w.starts_with("--"))
            .all(|w| flags.iter().any(|f| f[1..] == *w));
        if !named {
            problems.push(format!("{}: a flag metainit does not have", row[0]));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/src/reference/command-line.md is stale:\n{}",
        problems.join("\n")
    );
}

/// Each metric `/metrics` serves, by its sample name, and its type; and the label values
/// served at 0 from the start, by metric. A family serves nothing until it has a label
/// value: a resource is known, and a gate watched (as `--release-gate` or `--watch-gates`
/// makes one).
fn served() -> (BTreeMap<String, String>, BTreeMap<String, Vec<String>>) {
    let metrics = metainit::metrics::Metrics::default();
    metrics.known_resource("scheduling-gates", "pods");
    let gate = metainit::metrics::GateLabels {
        gate: "example.com/quota".to_string(),
    };
    let _ = metrics.gates_released.get_or_create(&gate);
    let _ = metrics.gated_pods.get_or_create(&gate);
    let _ = metrics.gated_oldest.get_or_create(&gate);
    let _ = metrics.gate_held.get_or_create(&gate);
    let text = metrics.encode();
    let mut types = BTreeMap::new();
    let mut values: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            let sample = match kind {
                "counter" => format!("{name}_total"),
                "info" => format!("{name}_info"),
                _ => name.to_string(),
            };
            types.insert(sample, kind.to_string());
        } else if let Some((name, labels)) = line.split_once('{') {
            for pair in labels.split('}').next().unwrap().split(',') {
                if let Some((key, value)) = pair.split_once('=')
                    && matches!(key, "reason" | "cause")
                {
                    values
                        .entry(name.to_string())
                        .or_default()
                        .push(value.trim_matches('"').to_string());
                }
            }
        }
    }
    (types, values)
}

#[test]
fn the_metrics_table_names_every_metric_its_type_and_its_label_values() {
    let rows = table(&page("docs/src/reference/metrics.md"), "# Metrics");
    let (types, values) = served();
    assert!(types.len() >= 14, "{types:?}");
    let mut problems = Vec::new();
    for (name, kind) in &types {
        let Some(row) = rows.iter().find(|r| r[0] == format!("`{name}`")) else {
            problems.push(format!("{name}: no row"));
            continue;
        };
        if row[1] != *kind {
            problems.push(format!("{name}: a {kind}, the row says {}", row[1]));
        }
        for value in values.get(name).into_iter().flatten() {
            if !row[2].contains(&format!("`{value}`")) {
                problems.push(format!(
                    "{name}: the label value `{value}` is not in its row"
                ));
            }
        }
    }
    for row in &rows {
        if !types.contains_key(row[0].trim_matches('`')) {
            problems.push(format!("{}: /metrics serves no such metric", row[0]));
        }
    }
    assert!(
        problems.is_empty(),
        "docs/src/reference/metrics.md is stale:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_ceiling_table_states_each_kinds_burst_and_ceiling() {
    use metainit::client::RequestKind as K;
    let rows = table(
        &page("docs/src/reference/behaviour.md"),
        "## Request ceiling",
    );
    // The page's order: each collection's kinds first.
    let kinds = [
        K::WatchStart,
        K::List,
        K::Continue,
        K::Get,
        K::Patch,
        K::Write,
    ];
    assert_eq!(K::ALL.len(), kinds.len(), "a kind the page does not name");
    assert_eq!(rows.len(), kinds.len(), "{rows:?}");
    let number = |cell: &str| cell.replace(',', "").parse::<u32>().ok();
    for (row, kind) in rows.iter().zip(kinds) {
        assert_eq!(number(&row[1]), Some(kind.bucket().0), "{kind:?}: {row:?}");
        assert_eq!(
            number(&row[3]),
            Some(kind.per_minute()),
            "{kind:?}: {row:?}"
        );
    }
}
