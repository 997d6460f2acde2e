#compdef metainit

autoload -U is-at-least

_metainit() {
    typeset -A opt_args
    typeset -a _arguments_options
    local ret=1

    if is-at-least 5.2; then
        _arguments_options=(-s -S -C)
    else
        _arguments_options=(-s -C)
    fi

    local context curcontext="$curcontext" state line
    _arguments "${_arguments_options[@]}" : \
'--label-key=[Label key that marks the objects to clear; its value is ignored. \[default\: k8s.opsani.io/initializer\]]:KEY:_default' \
'--mode=[Which mechanism to clear\: \`auto\` asks the server'\''s version (initializers up to 1.13, scheduling gates from 1.26)]:MODE:(auto initializers scheduling-gates)' \
'--kubeconfig=[Path to the kubeconfig file. Otherwise KUBECONFIG, then ~/.kube/config, then in-cluster]:PATH:_files' \
'--context=[The kubeconfig context to use (default\: its current-context)]:NAME:_default' \
'-n+[Only this namespace (default\: all namespaces)]:NS:_default' \
'--namespace=[Only this namespace (default\: all namespaces)]:NS:_default' \
'--log-format=[Log format; RUST_LOG filters (default \`info\`)]:LOG_FORMAT:(text json)' \
'--timeout=[The budget of \`--once\` and \`status\`\: how long they wait for an unreachable API server, and how long \`--once\` may retry objects it cannot clear yet. For \`--once\` it bounds the whole run, from its start; for \`status\`, each request]:DURATION:_default' \
'--request-timeout=[How long one API request (watches excepted) may wait for its answer; a request not answered in time is retried like any transient failure. \`0\`\: no limit]:DURATION:_default' \
'*--resource=[Resource to watch, as \`plural\[.group\]\` or \`plural.version.group\` (repeatable). \[default\: pods\]]:R:_default' \
'*--only=[Clear only these initializer or gate names (repeatable); default\: every one]:NAME:_default' \
'--admin-addr=[Address of the admin server (/healthz, /readyz, /metrics)\: IP\:PORT, \[IPv6\]\:PORT or localhost\:PORT (127.0.0.1)]:ADDR:_default' \
'--node-name=[Name of this node, reported on Events; empty or absent\: NODE_NAME, then the hostname]:NAME:_default' \
'--concurrency=[How many objects are patched at the same time]:N:_default' \
'--shutdown-timeout=[On SIGTERM, how long in-flight patches may take to finish]:DURATION:_default' \
'--resync-period=[How often every watch lists its objects again in full, whatever it says\: the labelled objects (every unbound pod with --release-gate or --watch-gates) and, with --webhooks, the webhook configurations and their services'\'' endpoints. Bounds any blindness (a watch silent after an etcd restore). At least 1s]:DURATION:_default' \
'*--release-gate=[On every unbound pod in scope, labelled or not, remove gate NAME once the pod is older than AGE (e.g. \`example.com/quota=2h\`)\: that gate only, never the others (repeatable; the environment variable takes a comma-separated list). For gates whose controller is gone. Scheduling-gates mode only]:NAME=AGE:_default' \
'*--exclude-namespace=[Never release gates (\`--release-gate\`) in this namespace (repeatable). Labelled pods there are still cleared\: the label is an explicit request]:NS:_default' \
'--release-rate=[At most this many gate releases (\`--release-gate\`) across the process, as \`N/s\`, \`N/m\` or \`N/h\`, spaced evenly, so that a controller uninstalled with thousands of gated pods does not hand them all to the scheduler at once. \[default\: 60/m\]]:N/UNIT:_default' \
'*--watch-gates=[Export \`metainit_gated_pods\` and \`metainit_gated_oldest_seconds\` for this gate (repeatable), releasing nothing\: "a gate nobody clears" becomes one alert rule. Gates of \`--release-gate\` are watched anyway]:NAME:_default' \
'--webhook-grace=[How long a webhook'\''s service must have had no ready endpoint before its namespace is exempted, and ready endpoints again before the exemption is removed. At least 1s]:DURATION:_default' \
'--identity=[This instance'\''s name among the instances that share the work (its Lease is metainit-NAME); empty or absent\: the hostname. The static pod passes its node'\''s name]:NAME:_default' \
'--peers-namespace=[Where the instances keep their Leases to share the work (manifests/rbac.yaml grants them there)]:NS:_default' \
'--peer-delay=[How long each instance leaves an object to the instances ranked before it\: its owner patches at once, the next after this, the next after twice this, each counting from when it last saw one of those at work if later (three times this more at most). 0s\: no sharing, no Lease, every object at once]:DURATION:_default' \
'--dry-run[Log what would be cleared; change nothing. From the environment\: 1/0, true/false, yes/no (any case)]' \
'--once[Clear what is pending now, print a summary and exit\: 0 if everything labelled is clear, 1 if something could not be cleared]' \
'--webhooks[Also break the deadlock of an admission webhook that intercepts its own pods\: on each Mutating/ValidatingWebhookConfiguration that carries the label key, a webhook that fails closed and whose service has had no ready endpoint for --webhook-grace gets its service'\''s own namespace exempted, and restored once the service is back (docs/src/guides/webhooks.md). Needs Kubernetes 1.21 or later and manifests/rbac-webhooks.yaml. From the environment\: 1/0, true/false, yes/no]' \
'--check-config[Check every flag and the kubeconfig file, print "configuration OK" and exit; contacts no server]' \
'-h[Print help]' \
'--help[Print help]' \
'-V[Print version]' \
'--version[Print version]' \
'::positional_label_key -- The label key, as the original tool took it (same as --label-key):_default' \
":: :_metainit_commands" \
"*::: :->metainit" \
&& ret=0
    case $state in
    (metainit)
        words=($line[2] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:metainit-command-$line[2]:"
        case $line[2] in
            (status)
_arguments "${_arguments_options[@]}" : \
'--label-key=[Label key that marks the objects to clear; its value is ignored. \[default\: k8s.opsani.io/initializer\]]:KEY:_default' \
'--mode=[Which mechanism to clear\: \`auto\` asks the server'\''s version (initializers up to 1.13, scheduling gates from 1.26)]:MODE:(auto initializers scheduling-gates)' \
'--kubeconfig=[Path to the kubeconfig file. Otherwise KUBECONFIG, then ~/.kube/config, then in-cluster]:PATH:_files' \
'--context=[The kubeconfig context to use (default\: its current-context)]:NAME:_default' \
'-n+[Only this namespace (default\: all namespaces)]:NS:_default' \
'--namespace=[Only this namespace (default\: all namespaces)]:NS:_default' \
'--log-format=[Log format; RUST_LOG filters (default \`info\`)]:LOG_FORMAT:(text json)' \
'--timeout=[The budget of \`--once\` and \`status\`\: how long they wait for an unreachable API server, and how long \`--once\` may retry objects it cannot clear yet. For \`--once\` it bounds the whole run, from its start; for \`status\`, each request]:DURATION:_default' \
'--request-timeout=[How long one API request (watches excepted) may wait for its answer; a request not answered in time is retried like any transient failure. \`0\`\: no limit]:DURATION:_default' \
'-o+[Output format]:OUTPUT:(table json yaml)' \
'--output=[Output format]:OUTPUT:(table json yaml)' \
'--max-age=[Exit 1 if any object has been held back longer than this (e.g. \`10m\`)]:DURATION:_default' \
'*--release-gate=[On every unbound pod in scope, labelled or not, remove gate NAME once the pod is older than AGE (e.g. \`example.com/quota=2h\`)\: that gate only, never the others (repeatable; the environment variable takes a comma-separated list). For gates whose controller is gone. Scheduling-gates mode only]:NAME=AGE:_default' \
'*--exclude-namespace=[Never release gates (\`--release-gate\`) in this namespace (repeatable). Labelled pods there are still cleared\: the label is an explicit request]:NS:_default' \
'(-n --namespace)-A[Every namespace, as kubectl'\''s -A\: what status lists without -n anyway]' \
'(-n --namespace)--all-namespaces[Every namespace, as kubectl'\''s -A\: what status lists without -n anyway]' \
'--webhooks[Also list the webhooks of the labelled webhook configurations that are down (no ready endpoint) or exempted, and their state, as \`--webhooks\` sees them. Needs list on the two configuration kinds and on endpointslices (manifests/rbac-webhooks.yaml). From the environment\: 1/0, true/false, yes/no]' \
'(--max-age)--risks[Instead of what is held back now, what would stall a cold start\: fail-closed webhooks that admit their own pods, cycles of webhooks, webhooks on pods/binding, system pods behind a webhook that a pod-network outage stops, gated templates nobody lifts; and, now, fail-closed webhooks that are down and what they block; each with the fix and whether metainit as configured (label key, --webhooks, --release-gate) clears it. Exit 3 when there is one. Needs manifests/rbac-status.yaml]' \
'-h[Print help]' \
'--help[Print help]' \
'::positional_label_key -- The label key, as the main command takes it (same as --label-key):_default' \
&& ret=0
;;
(probe)
_arguments "${_arguments_options[@]}" : \
'--port=[The name of the Service port to GET; each pod is asked at that port'\''s target]:NAME:_default' \
'--path=[The path to GET on each endpoint]:PATH:_default' \
'-n+[The Service'\''s namespace (default\: the kubeconfig context'\''s, or in a pod its own)]:NS:_default' \
'--namespace=[The Service'\''s namespace (default\: the kubeconfig context'\''s, or in a pod its own)]:NS:_default' \
'--kubeconfig=[Path to the kubeconfig file. Otherwise KUBECONFIG, then ~/.kube/config, then in-cluster]:PATH:_files' \
'--context=[The kubeconfig context to use (default\: its current-context)]:NAME:_default' \
'--timeout=[How long each API request (retried meanwhile) and each endpoint'\''s GET may wait]:DURATION:_default' \
'--node-name=[The node this probe runs on, in its network namespace (a hostNetwork pod)\: a hostNetwork pod of the Service on the same node that has no IP (its node reports no address, as a node whose address is loopback does) is asked at 127.0.0.1]:NAME:_default' \
'--log-format=[Log format; RUST_LOG filters (default \`info\`)]:LOG_FORMAT:(text json)' \
'-h[Print help]' \
'--help[Print help]' \
':service -- The Service whose pods to GET\: every pod its selector matches, ready or not:_default' \
&& ret=0
;;
(completions)
_arguments "${_arguments_options[@]}" : \
'-h[Print help]' \
'--help[Print help]' \
':shell -- The shell to write the completion script for:(bash zsh fish)' \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
":: :_metainit__subcmd__help_commands" \
"*::: :->help" \
&& ret=0

    case $state in
    (help)
        words=($line[1] "${words[@]}")
        (( CURRENT += 1 ))
        curcontext="${curcontext%:*:*}:metainit-help-command-$line[1]:"
        case $line[1] in
            (status)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(probe)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(completions)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
(help)
_arguments "${_arguments_options[@]}" : \
&& ret=0
;;
        esac
    ;;
esac
;;
        esac
    ;;
esac
}

(( $+functions[_metainit_commands] )) ||
_metainit_commands() {
    local commands; commands=(
'status:List every object held back right now (labelled or not); changes nothing' \
'probe:GET a path (default /readyz) on every endpoint of a Service, ready or not\: exit 0 if there is one and every one answers 200, 1 if not, 2 if it cannot tell' \
'completions:Write the completion script of a shell (bash, zsh, fish) on stdout' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'metainit commands' commands "$@"
}
(( $+functions[_metainit__subcmd__completions_commands] )) ||
_metainit__subcmd__completions_commands() {
    local commands; commands=()
    _describe -t commands 'metainit completions commands' commands "$@"
}
(( $+functions[_metainit__subcmd__help_commands] )) ||
_metainit__subcmd__help_commands() {
    local commands; commands=(
'status:List every object held back right now (labelled or not); changes nothing' \
'probe:GET a path (default /readyz) on every endpoint of a Service, ready or not\: exit 0 if there is one and every one answers 200, 1 if not, 2 if it cannot tell' \
'completions:Write the completion script of a shell (bash, zsh, fish) on stdout' \
'help:Print this message or the help of the given subcommand(s)' \
    )
    _describe -t commands 'metainit help commands' commands "$@"
}
(( $+functions[_metainit__subcmd__help__subcmd__completions_commands] )) ||
_metainit__subcmd__help__subcmd__completions_commands() {
    local commands; commands=()
    _describe -t commands 'metainit help completions commands' commands "$@"
}
(( $+functions[_metainit__subcmd__help__subcmd__help_commands] )) ||
_metainit__subcmd__help__subcmd__help_commands() {
    local commands; commands=()
    _describe -t commands 'metainit help help commands' commands "$@"
}
(( $+functions[_metainit__subcmd__help__subcmd__probe_commands] )) ||
_metainit__subcmd__help__subcmd__probe_commands() {
    local commands; commands=()
    _describe -t commands 'metainit help probe commands' commands "$@"
}
(( $+functions[_metainit__subcmd__help__subcmd__status_commands] )) ||
_metainit__subcmd__help__subcmd__status_commands() {
    local commands; commands=()
    _describe -t commands 'metainit help status commands' commands "$@"
}
(( $+functions[_metainit__subcmd__probe_commands] )) ||
_metainit__subcmd__probe_commands() {
    local commands; commands=()
    _describe -t commands 'metainit probe commands' commands "$@"
}
(( $+functions[_metainit__subcmd__status_commands] )) ||
_metainit__subcmd__status_commands() {
    local commands; commands=()
    _describe -t commands 'metainit status commands' commands "$@"
}

if [ "$funcstack[1]" = "_metainit" ]; then
    _metainit "$@"
else
    compdef _metainit metainit
fi
