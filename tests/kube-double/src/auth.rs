// Bearer-token authentication and a tiny RBAC: token -> ["verb resource", "*"].

use crate::resources::ResourceInfo;
use crate::status::{self, ApiError};

/// Who is calling and what they may do; `perms: None` allows everything.
#[derive(Clone, Debug)]
pub struct Caller {
    pub user: String,
    perms: Option<Vec<String>>,
}

impl Caller {
    /// The library handle and servers without a token table.
    pub fn everything() -> Caller {
        Caller {
            user: "system:admin".into(),
            perms: None,
        }
    }

    /// Whether `verb` is allowed on `resource` (a key like `pods`, `deployments.apps`,
    /// or a subresource `pods/status`).
    pub fn can(&self, verb: &str, resource: &str) -> bool {
        let Some(perms) = &self.perms else {
            return true;
        };
        perms.iter().any(|p| {
            if p == "*" {
                return true;
            }
            let mut it = p.split_whitespace();
            let (Some(v), Some(r)) = (it.next(), it.next()) else {
                return false;
            };
            (v == "*" || v == verb) && (r == "*" || r == resource)
        })
    }

    /// RBAC's denial text: `User "u" cannot get resource "pods" in API group "" in the namespace "ns"`.
    pub fn denial(
        &self,
        verb: &str,
        res: &ResourceInfo,
        sub: Option<&str>,
        ns: Option<&str>,
    ) -> String {
        let resource = match sub {
            Some(s) => format!("{}/{}", res.plural, s),
            None => res.plural.clone(),
        };
        let scope = match ns {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        format!(
            "User \"{}\" cannot {verb} resource \"{resource}\" in API group \"{}\" {scope}",
            self.user, res.group
        )
    }

    /// 403 unless the caller may `verb` the resource.
    pub fn check(
        &self,
        verb: &str,
        res: &ResourceInfo,
        sub: Option<&str>,
        ns: Option<&str>,
        name: &str,
    ) -> Result<(), ApiError> {
        let key = match sub {
            Some(s) => format!("{}/{}", res.key, s),
            None => res.key.clone(),
        };
        if self.can(verb, &key) {
            Ok(())
        } else {
            Err(status::forbidden(
                res,
                name,
                &self.denial(verb, res, sub, ns),
            ))
        }
    }
}

/// Finds the caller from an `Authorization` header; 401 when a token table is
/// configured and the token is missing or unknown.
pub fn authenticate(
    tokens: Option<&std::collections::HashMap<String, Vec<String>>>,
    header: Option<&str>,
) -> Result<Caller, ApiError> {
    let Some(tokens) = tokens else {
        return Ok(Caller::everything());
    };
    let token = header
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or_else(status::unauthorized)?;
    match tokens.get(token) {
        Some(perms) => Ok(Caller {
            user: format!("token:{token}"),
            perms: Some(perms.clone()),
        }),
        None => Err(status::unauthorized()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn perms() {
        let mut t = HashMap::new();
        t.insert(
            "a".to_string(),
            vec!["get pods".to_string(), "* events".to_string()],
        );
        t.insert("root".to_string(), vec!["*".to_string()]);
        assert!(authenticate(Some(&t), None).is_err());
        assert!(authenticate(Some(&t), Some("Bearer nope")).is_err());
        let a = authenticate(Some(&t), Some("Bearer a")).unwrap();
        assert!(a.can("get", "pods"));
        assert!(!a.can("patch", "pods"));
        assert!(a.can("create", "events"));
        let r = authenticate(Some(&t), Some("Bearer root")).unwrap();
        assert!(r.can("initialize", "pods"));
        let pods = ResourceInfo::new("pods");
        let e = a.check("patch", &pods, None, Some("ns"), "x").unwrap_err();
        assert_eq!(e.code(), 403);
        assert_eq!(
            e.status["message"],
            "pods \"x\" is forbidden: User \"token:a\" cannot patch resource \"pods\" in API group \"\" in the namespace \"ns\""
        );
    }
}
