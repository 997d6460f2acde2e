//! The name of the node metainit runs on: the Events' reporting instance and source host.

/// This node's name: `--node-name`, then `NODE_NAME`, then the hostname (lower-cased,
/// as the kubelet does); empty values count as absent. A value that is not a valid node
/// name is refused with what to fix.
pub fn node_name(flag: Option<&str>) -> crate::Result<String> {
    pick_node_name(flag, std::env::var("NODE_NAME").ok(), hostname)
}

/// The hostname, lower-cased as the kubelet does.
pub fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
}

/// `node_name` with its sources given.
pub fn pick_node_name(
    flag: Option<&str>,
    env: Option<String>,
    hostname: impl FnOnce() -> Option<String>,
) -> crate::Result<String> {
    let bad = |what: &str, value: &str| {
        crate::Error::Config(format!(
            "invalid node name '{value}' from {what}: {}",
            crate::validation::NODE_NAME_RULE
        ))
    };
    if let Some(flag) = flag.filter(|f| !f.is_empty()) {
        return crate::validation::node_name(flag)
            .map(|()| flag.to_string())
            .map_err(|_| bad("--node-name", flag));
    }
    if let Some(env) = env.filter(|e| !e.is_empty()) {
        return crate::validation::node_name(&env)
            .map(|()| env.clone())
            .map_err(|_| bad("NODE_NAME", &env));
    }
    match hostname().filter(|h| !h.is_empty()) {
        Some(h) if crate::validation::node_name(&h).is_ok() => Ok(h),
        Some(h) => Err(crate::Error::Config(format!(
            "the hostname '{h}' is not a valid node name: pass --node-name or set NODE_NAME ({})",
            crate::validation::NODE_NAME_RULE
        ))),
        None => Err(crate::Error::Config(
            "cannot tell this node's name: no hostname could be read; pass --node-name or set NODE_NAME".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_name_from_flag_then_env_then_hostname() {
        let host = || Some("cp-host".to_string());
        let pick = |flag, env: Option<&str>| pick_node_name(flag, env.map(String::from), host);
        assert_eq!(pick(Some("cp-1"), Some("env-1")).unwrap(), "cp-1");
        assert_eq!(pick(Some(""), Some("env-1")).unwrap(), "env-1");
        assert_eq!(pick(None, Some("")).unwrap(), "cp-host");
        assert_eq!(pick(Some(""), None).unwrap(), "cp-host");
        let err = pick(None, Some("Bad_Node")).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "invalid node name 'Bad_Node' from NODE_NAME: a node name is a DNS-1123 subdomain"
            ),
            "{err}"
        );
        let err = pick_node_name(None, None, || Some("under_score".into()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("the hostname 'under_score' is not a valid node name: pass --node-name or set NODE_NAME"),
            "{err}"
        );
        assert!(pick_node_name(None, None, || None).is_err());
    }
}
