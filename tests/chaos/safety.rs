//! Safety: every request metainit sent is judged (only labelled objects that are theirs to
//! clear PATCHed, only the `--only` name removed), and every object it must leave is as it
//! was created.

use super::*;

/// Judges every request metainit sent: only labelled objects that are theirs to clear may
/// be PATCHed, and a PATCH may remove only the `--only` name.
fn judge_requests(double: &Double, g: Gen, problems: &mut Vec<String>) -> HashSet<String> {
    let mut wrong = HashSet::new();
    for r in double.requests() {
        if r.method == "GET" {
            continue;
        }
        let path = r.path_and_query.split('?').next().unwrap_or("");
        if path.contains("/events") {
            continue;
        }
        let name = path.rsplit('/').next().unwrap_or("").to_string();
        let cat = Cat::of(&name);
        if r.method != "PATCH" || !path.contains("/pods/") || !cat.is_some_and(Cat::must_clear) {
            wrong.insert(name.clone());
            problems.push(format!(
                "{} {} ({cat:?}) answered {}: metainit may only PATCH labelled objects it clears",
                r.method, r.path_and_query, r.status
            ));
            continue;
        }
        let Ok(body) = serde_json::from_str::<Value>(&r.body) else {
            wrong.insert(name.clone());
            problems.push(format!(
                "PATCH {path} with a body that is not JSON: {}",
                r.body
            ));
            continue;
        };
        let ops = body.as_array().cloned().unwrap_or_default();
        let list = |v: &Value| -> Vec<String> {
            let v = v.get("pending").unwrap_or(v);
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|e| e["name"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        // The test of the pending list, not the uid's or the label's before it.
        let tested = ops
            .iter()
            .find(|o| o["op"] == "test" && o["path"] == g.list_path())
            .map(|o| list(&o["value"]));
        let kept = ops.iter().find_map(|o| match o["op"].as_str() {
            Some("remove") => Some(Vec::new()),
            Some("replace") => Some(list(&o["value"])),
            _ => None,
        });
        let (Some(tested), Some(kept)) = (tested, kept) else {
            wrong.insert(name.clone());
            problems.push(format!(
                "PATCH {path} without a test and a remove/replace: {body}"
            ));
            continue;
        };
        let removed: Vec<&String> = tested.iter().filter(|n| !kept.contains(n)).collect();
        if removed.iter().any(|n| *n != g.cleared()) || kept.iter().any(|n| n == g.cleared()) {
            wrong.insert(name.clone());
            problems.push(format!(
                "PATCH {path} removes {removed:?} keeps {kept:?}: only {} may go",
                g.cleared()
            ));
        }
    }
    wrong
}

impl Run<'_> {
    /// Safety: the request log, then the final state of every object metainit must leave.
    pub fn safety(&mut self) {
        let g = self.g;
        let mut wrong = judge_requests(&self.double, g, &mut self.problems);
        for o in self.objs.iter().filter(|o| !o.cat.must_clear()) {
            let cur = self.double.get("pods", o.ns, &o.name);
            let ok = match &cur {
                None => false,
                Some(cur) => {
                    g.names(cur) == o.original
                        && (g != Gen::Legacy
                            || o.cat != Cat::Refused
                            || cur.pointer("/metadata/initializers/result").is_some())
                }
            };
            if !ok {
                wrong.insert(o.name.clone());
                self.problems.push(format!(
                    "{}/{} ({:?}) changed: was {:?}, now {:?}",
                    o.ns,
                    o.name,
                    o.cat,
                    o.original,
                    cur.as_ref().map(|c| g.names(c))
                ));
            }
        }
        self.row.wrong = wrong.len();
        if !wrong.is_empty() {
            self.problems.truncate(20);
        }
    }
}
