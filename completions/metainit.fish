# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_metainit_global_optspecs
    string join \n label-key= mode= kubeconfig= context= n/namespace= log-format= timeout= request-timeout= resource= only= dry-run once admin-addr= node-name= concurrency= shutdown-timeout= resync-period= release-gate= exclude-namespace= release-rate= watch-gates= webhooks webhook-grace= identity= peers-namespace= peer-delay= check-config h/help V/version
end

function __fish_metainit_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_metainit_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_metainit_using_subcommand
    set -l cmd (__fish_metainit_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c metainit -n "__fish_metainit_needs_command" -l label-key -d 'Label key that marks the objects to clear; its value is ignored. [default: k8s.opsani.io/initializer]' -r
complete -c metainit -n "__fish_metainit_needs_command" -l mode -d 'Which mechanism to clear: `auto` asks the server\'s version (initializers up to 1.13, scheduling gates from 1.26)' -r -f -a "auto\t''
initializers\t''
scheduling-gates\t''"
complete -c metainit -n "__fish_metainit_needs_command" -l kubeconfig -d 'Path to the kubeconfig file. Otherwise KUBECONFIG, then ~/.kube/config, then in-cluster' -r -F
complete -c metainit -n "__fish_metainit_needs_command" -l context -d 'The kubeconfig context to use (default: its current-context)' -r
complete -c metainit -n "__fish_metainit_needs_command" -s n -l namespace -d 'Only this namespace (default: all namespaces)' -r
complete -c metainit -n "__fish_metainit_needs_command" -l log-format -d 'Log format; RUST_LOG filters (default `info`)' -r -f -a "text\t''
json\t''"
complete -c metainit -n "__fish_metainit_needs_command" -l timeout -d 'The budget of `--once` and `status`: how long they wait for an unreachable API server, and how long `--once` may retry objects it cannot clear yet. For `--once` it bounds the whole run, from its start; for `status`, each request' -r
complete -c metainit -n "__fish_metainit_needs_command" -l request-timeout -d 'How long one API request (watches excepted) may wait for its answer; a request not answered in time is retried like any transient failure. `0`: no limit' -r
complete -c metainit -n "__fish_metainit_needs_command" -l resource -d 'Resource to watch, as `plural[.group]` or `plural.version.group` (repeatable). [default: pods]' -r
complete -c metainit -n "__fish_metainit_needs_command" -l only -d 'Clear only these initializer or gate names (repeatable); default: every one' -r
complete -c metainit -n "__fish_metainit_needs_command" -l admin-addr -d 'Address of the admin server (/healthz, /readyz, /metrics): IP:PORT, [IPv6]:PORT or localhost:PORT (127.0.0.1)' -r
complete -c metainit -n "__fish_metainit_needs_command" -l node-name -d 'Name of this node, reported on Events; empty or absent: NODE_NAME, then the hostname' -r
complete -c metainit -n "__fish_metainit_needs_command" -l concurrency -d 'How many objects are patched at the same time' -r
complete -c metainit -n "__fish_metainit_needs_command" -l shutdown-timeout -d 'On SIGTERM, how long in-flight patches may take to finish' -r
complete -c metainit -n "__fish_metainit_needs_command" -l resync-period -d 'How often every watch lists its objects again in full, whatever it says: the labelled objects (every unbound pod with --release-gate or --watch-gates) and, with --webhooks, the webhook configurations and their services\' endpoints. Bounds any blindness (a watch silent after an etcd restore). At least 1s' -r
complete -c metainit -n "__fish_metainit_needs_command" -l release-gate -d 'On every unbound pod in scope, labelled or not, remove gate NAME once the pod is older than AGE (e.g. `example.com/quota=2h`): that gate only, never the others (repeatable; the environment variable takes a comma-separated list). For gates whose controller is gone. Scheduling-gates mode only' -r
complete -c metainit -n "__fish_metainit_needs_command" -l exclude-namespace -d 'Never release gates (`--release-gate`) in this namespace (repeatable). Labelled pods there are still cleared: the label is an explicit request' -r
complete -c metainit -n "__fish_metainit_needs_command" -l release-rate -d 'At most this many gate releases (`--release-gate`) across the process, as `N/s`, `N/m` or `N/h`, spaced evenly, so that a controller uninstalled with thousands of gated pods does not hand them all to the scheduler at once. [default: 60/m]' -r
complete -c metainit -n "__fish_metainit_needs_command" -l watch-gates -d 'Export `metainit_gated_pods` and `metainit_gated_oldest_seconds` for this gate (repeatable), releasing nothing: "a gate nobody clears" becomes one alert rule. Gates of `--release-gate` are watched anyway' -r
complete -c metainit -n "__fish_metainit_needs_command" -l webhook-grace -d 'How long a webhook\'s service must have had no ready endpoint before its namespace is exempted, and ready endpoints again before the exemption is removed. At least 1s' -r
complete -c metainit -n "__fish_metainit_needs_command" -l identity -d 'This instance\'s name among the instances that share the work (its Lease is metainit-NAME); empty or absent: the hostname. The static pod passes its node\'s name' -r
complete -c metainit -n "__fish_metainit_needs_command" -l peers-namespace -d 'Where the instances keep their Leases to share the work (manifests/rbac.yaml grants them there)' -r
complete -c metainit -n "__fish_metainit_needs_command" -l peer-delay -d 'How long each instance leaves an object to the instances ranked before it: its owner patches at once, the next after this, the next after twice this, each counting from when it last saw one of those at work if later (three times this more at most). 0s: no sharing, no Lease, every object at once' -r
complete -c metainit -n "__fish_metainit_needs_command" -l dry-run -d 'Log what would be cleared; change nothing. From the environment: 1/0, true/false, yes/no (any case)'
complete -c metainit -n "__fish_metainit_needs_command" -l once -d 'Clear what is pending now, print a summary and exit: 0 if everything labelled is clear, 1 if something could not be cleared'
complete -c metainit -n "__fish_metainit_needs_command" -l webhooks -d 'Also break the deadlock of an admission webhook that intercepts its own pods: on each Mutating/ValidatingWebhookConfiguration that carries the label key, a webhook that fails closed and whose service has had no ready endpoint for --webhook-grace gets its service\'s own namespace exempted, and restored once the service is back (docs/src/guides/webhooks.md). Needs Kubernetes 1.21 or later and manifests/rbac-webhooks.yaml. From the environment: 1/0, true/false, yes/no'
complete -c metainit -n "__fish_metainit_needs_command" -l check-config -d 'Check every flag and the kubeconfig file, print "configuration OK" and exit; contacts no server'
complete -c metainit -n "__fish_metainit_needs_command" -s h -l help -d 'Print help'
complete -c metainit -n "__fish_metainit_needs_command" -s V -l version -d 'Print version'
complete -c metainit -n "__fish_metainit_needs_command" -a "status" -d 'List every object held back right now (labelled or not); changes nothing'
complete -c metainit -n "__fish_metainit_needs_command" -a "probe" -d 'GET a path (default /readyz) on every endpoint of a Service, ready or not: exit 0 if there is one and every one answers 200, 1 if not, 2 if it cannot tell'
complete -c metainit -n "__fish_metainit_needs_command" -a "completions" -d 'Write the completion script of a shell (bash, zsh, fish) on stdout'
complete -c metainit -n "__fish_metainit_needs_command" -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c metainit -n "__fish_metainit_using_subcommand status" -l label-key -d 'Label key that marks the objects to clear; its value is ignored. [default: k8s.opsani.io/initializer]' -r
complete -c metainit -n "__fish_metainit_using_subcommand status" -l mode -d 'Which mechanism to clear: `auto` asks the server\'s version (initializers up to 1.13, scheduling gates from 1.26)' -r -f -a "auto\t''
initializers\t''
scheduling-gates\t''"
complete -c metainit -n "__fish_metainit_using_subcommand status" -l kubeconfig -d 'Path to the kubeconfig file. Otherwise KUBECONFIG, then ~/.kube/config, then in-cluster' -r -F
complete -c metainit -n "__fish_metainit_using_subcommand status" -l context -d 'The kubeconfig context to use (default: its current-context)' -r
complete -c metainit -n "__fish_metainit_using_subcommand status" -s n -l namespace -d 'Only this namespace (default: all namespaces)' -r
complete -c metainit -n "__fish_metainit_using_subcommand status" -l log-format -d 'Log format; RUST_LOG filters (default `info`)' -r -f -a "text\t''
json\t''"
complete -c metainit -n "__fish_metainit_using_subcommand status" -l timeout -d 'The budget of `--once` and `status`: how long they wait for an unreachable API server, and how long `--once` may retry objects it cannot clear yet. For `--once` it bounds the whole run, from its start; for `status`, each request' -r
complete -c metainit -n "__fish_metainit_using_subcommand status" -l request-timeout -d 'How long one API request (watches excepted) may wait for its answer; a request not answered in time is retried like any transient failure. `0`: no limit' -r
complete -c metainit -n "__fish_metainit_using_subcommand status" -s o -l output -d 'Output format' -r -f -a "table\t''
json\t''
yaml\t''"
complete -c metainit -n "__fish_metainit_using_subcommand status" -l max-age -d 'Exit 1 if any object has been held back longer than this (e.g. `10m`)' -r
complete -c metainit -n "__fish_metainit_using_subcommand status" -l release-gate -d 'On every unbound pod in scope, labelled or not, remove gate NAME once the pod is older than AGE (e.g. `example.com/quota=2h`): that gate only, never the others (repeatable; the environment variable takes a comma-separated list). For gates whose controller is gone. Scheduling-gates mode only' -r
complete -c metainit -n "__fish_metainit_using_subcommand status" -l exclude-namespace -d 'Never release gates (`--release-gate`) in this namespace (repeatable). Labelled pods there are still cleared: the label is an explicit request' -r
complete -c metainit -n "__fish_metainit_using_subcommand status" -s A -l all-namespaces -d 'Every namespace, as kubectl\'s -A: what status lists without -n anyway'
complete -c metainit -n "__fish_metainit_using_subcommand status" -l webhooks -d 'Also list the webhooks of the labelled webhook configurations that are down (no ready endpoint) or exempted, and their state, as `--webhooks` sees them. Needs list on the two configuration kinds and on endpointslices (manifests/rbac-webhooks.yaml). From the environment: 1/0, true/false, yes/no'
complete -c metainit -n "__fish_metainit_using_subcommand status" -l risks -d 'Instead of what is held back now, what would stall a cold start: fail-closed webhooks that admit their own pods, cycles of webhooks, webhooks on pods/binding, system pods behind a webhook that a pod-network outage stops, gated templates nobody lifts; and, now, fail-closed webhooks that are down and what they block; each with the fix and whether metainit as configured (label key, --webhooks, --release-gate) clears it. Exit 3 when there is one. Needs manifests/rbac-status.yaml'
complete -c metainit -n "__fish_metainit_using_subcommand status" -s h -l help -d 'Print help'
complete -c metainit -n "__fish_metainit_using_subcommand probe" -l port -d 'The name of the Service port to GET; each pod is asked at that port\'s target' -r
complete -c metainit -n "__fish_metainit_using_subcommand probe" -l path -d 'The path to GET on each endpoint' -r
complete -c metainit -n "__fish_metainit_using_subcommand probe" -s n -l namespace -d 'The Service\'s namespace (default: the kubeconfig context\'s, or in a pod its own)' -r
complete -c metainit -n "__fish_metainit_using_subcommand probe" -l kubeconfig -d 'Path to the kubeconfig file. Otherwise KUBECONFIG, then ~/.kube/config, then in-cluster' -r -F
complete -c metainit -n "__fish_metainit_using_subcommand probe" -l context -d 'The kubeconfig context to use (default: its current-context)' -r
complete -c metainit -n "__fish_metainit_using_subcommand probe" -l timeout -d 'How long each API request (retried meanwhile) and each endpoint\'s GET may wait' -r
complete -c metainit -n "__fish_metainit_using_subcommand probe" -l node-name -d 'The node this probe runs on, in its network namespace (a hostNetwork pod): a hostNetwork pod of the Service on the same node that has no IP (its node reports no address, as a node whose address is loopback does) is asked at 127.0.0.1' -r
complete -c metainit -n "__fish_metainit_using_subcommand probe" -l log-format -d 'Log format; RUST_LOG filters (default `info`)' -r -f -a "text\t''
json\t''"
complete -c metainit -n "__fish_metainit_using_subcommand probe" -s h -l help -d 'Print help'
complete -c metainit -n "__fish_metainit_using_subcommand completions" -s h -l help -d 'Print help'
complete -c metainit -n "__fish_metainit_using_subcommand help; and not __fish_seen_subcommand_from status probe completions help" -f -a "status" -d 'List every object held back right now (labelled or not); changes nothing'
complete -c metainit -n "__fish_metainit_using_subcommand help; and not __fish_seen_subcommand_from status probe completions help" -f -a "probe" -d 'GET a path (default /readyz) on every endpoint of a Service, ready or not: exit 0 if there is one and every one answers 200, 1 if not, 2 if it cannot tell'
complete -c metainit -n "__fish_metainit_using_subcommand help; and not __fish_seen_subcommand_from status probe completions help" -f -a "completions" -d 'Write the completion script of a shell (bash, zsh, fish) on stdout'
complete -c metainit -n "__fish_metainit_using_subcommand help; and not __fish_seen_subcommand_from status probe completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
