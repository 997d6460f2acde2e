// OpenAPI documents for the resources the double serves, small but real: what kubectl 1.32
// and other clients need to validate, explain and apply as against a real server.
//
// - `/openapi/v2` (1.13.12 and 1.33.4 both serve it, `pkg/server/routes/openapi.go`): the
//   Swagger 2.0 document as JSON, or as the gnostic protobuf (`openapi_v2.Document`) that
//   client-go's `OpenAPISchema` asks for (`Accept:
//   application/com.github.proto-openapi.spec.v2@v1.0+protobuf`).
// - `/openapi/v3` (1.27+, modern only): the discovery document `{paths: {"api/v1":
//   {serverRelativeURL}}}` and one OpenAPI 3.0 document per group-version.
//
// kubectl decides how to validate from these: its `QueryParamVerifierV3` (then the v2
// `QueryParamVerifier`, `k8s.io/cli-runtime/pkg/resource/query_param_verifier*.go`) looks
// for the `fieldValidation` query parameter on the PATCH operation of the object's GVK
// (`x-kubernetes-group-version-kind`). 1.33.4 declares it, so kubectl sends
// `?fieldValidation=Strict` and the server checks unknown fields (`strict decoding error:
// unknown field "spec.x"`, a 400; `Warn`: a `Warning: 299 - "unknown field \"spec.x\""`
// header); 1.13.12 has no such parameter, so kubectl validates on the client against the
// v2 definitions (`unknown field "x" in io.k8s.api.core.v1.PodSpec`).
//
// The definitions describe the fields these resources have in each release (1.13: ObjectMeta
// `initializers`, no `schedulingGates`; 1.33: the reverse); sub-objects the double does not
// look into (volumes, probes, resources, affinity, status, ...) are free-form, so any content
// is accepted there.

use serde_json::{Map, Value, json};

use crate::config::Generation;
use crate::resources::{Registry, ResourceInfo};

const DEF: &str = "#/definitions/";

fn r(name: &str) -> Value {
    json!({"$ref": format!("{DEF}{name}")})
}

fn s(desc: &str) -> Value {
    json!({"description": desc, "type": "string"})
}

fn int(desc: &str) -> Value {
    json!({"description": desc, "type": "integer", "format": "int64"})
}

fn int32(desc: &str) -> Value {
    json!({"description": desc, "type": "integer", "format": "int32"})
}

fn boolean(desc: &str) -> Value {
    json!({"description": desc, "type": "boolean"})
}

fn time(desc: &str) -> Value {
    json!({"description": desc, "type": "string", "format": "date-time"})
}

fn strings(desc: &str) -> Value {
    json!({"description": desc, "type": "array", "items": {"type": "string"}})
}

fn string_map(desc: &str) -> Value {
    json!({"description": desc, "type": "object", "additionalProperties": {"type": "string"}})
}

fn array_of(desc: &str, name: &str) -> Value {
    json!({"description": desc, "type": "array", "items": r(name)})
}

fn list_map(desc: &str, name: &str, key: &str) -> Value {
    let mut v = array_of(desc, name);
    v["x-kubernetes-list-type"] = json!("map");
    v["x-kubernetes-list-map-keys"] = json!([key]);
    v["x-kubernetes-patch-merge-key"] = json!(key);
    v["x-kubernetes-patch-strategy"] = json!("merge");
    v
}

/// Any content (no properties: kube-openapi parses it as `Arbitrary`).
fn free(desc: &str) -> Value {
    json!({"description": desc, "x-kubernetes-preserve-unknown-fields": true})
}

fn free_array(desc: &str) -> Value {
    json!({"description": desc, "type": "array", "items": free("")})
}

fn kind(desc: &str, props: Vec<(&str, Value)>) -> Value {
    let mut p = Map::new();
    for (k, v) in props {
        p.insert(k.to_string(), v);
    }
    json!({"description": desc, "type": "object", "properties": p})
}

fn gvk(res: &ResourceInfo) -> Value {
    json!({"group": res.group, "version": res.version, "kind": res.kind})
}

/// The definition name of a served resource, as the real documents name it.
pub fn definition_name(res: &ResourceInfo) -> String {
    let package = match res.group.as_str() {
        "" => "core".to_string(),
        "events.k8s.io" => "events".to_string(),
        g => g.split('.').next().unwrap_or(g).to_string(),
    };
    format!("io.k8s.api.{package}.{}.{}", res.version, res.kind)
}

fn top(res: &ResourceInfo, desc: &str, spec: Option<&str>, status: bool) -> Value {
    let mut props = vec![
        (
            "apiVersion",
            s("APIVersion defines the versioned schema of this representation of an object."),
        ),
        (
            "kind",
            s("Kind is a string value representing the REST resource this object represents."),
        ),
        (
            "metadata",
            r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
        ),
    ];
    if let Some(spec) = spec {
        props.push(("spec", r(spec)));
    }
    if status {
        props.push(("status", free("Most recently observed status. Read-only.")));
    }
    let mut v = kind(desc, props);
    v["x-kubernetes-group-version-kind"] = json!([gvk(res)]);
    v
}

