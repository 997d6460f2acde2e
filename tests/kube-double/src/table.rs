// Server-side printing: meta.k8s.io Table answers for `Accept: ...;as=Table;v=v1;g=meta.k8s.io`.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::modern;
use crate::resources::ResourceInfo;
use crate::state::parse_time;

/// What each row's `object` holds (`includeObject` parameter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

#[derive(Clone, Debug)]
pub struct TableRequest {
    pub include: IncludeObject,
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`, as asked.
    pub api_version: String,
}

/// Reads the Accept header: a table is answered when the first acceptable media type asks for one.
/// `v1_served` is false on 1.13, which only knew meta.k8s.io/v1beta1 tables.
pub fn requested(
    accept: Option<&str>,
    include_object: Option<&str>,
    v1_served: bool,
) -> Option<TableRequest> {
    let accept = accept?;
    for media in accept.split(',') {
        let mut parts = media.split(';').map(str::trim);
        let base = parts.next().unwrap_or("");
        if base != "application/json" && base != "*/*" && base != "application/*" {
            continue;
        }
        let params: Vec<(&str, &str)> = parts.filter_map(|p| p.split_once('=')).collect();
        let get = |k: &str| params.iter().find(|(a, _)| *a == k).map(|(_, v)| *v);
        match get("as") {
            Some("Table") if get("g") == Some("meta.k8s.io") => {
                let v = get("v").unwrap_or("v1");
                if !(v == "v1beta1" || v == "v1" && v1_served) {
                    continue;
                }
                let include = match include_object {
                    Some("None") => IncludeObject::None,
                    Some("Object") => IncludeObject::Object,
                    _ => IncludeObject::Metadata,
                };
                return Some(TableRequest {
                    include,
                    api_version: format!("meta.k8s.io/{v}"),
                });
            }
            Some(_) => continue,
            None => return None,
        }
    }
    None
}

fn col(name: &str, format: &str, priority: u32, description: &str) -> Value {
    json!({"name": name, "type": "string", "format": format, "description": description, "priority": priority})
}

const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// kubernetes `pkg/printers/internalversion/printers.go`, `eventColumnDefinitions`.
fn event_columns() -> Vec<Value> {
    [
        ("Last Seen", 0, "The time at which the most recent occurrence of this event was recorded."),
        ("Type", 0, "Type of this event (Normal, Warning), new types could be added in the future"),
        ("Reason", 0, "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
        ("Object", 0, "The object that this event is about."),
        ("Subobject", 1, "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object."),
        ("Source", 1, "The component reporting this event. Should be a short machine understandable string."),
        ("Message", 0, "A human-readable description of the status of this operation."),
        ("First Seen", 1, "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
        ("Count", 1, "The number of times this event has occurred."),
        ("Name", 1, NAME_DOC),
    ]
    .iter()
    .map(|(n, p, d)| col(n, if *n == "Name" { "name" } else { "" }, *p, d))
    .collect()
}

/// `printEvent`, with every cell (the server generates the wide form; kubectl hides the
/// priority-1 columns).
fn event_cells(obj: &Value) -> Vec<Value> {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).unwrap_or("");
    let first = match since(obj, "/firstTimestamp") {
        Some(t) => t,
        None => since(obj, "/eventTime").unwrap_or_else(|| "<unknown>".into()),
    };
    let (last, count) = match obj.get("series").filter(|v| v.is_object()) {
        Some(series) => (
            since(series, "/lastObservedTime").unwrap_or_else(|| "<unknown>".into()),
            series["count"].as_i64().unwrap_or(0),
        ),
        None => (
            since(obj, "/lastTimestamp").unwrap_or_else(|| first.clone()),
            obj["count"].as_i64().filter(|c| *c != 0).unwrap_or(1),
        ),
    };
    let kind = s("/involvedObject/kind").to_lowercase();
    let target = match s("/involvedObject/name") {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let component = Some(s("/source/component"))
        .filter(|c| !c.is_empty())
        .unwrap_or(s("/reportingComponent"));
    let instance = Some(s("/source/host"))
        .filter(|c| !c.is_empty())
        .unwrap_or(s("/reportingInstance"));
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(s("/type")),
        json!(s("/reason")),
        json!(target),
        json!(s("/involvedObject/fieldPath")),
        json!(source),
        json!(s("/message").trim()),
        json!(first),
        json!(count),
        json!(s("/metadata/name")),
    ]
}

/// The time since the timestamp at `pointer`, as kubectl prints ages; `None` when unset.
fn since(obj: &Value, pointer: &str) -> Option<String> {
    let t = obj
        .pointer(pointer)
        .and_then(Value::as_str)
        .and_then(parse_time)?;
    Some(match SystemTime::now().duration_since(t) {
        Ok(d) => human_duration(d),
        Err(_) => "0s".into(),
    })
}

fn columns(res: &ResourceInfo) -> Vec<Value> {
    if res.is_events() {
        return event_columns();
    }
    if res.is_pods() {
        vec![
            col("Name", "name", 0, NAME_DOC),
            col(
                "Ready",
                "",
                0,
                "The aggregate readiness state of this pod for accepting traffic.",
            ),
            col(
                "Status",
                "",
                0,
                "The aggregate status of the containers in this pod.",
            ),
            col(
                "Restarts",
                "",
                0,
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
            ),
            col("Age", "", 0, AGE_DOC),
            col(
                "IP",
                "",
                1,
                "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
            ),
            col(
                "Node",
                "",
                1,
                "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName.",
            ),
            col(
                "Nominated Node",
                "",
                1,
                "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods.",
            ),
            col(
                "Readiness Gates",
                "",
                1,
                "If specified, all readiness gates will be evaluated for pod readiness.",
            ),
        ]
    } else {
        // kubernetes `pkg/printers/internalversion/printers.go` (`AddHandlers`), 1.33.4.
        let mut out = vec![col("Name", "name", 0, NAME_DOC)];
        let extra: &[(&str, u32, &str)] = match res.key.as_str() {
            "namespaces" => &[("Status", 0, "The status of the namespace")],
            "services" => &[
                ("Type", 0, "The type of service."),
                ("Cluster-IP", 0, "The IP address of the service."),
                (
                    "External-IP",
                    0,
                    "The list of external IP addresses for this service.",
                ),
                ("Port(s)", 0, "The ports exposed by the service."),
            ],
            "endpointslices.discovery.k8s.io" => &[
                ("AddressType", 0, "The IP protocol for this slice"),
                ("Ports", 0, "The ports of the endpoint slice"),
                ("Endpoints", 0, "The endpoints of the endpoint slice"),
            ],
            _ if res.is_webhook_configuration() => {
                &[("Webhooks", 0, "Webhooks indicates the number of webhooks.")]
            }
            _ => &[],
        };
        out.extend(extra.iter().map(|(n, p, d)| col(n, "", *p, d)));
        out.push(col("Age", "", 0, AGE_DOC));
        if res.key == "services" {
            out.push(col("Selector", "", 1, "The label selector of the service."));
        }
        out
    }
}

/// The cells between Name and Age (and after Age) of the kinds `columns` knows.
fn other_cells(res: &ResourceInfo, obj: &Value) -> (Vec<Value>, Vec<Value>) {
    let s = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let arr = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    match res.key.as_str() {
        "namespaces" => (vec![json!(s("/status/phase"))], vec![]),
        "services" => {
            let ty = s("/spec/type");
            let ports: Vec<String> = arr("/spec/ports")
                .iter()
                .map(|p| {
                    let port = p.get("port").map(|v| v.to_string()).unwrap_or_default();
                    let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(n) => format!("{port}:{n}/{proto}"),
                        None => format!("{port}/{proto}"),
                    }
                })
                .collect();
            let external = match ty.as_str() {
                "LoadBalancer" => "<pending>".to_string(),
                "ExternalName" => s("/spec/externalName"),
                _ => "<none>".to_string(),
            };
            let selector: Vec<String> = obj
                .pointer("/spec/selector")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect()
                })
                .unwrap_or_default();
            (
                vec![
                    json!(ty),
                    json!(str_or_none(obj.pointer("/spec/clusterIP"))),
                    json!(external),
                    json!(if ports.is_empty() {
                        "<none>".to_string()
                    } else {
                        ports.join(",")
                    }),
                ],
                vec![json!(if selector.is_empty() {
                    "<none>".to_string()
                } else {
                    selector.join(",")
                })],
            )
        }
        "endpointslices.discovery.k8s.io" => {
            let ports: Vec<String> = arr("/ports")
                .iter()
                .map(|p| {
                    p.get("port")
                        .map_or("<unset>".to_string(), |v| v.to_string())
                })
                .collect();
            let addrs: Vec<String> = arr("/endpoints")
                .iter()
                .flat_map(|e| {
                    e.get("addresses")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default()
                })
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            let endpoints = match addrs.len() {
                0 => "<unset>".to_string(),
                n if n > 3 => format!("{} + {} more...", addrs[..3].join(","), n - 3),
                _ => addrs.join(","),
            };
            (
                vec![
                    json!(s("/addressType")),
                    json!(if ports.is_empty() {
                        "<unset>".to_string()
                    } else {
                        ports.join(",")
                    }),
                    json!(endpoints),
                ],
                vec![],
            )
        }
        _ if res.is_webhook_configuration() => (vec![json!(arr("/webhooks").len())], vec![]),
        _ => (vec![], vec![]),
    }
}

/// kubectl's short human duration (k8s.io/apimachinery/pkg/util/duration.HumanDuration).
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    let (m, h, day, y) = (s / 60, s / 3600, s / 86400, s / (86400 * 365));
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        if s.is_multiple_of(60) {
            format!("{m}m")
        } else {
            format!("{m}m{}s", s % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if h < 192 {
        if h % 24 == 0 {
            format!("{day}d")
        } else {
            format!("{day}d{}h", h % 24)
        }
    } else if y < 2 {
        format!("{day}d")
    } else if y < 8 {
        format!("{y}y{}d", day % 365)
    } else {
        format!("{y}y")
    }
}

fn age(obj: &Value) -> String {
    let Some(t) = obj
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(parse_time)
    else {
        return "<unknown>".into();
    };
    match SystemTime::now().duration_since(t) {
        Ok(d) => human_duration(d),
        Err(_) => "0s".into(),
    }
}

fn str_or_none(v: Option<&Value>) -> String {
    match v.and_then(Value::as_str) {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "<none>".into(),
    }
}

/// The STATUS column of a pod, as kubectl prints it.
pub fn pod_status(pod: &Value) -> String {
    let mut reason = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if let Some(r) = pod.pointer("/status/reason").and_then(Value::as_str)
        && !r.is_empty()
    {
        reason = r.to_string();
    }
    if modern::is_gated(pod) {
        reason = modern::GATED_REASON.to_string();
    }
    if pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        reason = "Terminating".into();
    }
    reason
}

fn cells(res: &ResourceInfo, obj: &Value) -> Vec<Value> {
    if res.is_events() {
        return event_cells(obj);
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !res.is_pods() {
        let (middle, after) = other_cells(res, obj);
        let mut out = vec![json!(name)];
        out.extend(middle);
        out.push(json!(age(obj)));
        out.extend(after);
        return out;
    }
    let containers = obj
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let statuses = obj
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array);
    let ready = statuses.map_or(0, |s| {
        s.iter()
            .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
            .count()
    });
    let restarts: i64 = statuses.map_or(0, |s| {
        s.iter()
            .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
            .sum()
    });
    let gates = obj
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    vec![
        json!(name),
        json!(format!("{ready}/{containers}")),
        json!(pod_status(obj)),
        json!(restarts.to_string()),
        json!(age(obj)),
        json!(str_or_none(obj.pointer("/status/podIP"))),
        json!(str_or_none(obj.pointer("/spec/nodeName"))),
        json!(str_or_none(obj.pointer("/status/nominatedNodeName"))),
        json!(if gates == 0 {
            "<none>".to_string()
        } else {
            format!("0/{gates}")
        }),
    ]
}

fn row_object(obj: &Value, include: IncludeObject, api_version: &str) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Object => Some(obj.clone()),
        IncludeObject::Metadata => Some(json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": api_version,
            "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
        })),
    }
}

/// A Table of `objs`; `list_meta` is the list's metadata (resourceVersion, continue).
pub fn table_for(
    res: &ResourceInfo,
    objs: &[Value],
    req: &TableRequest,
    list_meta: Option<Value>,
) -> Value {
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(res, o)});
            if let Some(obj) = row_object(o, req.include, &req.api_version) {
                row["object"] = obj;
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": req.api_version,
        "metadata": list_meta.unwrap_or_else(|| json!({})),
        "columnDefinitions": columns(res),
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_and_durations() {
        let t = requested(
            Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"),
            None,
            true,
        )
        .unwrap();
        assert_eq!(t.include, IncludeObject::Metadata);
        assert_eq!(t.api_version, "meta.k8s.io/v1");
        let old = requested(
            Some("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"),
            None,
            false,
        )
        .unwrap();
        assert_eq!(old.api_version, "meta.k8s.io/v1beta1");
        assert!(requested(Some("application/json"), None, true).is_none());
        assert_eq!(human_duration(Duration::from_secs(5)), "5s");
        assert_eq!(human_duration(Duration::from_secs(185)), "3m5s");
        assert_eq!(human_duration(Duration::from_secs(3600 * 30)), "30h");
    }

    #[test]
    fn gated_pod_row() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
        let req = TableRequest {
            include: IncludeObject::Metadata,
            api_version: "meta.k8s.io/v1".into(),
        };
        let t = table_for(&ResourceInfo::new("pods"), &[pod], &req, None);
        assert_eq!(t["rows"][0]["cells"][2], "SchedulingGated");
        assert_eq!(t["rows"][0]["cells"][1], "0/1");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }
}
