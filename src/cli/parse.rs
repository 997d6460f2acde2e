//! The parsers of flag values: each checks one value and says the rule it broke.

use std::{net::SocketAddr, time::Duration};

use crate::validation;

/// A scheduling gate name is a qualified name (`example.com/quota`).
pub(super) fn parse_gate_name(s: &str) -> Result<String, String> {
    validation::gate_name(s).map(|()| s.to_string())
}

pub(super) fn parse_label_key(s: &str) -> Result<String, String> {
    validation::label_key(s).map(|()| s.to_string())
}

/// The watcher's positional label key: never a subcommand's name, which there means the
/// subcommand came after a flag (`metainit --kubeconfig F status` would otherwise start the
/// watcher with label key "status").
pub(super) fn parse_positional_label_key(s: &str) -> Result<String, String> {
    if ["status", "probe", "completions"].contains(&s) {
        return Err(format!(
            "\"{s}\" is a subcommand: give it first, before the flags (metainit {s} --kubeconfig ...); for a label key named so, use --label-key {s}"
        ));
    }
    parse_label_key(s)
}

pub(super) fn parse_namespace(s: &str) -> Result<String, String> {
    validation::namespace(s).map(|()| s.to_string())
}

pub(super) fn parse_service_name(s: &str) -> Result<String, String> {
    validation::service_name(s).map(|()| s.to_string())
}

pub(super) fn parse_port_name(s: &str) -> Result<String, String> {
    validation::port_name(s).map(|()| s.to_string())
}

pub(super) fn parse_path(s: &str) -> Result<String, String> {
    validation::http_path(s).map(|()| s.to_string())
}

pub(super) fn parse_blocker_name(s: &str) -> Result<String, String> {
    validation::blocker_name(s).map(|()| s.to_string())
}

/// Booleans as people write them in environment variables.
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err("a boolean is 1, 0, true, false, yes or no (any case)".into()),
    }
}

/// `IP:PORT`, `[IPv6]:PORT`, or `localhost:PORT` (the IPv4 loopback, as the default is).
pub fn parse_admin_addr(s: &str) -> Result<SocketAddr, String> {
    const RULE: &str = "an address is IP:PORT, [IPv6]:PORT or localhost:PORT \
                        (e.g. '127.0.0.1:10275', 'localhost:10275', '0.0.0.0:10275' to listen on every interface)";
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    match s.rsplit_once(':') {
        Some((host, port)) if host.eq_ignore_ascii_case("localhost") => port
            .parse::<u16>()
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
            .map_err(|_| RULE.into()),
        _ => Err(RULE.into()),
    }
}

/// A node name is a DNS subdomain; an empty value means "not given" (a manifest's
/// `--node-name=$(NODE_NAME)` with the variable unset).
pub(super) fn parse_node_name(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Ok(String::new());
    }
    validation::node_name(s).map(|()| s.to_string())
}

pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    validation::duration(s)
}

/// `probe`'s `--timeout`, which bounds each endpoint's GET: 0 would fail them all.
pub(super) fn parse_probe_timeout(s: &str) -> Result<Duration, String> {
    let d = validation::duration(s)?;
    if d.is_zero() {
        return Err("probe's timeout must be more than 0s: it bounds each endpoint's GET".into());
    }
    Ok(d)
}

pub(super) fn parse_request_timeout(s: &str) -> Result<Duration, String> {
    if s.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    validation::duration(s)
}

pub(super) fn parse_webhook_grace(s: &str) -> Result<Duration, String> {
    let d = validation::duration(s)?;
    if d < Duration::from_secs(1) {
        return Err(
            "the grace period must be at least 1s: without one, endpoints that flap during a rollout would rewrite the configuration each time"
                .into(),
        );
    }
    Ok(d)
}

pub(super) fn parse_resync_period(s: &str) -> Result<Duration, String> {
    let d = validation::duration(s)?;
    if d < Duration::from_secs(1) {
        return Err("the resync period must be at least 1s".into());
    }
    Ok(d)
}