/// Every definition, with `#/definitions/` references.
pub fn definitions(generation: Generation, reg: &Registry) -> Map<String, Value> {
    let modern = generation == Generation::Modern;
    let mut d = Map::new();
    let mut meta = vec![
        ("name", s("Name must be unique within a namespace.")),
        (
            "generateName",
            s(
                "GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided.",
            ),
        ),
        (
            "namespace",
            s("Namespace defines the space within which each name must be unique."),
        ),
        (
            "selfLink",
            s(
                "Deprecated: selfLink is a legacy read-only field that is no longer populated by the system.",
            ),
        ),
        (
            "uid",
            s("UID is the unique in time and space value for this object."),
        ),
        (
            "resourceVersion",
            s("An opaque value that represents the internal version of this object."),
        ),
        (
            "generation",
            int("A sequence number representing a specific generation of the desired state."),
        ),
        (
            "creationTimestamp",
            time(
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
            ),
        ),
        (
            "deletionTimestamp",
            time(
                "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted.",
            ),
        ),
        (
            "deletionGracePeriodSeconds",
            int(
                "Number of seconds allowed for this object to gracefully terminate before it will be removed from the system.",
            ),
        ),
        (
            "labels",
            string_map(
                "Map of string keys and values that can be used to organize and categorize (scope and select) objects.",
            ),
        ),
        (
            "annotations",
            string_map("Annotations is an unstructured key value map stored with a resource."),
        ),
        (
            "ownerReferences",
            array_of(
                "List of objects depended by this object.",
                "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference",
            ),
        ),
        (
            "finalizers",
            strings("Must be empty before the object is deleted from the registry."),
        ),
        (
            "managedFields",
            free_array(
                "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow.",
            ),
        ),
    ];
    if !modern {
        meta.retain(|(k, _)| *k != "managedFields");
        meta.push((
            "clusterName",
            s("The name of the cluster which the object belongs to."),
        ));
        meta.push((
            "initializers",
            r("io.k8s.apimachinery.pkg.apis.meta.v1.Initializers"),
        ));
    }
    d.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into(),
        kind("ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.", meta),
    );
    d.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference".into(),
        kind(
            "OwnerReference contains enough information to let you identify an owning object.",
            vec![
                ("apiVersion", s("API version of the referent.")),
                ("kind", s("Kind of the referent.")),
                ("name", s("Name of the referent.")),
                ("uid", s("UID of the referent.")),
                ("controller", boolean("If true, this reference points to the managing controller.")),
                ("blockOwnerDeletion", boolean("If true, AND if the owner has the \"foregroundDeletion\" finalizer, then the owner cannot be deleted from the key-value store until this reference is removed.")),
            ],
        ),
    );
    d.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
        free("Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."),
    );
    d.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status".into(),
        free("Status is a return value for calls that don't return other objects."),
    );
    if !modern {
        d.insert(
            "io.k8s.apimachinery.pkg.apis.meta.v1.Initializers".into(),
            kind(
                "Initializers tracks the progress of initialization.",
                vec![
                    ("pending", list_map("Pending is a list of initializers that must execute in order before this object is visible.", "io.k8s.apimachinery.pkg.apis.meta.v1.Initializer", "name")),
                    ("result", r("io.k8s.apimachinery.pkg.apis.meta.v1.Status")),
                ],
            ),
        );
        d.insert(
            "io.k8s.apimachinery.pkg.apis.meta.v1.Initializer".into(),
            kind(
                "Initializer is information about an initializer that has not yet completed.",
                vec![(
                    "name",
                    s("name of the process that is responsible for initializing this object."),
                )],
            ),
        );
    }
    let mut container = vec![
        ("name", s("Name of the container specified as a DNS_LABEL.")),
        ("image", s("Container image name.")),
        ("command", strings("Entrypoint array.")),
        ("args", strings("Arguments to the entrypoint.")),
        ("workingDir", s("Container's working directory.")),
        (
            "ports",
            free_array("List of ports to expose from the container."),
        ),
        (
            "env",
            free_array("List of environment variables to set in the container."),
        ),
        (
            "envFrom",
            free_array("List of sources to populate environment variables in the container."),
        ),
        (
            "resources",
            free("Compute Resources required by this container."),
        ),
        (
            "volumeMounts",
            free_array("Pod volumes to mount into the container's filesystem."),
        ),
        (
            "volumeDevices",
            free_array("volumeDevices is the list of block devices to be used by the container."),
        ),
        (
            "livenessProbe",
            free("Periodic probe of container liveness."),
        ),
        (
            "readinessProbe",
            free("Periodic probe of container service readiness."),
        ),
        (
            "lifecycle",
            free(
                "Actions that the management system should take in response to container lifecycle events.",
            ),
        ),
        (
            "terminationMessagePath",
            s(
                "Path at which the file to which the container's termination message will be written is mounted.",
            ),
        ),
        (
            "terminationMessagePolicy",
            s("Indicate how the termination message should be populated."),
        ),
        (
            "imagePullPolicy",
            s("Image pull policy. One of Always, Never, IfNotPresent."),
        ),
        (
            "securityContext",
            free("SecurityContext defines the security options the container should be run with."),
        ),
        (
            "stdin",
            boolean(
                "Whether this container should allocate a buffer for stdin in the container runtime.",
            ),
        ),
        (
            "stdinOnce",
            boolean(
                "Whether the container runtime should close the stdin channel after it has been opened by a single attach.",
            ),
        ),
        (
            "tty",
            boolean("Whether this container should allocate a TTY for itself."),
        ),
    ];
    if modern {
        container.push((
            "startupProbe",
            free("StartupProbe indicates that the Pod has successfully initialized."),
        ));
        container.push((
            "resizePolicy",
            free_array("Resources resize policy for the container."),
        ));
        container.push((
            "restartPolicy",
            s("RestartPolicy defines the restart behavior of individual containers in a pod."),
        ));
    }
    d.insert(
        "io.k8s.api.core.v1.Container".into(),
        kind(
            "A single application container that you want to run within a pod.",
            container,
        ),
    );
    let mut spec = vec![
        (
            "volumes",
            free_array("List of volumes that can be mounted by containers belonging to the pod."),
        ),
        (
            "initContainers",
            list_map(
                "List of initialization containers belonging to the pod.",
                "io.k8s.api.core.v1.Container",
                "name",
            ),
        ),
        (
            "containers",
            list_map(
                "List of containers belonging to the pod.",
                "io.k8s.api.core.v1.Container",
                "name",
            ),
        ),
        (
            "restartPolicy",
            s("Restart policy for all containers within the pod. One of Always, OnFailure, Never."),
        ),
        (
            "terminationGracePeriodSeconds",
            int("Optional duration in seconds the pod needs to terminate gracefully."),
        ),
        (
            "activeDeadlineSeconds",
            int(
                "Optional duration in seconds the pod may be active on the node relative to StartTime before the system will actively try to mark it failed and kill associated containers.",
            ),
        ),
        ("dnsPolicy", s("Set DNS policy for the pod.")),
        (
            "nodeSelector",
            string_map(
                "NodeSelector is a selector which must be true for the pod to fit on a node.",
            ),
        ),
        (
            "serviceAccountName",
            s("ServiceAccountName is the name of the ServiceAccount to use to run this pod."),
        ),
        (
            "serviceAccount",
            s("DeprecatedServiceAccount is a deprecated alias for ServiceAccountName."),
        ),
        (
            "automountServiceAccountToken",
            boolean(
                "AutomountServiceAccountToken indicates whether a service account token should be automatically mounted.",
            ),
        ),
        (
            "nodeName",
            s("NodeName indicates in which node this pod is scheduled."),
        ),
        (
            "hostNetwork",
            boolean("Host networking requested for this pod."),
        ),
        ("hostPID", boolean("Use the host's pid namespace.")),
        ("hostIPC", boolean("Use the host's ipc namespace.")),
        (
            "shareProcessNamespace",
            boolean("Share a single process namespace between all of the containers in a pod."),
        ),
        (
            "securityContext",
            free(
                "SecurityContext holds pod-level security attributes and common container settings.",
            ),
        ),
        (
            "imagePullSecrets",
            free_array(
                "ImagePullSecrets is an optional list of references to secrets in the same namespace to use for pulling any of the images used by this PodSpec.",
            ),
        ),
        ("hostname", s("Specifies the hostname of the Pod.")),
        (
            "subdomain",
            s(
                "If specified, the fully qualified Pod hostname will be \"<hostname>.<subdomain>.<pod namespace>.svc.<cluster domain>\".",
            ),
        ),
        (
            "affinity",
            free("If specified, the pod's scheduling constraints."),
        ),
        (
            "schedulerName",
            s("If specified, the pod will be dispatched by specified scheduler."),
        ),
        (
            "tolerations",
            free_array("If specified, the pod's tolerations."),
        ),
        (
            "hostAliases",
            free_array(
                "HostAliases is an optional list of hosts and IPs that will be injected into the pod's hosts file.",
            ),
        ),
        (
            "priorityClassName",
            s("If specified, indicates the pod's priority."),
        ),
        ("priority", int32("The priority value.")),
        ("dnsConfig", free("Specifies the DNS parameters of a pod.")),
        (
            "readinessGates",
            free_array("If specified, all readiness gates will be evaluated for pod readiness."),
        ),
        (
            "runtimeClassName",
            s("RuntimeClassName refers to a RuntimeClass object in the node.k8s.io group."),
        ),
        (
            "enableServiceLinks",
            boolean(
                "EnableServiceLinks indicates whether information about services should be injected into pod's environment variables.",
            ),
        ),
    ];
    if modern {
        spec.extend([
            ("ephemeralContainers", free_array("List of ephemeral containers run in this pod.")),
            ("preemptionPolicy", s("PreemptionPolicy is the Policy for preempting pods with lower priority.")),
            ("overhead", free("Overhead represents the resource overhead associated with running a pod for a given RuntimeClass.")),
            ("topologySpreadConstraints", free_array("TopologySpreadConstraints describes how a group of pods ought to spread across topology domains.")),
            ("setHostnameAsFQDN", boolean("If true the pod's hostname will be configured as the pod's FQDN.")),
            ("os", free("Specifies the OS of the containers in the pod.")),
            ("hostUsers", boolean("Use the host's user namespace.")),
            ("schedulingGates", list_map("SchedulingGates is an opaque list of values that if specified will block scheduling the pod. If schedulingGates is not empty, the pod will stay in the SchedulingGated state and the scheduler will not attempt to schedule the pod.\n\nSchedulingGates can only be set at pod creation time, and be removed only afterwards.", "io.k8s.api.core.v1.PodSchedulingGate", "name")),
            ("resourceClaims", free_array("ResourceClaims defines which ResourceClaims must be allocated and reserved before the Pod is allowed to start.")),
            ("resources", free("Resources is the total amount of CPU and Memory resources required by all containers in the pod.")),
        ]);
        d.insert(
            "io.k8s.api.core.v1.PodSchedulingGate".into(),
            kind(
                "PodSchedulingGate is associated to a Pod to guard its scheduling.",
                vec![("name", s("Name of the scheduling gate. Each scheduling gate must have a unique name field."))],
            ),
        );
    }
    let mut pod_spec = kind("PodSpec is a description of a pod.", spec);
    pod_spec["required"] = json!(["containers"]);
    d.insert("io.k8s.api.core.v1.PodSpec".into(), pod_spec);
    d.insert(
        "io.k8s.api.core.v1.PodTemplateSpec".into(),
        kind(
            "PodTemplateSpec describes the data a pod should have when created from a template",
            vec![
                (
                    "metadata",
                    r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                ),
                ("spec", r("io.k8s.api.core.v1.PodSpec")),
            ],
        ),
    );
    d.insert(
        "io.k8s.api.apps.v1.DeploymentSpec".into(),
        kind(
            "DeploymentSpec is the specification of the desired behavior of the Deployment.",
            vec![
                ("replicas", int32("Number of desired pods.")),
                ("selector", free("Label selector for pods.")),
                ("template", r("io.k8s.api.core.v1.PodTemplateSpec")),
                ("strategy", free("The deployment strategy to use to replace existing pods with new ones.")),
                ("minReadySeconds", int32("Minimum number of seconds for which a newly created pod should be ready without any of its container crashing, for it to be considered available.")),
                ("revisionHistoryLimit", int32("The number of old ReplicaSets to retain to allow rollback.")),
                ("paused", boolean("Indicates that the deployment is paused.")),
                ("progressDeadlineSeconds", int32("The maximum time in seconds for a deployment to make progress before it is considered to be failed.")),
            ],
        ),
    );
    for res in &reg.resources {
        let name = definition_name(res);
        let v = if res.is_pods() {
            top(
                res,
                "Pod is a collection of containers that can run on a host.",
                Some("io.k8s.api.core.v1.PodSpec"),
                true,
            )
        } else if res.is_deployments() {
            top(
                res,
                "Deployment enables declarative updates for Pods and ReplicaSets.",
                Some("io.k8s.api.apps.v1.DeploymentSpec"),
                true,
            )
        } else if res.key == "events" {
            let mut v = top(
                res,
                "Event is a report of an event somewhere in the cluster.",
                None,
                false,
            );
            let p = v["properties"].as_object_mut().expect("properties");
            for (k, f) in [
                (
                    "involvedObject",
                    free("The object that this event is about."),
                ),
                (
                    "reason",
                    s(
                        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
                    ),
                ),
                (
                    "message",
                    s("A human-readable description of the status of this operation."),
                ),
                ("source", free("The component reporting this event.")),
                (
                    "firstTimestamp",
                    time("The time at which the event was first recorded."),
                ),
                (
                    "lastTimestamp",
                    time(
                        "The time at which the most recent occurrence of this event was recorded.",
                    ),
                ),
                (
                    "count",
                    int32("The number of times this event has occurred."),
                ),
                (
                    "type",
                    s(
                        "Type of this event (Normal, Warning), new types could be added in the future",
                    ),
                ),
                (
                    "eventTime",
                    free("Time when this Event was first observed."),
                ),
                (
                    "series",
                    free(
                        "Data about the Event series this event represents or nil if it's a singleton Event.",
                    ),
                ),
                (
                    "action",
                    s("What action was taken/failed regarding to the Regarding object."),
                ),
                (
                    "related",
                    free("Optional secondary object for more complex actions."),
                ),
                (
                    "reportingComponent",
                    s("Name of the controller that emitted this Event."),
                ),
                ("reportingInstance", s("ID of the controller instance.")),
            ] {
                p.insert(k.into(), f);
            }
            v
        } else if res.key == "events.events.k8s.io" {
            let mut v = top(
                res,
                "Event is a report of an event somewhere in the cluster.",
                None,
                false,
            );
            let p = v["properties"].as_object_mut().expect("properties");
            for (k, f) in [
                (
                    "eventTime",
                    free("eventTime is the time when this Event was first observed."),
                ),
                (
                    "series",
                    free(
                        "series is data about the Event series this event represents or nil if it's a singleton Event.",
                    ),
                ),
                (
                    "reportingController",
                    s("reportingController is the name of the controller that emitted this Event."),
                ),
                (
                    "reportingInstance",
                    s("reportingInstance is the ID of the controller instance."),
                ),
                (
                    "action",
                    s("action is what action was taken/failed regarding to the regarding object."),
                ),
                ("reason", s("reason is why the action was taken.")),
                (
                    "regarding",
                    free("regarding contains the object this Event is about."),
                ),
                (
                    "related",
                    free("related is the optional secondary object for more complex actions."),
                ),
                (
                    "note",
                    s("note is a human-readable description of the status of this operation."),
                ),
                (
                    "type",
                    s(
                        "type is the type of this event (Normal, Warning), new types could be added in the future.",
                    ),
                ),
                (
                    "deprecatedSource",
                    free(
                        "deprecatedSource is the deprecated field assuring backward compatibility with core.v1 Event type.",
                    ),
                ),
                (
                    "deprecatedFirstTimestamp",
                    time(
                        "deprecatedFirstTimestamp is the deprecated field assuring backward compatibility with core.v1 Event type.",
                    ),
                ),
                (
                    "deprecatedLastTimestamp",
                    time(
                        "deprecatedLastTimestamp is the deprecated field assuring backward compatibility with core.v1 Event type.",
                    ),
                ),
                (
                    "deprecatedCount",
                    int32(
                        "deprecatedCount is the deprecated field assuring backward compatibility with core.v1 Event type.",
                    ),
                ),
            ] {
                p.insert(k.into(), f);
            }
            v
        } else {
            // Extra resources: any content (the double does not model their fields).
            let mut v = free(&format!(
                "{} (fields not modelled by the double).",
                res.kind
            ));
            v["x-kubernetes-group-version-kind"] = json!([gvk(res)]);
            v
        };
        d.insert(name, v);
    }
    d
}

