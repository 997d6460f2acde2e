//! A resource as the user names it on the command line (`pods`, `deployments.apps`,
//! `deployments.v1.apps`), parsed and checked without a server; `discovery` finds it on one.

/// A resource as the user named it: `pods`, `deployments.apps`, `deployments.v1.apps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceSpec {
    pub plural: String,
    pub version: Option<String>,
    pub group: String,
}

impl ResourceSpec {
    pub fn pods() -> Self {
        ResourceSpec {
            plural: "pods".into(),
            version: None,
            group: String::new(),
        }
    }

    pub fn is_pods(&self) -> bool {
        self.plural == "pods" && self.group.is_empty()
    }
}

impl std::fmt::Display for ResourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.plural)?;
        if let Some(v) = &self.version {
            write!(f, ".{v}")?;
        }
        if !self.group.is_empty() {
            write!(f, ".{}", self.group)?;
        }
        Ok(())
    }
}

fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    if digits == 0 {
        return false;
    }
    let tail = &rest[digits..];
    tail.is_empty()
        || ["alpha", "beta"].iter().any(|stage| {
            tail.strip_prefix(stage)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
}

pub fn parse_resource(s: &str) -> Result<ResourceSpec, String> {
    const RULE: &str = "a resource is `plural[.group]` or `plural.version.group`, lower case (e.g. 'pods', 'deployments.apps')";
    let (plural, rest) = match s.split_once('.') {
        Some((p, r)) => (p, Some(r)),
        None => (s, None),
    };
    if !crate::validation::is_dns_label(plural) {
        return Err(RULE.into());
    }
    let (version, group) = match rest {
        None => (None, ""),
        Some(r) => match r.split_once('.') {
            Some((v, g)) if is_version(v) => (Some(v.to_string()), g),
            _ if is_version(r) => (Some(r.to_string()), ""),
            _ => (None, r),
        },
    };
    if rest.is_some() && version.is_none() && !crate::validation::is_dns_subdomain(group)
        || !group.is_empty() && !crate::validation::is_dns_subdomain(group)
    {
        return Err(RULE.into());
    }
    Ok(ResourceSpec {
        plural: plural.to_string(),
        version,
        group: group.to_string(),
    })
}