/// Paths of one resource, Swagger 2.0 style; `field_validation`: declare the parameter.
fn paths_v2(res: &ResourceInfo, field_validation: bool, out: &mut Map<String, Value>) {
    let prefix = if res.group.is_empty() {
        format!("/api/{}", res.version)
    } else {
        format!("/apis/{}/{}", res.group, res.version)
    };
    let def = definition_name(res);
    let kind = &res.kind;
    let ns = json!({"name": "namespace", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": "object name and auth scope, such as for teams and projects"});
    let name = json!({"name": "name", "in": "path", "required": true, "type": "string", "uniqueItems": true, "description": format!("name of the {kind}")});
    let query = |n: &str, d: &str| json!({"name": n, "in": "query", "type": "string", "uniqueItems": true, "description": d});
    let body =
        |schema: Value| json!({"name": "body", "in": "body", "required": true, "schema": schema});
    let write_params = |b: Value| {
        let mut p = vec![
            b,
            query(
                "dryRun",
                "When present, indicates that modifications should not be persisted.",
            ),
            query(
                "fieldManager",
                "fieldManager is a name associated with the actor or entity that is making these changes.",
            ),
        ];
        if field_validation {
            p.push(query("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict"));
        }
        Value::Array(p)
    };
    let op = |action: &str, id: &str, params: Value, schema: Value| {
        json!({
            "description": format!("{action} {kind}"),
            "operationId": format!("{id}{kind}"),
            "consumes": ["*/*"],
            "produces": ["application/json"],
            "schemes": ["https"],
            "parameters": params,
            "responses": {"200": {"description": "OK", "schema": schema}, "401": {"description": "Unauthorized"}},
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk(res),
        })
    };
    let plural = &res.plural;
    // Cluster-scoped resources live at `PLURAL[/{name}]` with operation ids without
    // `Namespaced` (`createNamespace`, `listAdmissionregistrationV1…`), as the real
    // documents have them.
    let (base, scoped, path_params) = if res.namespaced {
        (
            format!("{prefix}/namespaces/{{namespace}}/{plural}"),
            "Namespaced",
            vec![ns.clone()],
        )
    } else {
        (format!("{prefix}/{plural}"), "", Vec::new())
    };
    out.insert(
        base.clone(),
        json!({
            "get": op("list", &format!("list{scoped}"), json!([])
                , json!({"description": format!("{kind} list"), "type": "object"})),
            "post": op("post", &format!("create{scoped}"), write_params(body(r(&def))), r(&def)),
            "parameters": path_params,
        }),
    );
    let mut patch = op(
        "patch",
        &format!("patch{scoped}"),
        write_params(body(r("io.k8s.apimachinery.pkg.apis.meta.v1.Patch"))),
        r(&def),
    );
    patch["consumes"] = json!([
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json"
    ]);
    let mut object_params = vec![name];
    object_params.extend(path_params);
    out.insert(
        format!("{base}/{{name}}"),
        json!({
            "get": op("get", &format!("read{scoped}"), json!([]), r(&def)),
            "put": op("put", &format!("replace{scoped}"), write_params(body(r(&def))), r(&def)),
            "patch": patch,
            "delete": op("delete", &format!("delete{scoped}"), json!([]), r("io.k8s.apimachinery.pkg.apis.meta.v1.Status")),
            "parameters": object_params,
        }),
    );
}

/// The Swagger 2.0 document.
pub fn v2(generation: Generation, reg: &Registry) -> Value {
    let mut paths = Map::new();
    for res in &reg.resources {
        paths_v2(res, generation == Generation::Modern, &mut paths);
    }
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::version(generation)["gitVersion"]},
        "paths": paths,
        "definitions": definitions(generation, reg),
    })
}

/// `api/v1` or `apis/GROUP/VERSION`: the keys of `/openapi/v3`.
fn gv_path(group: &str) -> String {
    if group.is_empty() {
        "api/v1".to_string()
    } else {
        format!("apis/{group}/v1")
    }
}

fn groups(reg: &Registry) -> Vec<String> {
    let mut out = vec![String::new()];
    out.extend(reg.groups());
    out
}

/// `/openapi/v3`: where each group-version's document is.
pub fn v3_root(generation: Generation, reg: &Registry) -> Value {
    let mut paths = Map::new();
    for g in groups(reg) {
        let doc = v3(generation, reg, &g).unwrap_or(Value::Null);
        let hash = fnv(&serde_json::to_vec(&doc).unwrap_or_default());
        let p = gv_path(&g);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash:016X}")}),
        );
    }
    json!({"paths": paths})
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The OpenAPI 3.0 document of one group-version (`group` empty: core), from `path` as
/// `/openapi/v3/api/v1` or `/openapi/v3/apis/apps/v1` has it.
pub fn v3_for_path(generation: Generation, reg: &Registry, path: &str) -> Option<Value> {
    let g = match path.split('/').collect::<Vec<_>>().as_slice() {
        ["api", "v1"] => String::new(),
        ["apis", g, "v1"] => (*g).to_string(),
        _ => return None,
    };
    v3(generation, reg, &g)
}

fn v3(generation: Generation, reg: &Registry, group: &str) -> Option<Value> {
    let in_group = reg.in_group(group);
    if in_group.is_empty() {
        return None;
    }
    let mut paths2 = Map::new();
    for res in &in_group {
        paths_v2(res, generation == Generation::Modern, &mut paths2);
    }
    // Swagger 2.0 operations to OpenAPI 3.0: body parameters become requestBody, the
    // others get a `schema`, responses get `content`.
    let mut paths = Map::new();
    for (p, item) in paths2 {
        let mut out = Map::new();
        for (verb, op) in item.as_object().into_iter().flatten() {
            if verb == "parameters" {
                out.insert(
                    verb.clone(),
                    Value::Array(op.as_array().into_iter().flatten().map(param_v3).collect()),
                );
                continue;
            }
            let mut o = op.clone();
            let params = o["parameters"].as_array().cloned().unwrap_or_default();
            let (body, rest): (Vec<Value>, Vec<Value>) =
                params.into_iter().partition(|p| p["in"] == "body");
            o["parameters"] = Value::Array(rest.iter().map(param_v3).collect());
            if let Some(b) = body.first() {
                let types = o["consumes"].as_array().cloned().unwrap_or_default();
                let mut content = Map::new();
                for t in types {
                    let t = if t == "*/*" {
                        json!("application/json")
                    } else {
                        t
                    };
                    content.insert(
                        t.as_str().unwrap_or("").into(),
                        json!({"schema": b["schema"]}),
                    );
                }
                o["requestBody"] = json!({"content": content, "required": true});
            }
            let ok = o["responses"]["200"]["schema"].clone();
            o["responses"] = json!({
                "200": {"description": "OK", "content": {"application/json": {"schema": ok}}},
                "401": {"description": "Unauthorized"},
            });
            if let Some(m) = o.as_object_mut() {
                m.remove("consumes");
                m.remove("produces");
                m.remove("schemes");
            }
            out.insert(verb.clone(), o);
        }
        paths.insert(p, Value::Object(out));
    }
    let defs = definitions(generation, reg);
    let text = serde_json::to_string(&json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": crate::discovery::version(generation)["gitVersion"]},
        "paths": paths,
        "components": {"schemas": defs},
    }))
    .ok()?;
    serde_json::from_str(&text.replace(DEF, "#/components/schemas/")).ok()
}

fn param_v3(p: &Value) -> Value {
    let mut o = p.clone();
    if let Some(m) = o.as_object_mut() {
        let ty = m.remove("type").unwrap_or(json!("string"));
        let unique = m.remove("uniqueItems").unwrap_or(json!(true));
        m.insert("schema".into(), json!({"type": ty, "uniqueItems": unique}));
    }
    o
}

/// Fields of `obj` the schema of `res` does not have, as field paths (`spec.foo`,
/// `spec.containers[0].imag`), the way the server's strict decoder names them.
pub fn unknown_fields(
    generation: Generation,
    reg: &Registry,
    res: &ResourceInfo,
    obj: &Value,
) -> Vec<String> {
    let defs = definitions(generation, reg);
    let mut out = Vec::new();
    if let Some(root) = defs.get(&definition_name(res)) {
        walk(&defs, root, obj, "", &mut out);
    }
    out
}

fn resolve<'a>(defs: &'a Map<String, Value>, schema: &'a Value) -> &'a Value {
    match schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix(DEF))
    {
        Some(name) => defs.get(name).unwrap_or(schema),
        None => schema,
    }
}

fn walk(
    defs: &Map<String, Value>,
    schema: &Value,
    value: &Value,
    path: &str,
    out: &mut Vec<String>,
) {
    let schema = resolve(defs, schema);
    match value {
        Value::Object(m) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                if let Some(ap) = schema.get("additionalProperties") {
                    for (k, v) in m {
                        walk(defs, ap, v, &join(path, k), out);
                    }
                }
                return;
            };
            for (k, v) in m {
                match props.get(k) {
                    Some(sub) => walk(defs, sub, v, &join(path, k), out),
                    None => out.push(join(path, k)),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    walk(defs, item, v, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

// ----------------------------------------------------------------- gnostic protobuf

/// The v2 document as the gnostic `openapi_v2.Document` protobuf (field numbers from
/// google/gnostic `openapiv2/OpenAPIv2.proto`).
pub fn v2_protobuf(doc: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, 1, doc["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Vec::new();
    put_str(&mut info, 1, doc["info"]["title"].as_str().unwrap_or(""));
    put_str(&mut info, 2, doc["info"]["version"].as_str().unwrap_or(""));
    put_msg(&mut out, 2, &info);
    let mut paths = Vec::new();
    for (p, item) in doc["paths"].as_object().into_iter().flatten() {
        let mut named = Vec::new();
        put_str(&mut named, 1, p);
        put_msg(&mut named, 2, &path_item(item));
        put_msg(&mut paths, 2, &named);
    }
    put_msg(&mut out, 8, &paths);
    let mut defs = Vec::new();
    for (name, schema) in doc["definitions"].as_object().into_iter().flatten() {
        put_msg(&mut defs, 1, &named_schema(name, schema));
    }
    put_msg(&mut out, 9, &defs);
    out
}

fn path_item(item: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for (verb, field) in [
        ("get", 2),
        ("put", 3),
        ("post", 4),
        ("delete", 5),
        ("patch", 8),
    ] {
        if let Some(op) = item.get(verb) {
            put_msg(&mut out, field, &operation(op));
        }
    }
    for p in item["parameters"].as_array().into_iter().flatten() {
        put_msg(&mut out, 9, &parameters_item(p));
    }
    out
}

fn operation(op: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, 3, op["description"].as_str().unwrap_or(""));
    put_str(&mut out, 5, op["operationId"].as_str().unwrap_or(""));
    for t in op["produces"].as_array().into_iter().flatten() {
        put_str(&mut out, 6, t.as_str().unwrap_or(""));
    }
    for t in op["consumes"].as_array().into_iter().flatten() {
        put_str(&mut out, 7, t.as_str().unwrap_or(""));
    }
    for p in op["parameters"].as_array().into_iter().flatten() {
        put_msg(&mut out, 8, &parameters_item(p));
    }
    let mut responses = Vec::new();
    for (code, resp) in op["responses"].as_object().into_iter().flatten() {
        let mut r = Vec::new();
        put_str(&mut r, 1, resp["description"].as_str().unwrap_or(""));
        if let Some(s) = resp.get("schema") {
            let mut item = Vec::new();
            put_msg(&mut item, 1, &schema_msg(s));
            put_msg(&mut r, 2, &item);
        }
        let mut value = Vec::new();
        put_msg(&mut value, 1, &r);
        let mut named = Vec::new();
        put_str(&mut named, 1, code);
        put_msg(&mut named, 2, &value);
        put_msg(&mut responses, 1, &named);
    }
    put_msg(&mut out, 9, &responses);
    for s in op["schemes"].as_array().into_iter().flatten() {
        put_str(&mut out, 10, s.as_str().unwrap_or(""));
    }
    extensions(&mut out, 13, op);
    out
}

fn parameters_item(p: &Value) -> Vec<u8> {
    let mut param = Vec::new();
    if p["in"] == "body" {
        let mut b = Vec::new();
        put_str(&mut b, 2, p["name"].as_str().unwrap_or(""));
        put_str(&mut b, 3, "body");
        put_bool(&mut b, 4, p["required"].as_bool().unwrap_or(false));
        put_msg(&mut b, 5, &schema_msg(&p["schema"]));
        put_msg(&mut param, 1, &b);
    } else {
        // Query (3) and path (4) sub-schemas share the first fields; `type` is 6 for a
        // query parameter and 5 for a path parameter, `uniqueItems` 20 and 19.
        let (which, ty, unique) = if p["in"] == "path" {
            (4, 5, 19)
        } else {
            (3, 6, 20)
        };
        let mut q = Vec::new();
        put_bool(&mut q, 1, p["required"].as_bool().unwrap_or(false));
        put_str(&mut q, 2, p["in"].as_str().unwrap_or(""));
        put_str(&mut q, 3, p["description"].as_str().unwrap_or(""));
        put_str(&mut q, 4, p["name"].as_str().unwrap_or(""));
        put_str(&mut q, ty, p["type"].as_str().unwrap_or("string"));
        put_bool(&mut q, unique, p["uniqueItems"].as_bool().unwrap_or(false));
        let mut nb = Vec::new();
        put_msg(&mut nb, which, &q);
        put_msg(&mut param, 2, &nb);
    }
    let mut item = Vec::new();
    put_msg(&mut item, 1, &param);
    item
}

fn named_schema(name: &str, schema: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, 1, name);
    put_msg(&mut out, 2, &schema_msg(schema));
    out
}

fn schema_msg(s: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, 1, s["$ref"].as_str().unwrap_or(""));
    put_str(&mut out, 2, s["format"].as_str().unwrap_or(""));
    put_str(&mut out, 4, s["description"].as_str().unwrap_or(""));
    for r in s["required"].as_array().into_iter().flatten() {
        put_str(&mut out, 19, r.as_str().unwrap_or(""));
    }
    if let Some(ap) = s.get("additionalProperties") {
        let mut item = Vec::new();
        put_msg(&mut item, 1, &schema_msg(ap));
        put_msg(&mut out, 21, &item);
    }
    if let Some(t) = s["type"].as_str() {
        let mut ty = Vec::new();
        put_str(&mut ty, 1, t);
        put_msg(&mut out, 22, &ty);
    }
    if let Some(items) = s.get("items") {
        let mut it = Vec::new();
        put_msg(&mut it, 1, &schema_msg(items));
        put_msg(&mut out, 23, &it);
    }
    if let Some(props) = s["properties"].as_object() {
        let mut p = Vec::new();
        for (k, v) in props {
            put_msg(&mut p, 1, &named_schema(k, v));
        }
        put_msg(&mut out, 25, &p);
    }
    extensions(&mut out, 31, s);
    out
}

/// `x-…` keys as `NamedAny {name, value: Any {yaml}}` (JSON is YAML).
fn extensions(out: &mut Vec<u8>, field: u32, v: &Value) {
    for (k, x) in v.as_object().into_iter().flatten() {
        if !k.starts_with("x-") {
            continue;
        }
        let mut any = Vec::new();
        put_str(&mut any, 2, &serde_json::to_string(x).unwrap_or_default());
        let mut named = Vec::new();
        put_str(&mut named, 1, k);
        put_msg(&mut named, 2, &any);
        put_msg(out, field, &named);
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    put_varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn put_str(out: &mut Vec<u8>, field: u32, s: &str) {
    if s.is_empty() {
        return;
    }
    put_tag(out, field, 2);
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_msg(out: &mut Vec<u8>, field: u32, m: &[u8]) {
    put_tag(out, field, 2);
    put_varint(out, m.len() as u64);
    out.extend_from_slice(m);
}

fn put_bool(out: &mut Vec<u8>, field: u32, b: bool) {
    if b {
        put_tag(out, field, 0);
        out.push(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn unknown_fields_are_named_by_path() {
        let reg = Registry::from_config(&Config::modern());
        let pods = reg.by_key("pods").unwrap().clone();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": {"x": "y"}, "bogus": 1},
            "spec": {"containers": [{"name": "c", "imag": "x"}], "schedulingGates": [{"name": "g"}], "volumes": [{"any": {}}]},
            "status": {"whatever": true}});
        assert_eq!(
            unknown_fields(Generation::Modern, &reg, &pods, &pod),
            ["metadata.bogus", "spec.containers[0].imag"]
        );
        // 1.13 has no scheduling gates, 1.33 no initializers.
        let legacy = Registry::from_config(&Config::legacy());
        assert_eq!(
            unknown_fields(Generation::Legacy, &legacy, &pods, &pod),
            [
                "metadata.bogus",
                "spec.containers[0].imag",
                "spec.schedulingGates"
            ]
        );
        let init = json!({"metadata": {"initializers": {"pending": [{"name": "a"}]}}});
        assert_eq!(
            unknown_fields(Generation::Legacy, &legacy, &pods, &init),
            Vec::<String>::new()
        );
        assert_eq!(
            unknown_fields(Generation::Modern, &reg, &pods, &init),
            ["metadata.initializers"]
        );
    }

    #[test]
    fn every_reference_resolves() {
        for g in [Generation::Legacy, Generation::Modern] {
            let reg = Registry::from_config(&Config::modern());
            let doc = serde_json::to_string(&v2(g, &reg)).unwrap();
            let defs = definitions(g, &reg);
            for part in doc.split("\"$ref\":\"").skip(1) {
                let target = part.split('"').next().unwrap();
                let name = target.strip_prefix(DEF).unwrap();
                assert!(defs.contains_key(name), "{g}: {target}");
            }
            assert!(!v2_protobuf(&v2(g, &reg)).is_empty());
        }
    }
}
