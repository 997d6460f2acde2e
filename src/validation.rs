//! Pure checks of user input against Kubernetes' naming rules, and a duration parser.
//! Each returns the rule that was broken, so the caller can name the flag and the value.
//! Durations have a bound (`MAX_DURATION`), and `later` adds one to a clock's reading
//! without the panic of `Instant + Duration`, whatever reaches it.

use std::time::Duration;

/// The rule a label key must follow, as Kubernetes states it.
pub const LABEL_KEY_RULE: &str = "a label key is an optional DNS subdomain prefix of at most 253 characters and '/', \
then a name of at most 63 characters of [A-Za-z0-9._-] that begins and ends with a letter or digit \
(e.g. 'k8s.opsani.io/initializer' or 'initializer')";

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// A DNS-1123 label: at most 63 characters of [a-z0-9-], beginning and ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
}

/// A DNS-1123 subdomain: at most 253 characters, dot-separated DNS labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The name part of a qualified name (label keys, gate names).
fn is_qualified_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars()
            .all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.starts_with(is_alnum)
        && s.ends_with(is_alnum)
}

/// A qualified name: `[prefix/]name`, as label keys and scheduling gate names are.
pub fn is_qualified_name(s: &str) -> bool {
    match s.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && is_qualified_name_part(name),
        None => is_qualified_name_part(s),
    }
}

/// Checks a label key; the error is the rule it breaks.
pub fn label_key(s: &str) -> Result<(), String> {
    if is_qualified_name(s) {
        Ok(())
    } else {
        Err(LABEL_KEY_RULE.to_string())
    }
}

/// Checks a namespace name.
pub fn namespace(s: &str) -> Result<(), String> {
    if is_dns_label(s) {
        Ok(())
    } else {
        Err("a namespace is a DNS-1123 label: at most 63 characters of [a-z0-9-], beginning and ending with a letter or digit".into())
    }
}

/// Checks a Service name: a DNS-1035 label (a DNS-1123 label that begins with a letter).
pub fn service_name(s: &str) -> Result<(), String> {
    if is_dns_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase()) {
        Ok(())
    } else {
        Err("a Service name is a DNS-1035 label: at most 63 characters of [a-z0-9-], beginning with a letter and ending with a letter or digit".into())
    }
}

/// Checks a port name: an IANA service name, as a Service's and an EndpointSlice's ports have.
pub fn port_name(s: &str) -> Result<(), String> {
    let ok = is_dns_label(s)
        && s.len() <= 15
        && !s.contains("--")
        && s.chars().any(|c| c.is_ascii_lowercase());
    if ok {
        Ok(())
    } else {
        Err("a port name is an IANA service name: at most 15 characters of [a-z0-9-] with at least one letter, \
             no '--', beginning and ending with a letter or digit (e.g. 'metrics')"
            .into())
    }
}

/// Checks an HTTP path to GET: it begins with '/' and holds no space or control character.
pub fn http_path(s: &str) -> Result<(), String> {
    let ok = s.starts_with('/')
        && s.parse::<http::uri::PathAndQuery>().is_ok()
        && !s.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(
            "a path begins with '/' and holds no space or control character (e.g. '/readyz')"
                .into(),
        )
    }
}

/// The rule a node name must follow.
pub const NODE_NAME_RULE: &str = "a node name is a DNS-1123 subdomain: at most 253 characters of [a-z0-9-.], \
each dot-separated part beginning and ending with a letter or digit (e.g. 'cp-1' or 'ip-10-0-0-1.ec2.internal')";

/// Checks a node name.
pub fn node_name(s: &str) -> Result<(), String> {
    if is_dns_subdomain(s) {
        Ok(())
    } else {
        Err(NODE_NAME_RULE.into())
    }
}

/// Checks a scheduling gate name: a qualified name (`example.com/quota`).
pub fn gate_name(s: &str) -> Result<(), String> {
    if is_qualified_name(s) {
        Ok(())
    } else {
        Err(format!(
            "'{s}' is not a scheduling gate name: a gate name is a qualified name, \
             an optional DNS subdomain prefix and '/', then at most 63 characters of [A-Za-z0-9-_.] (e.g. 'example.com/quota')"
        ))
    }
}

/// Checks an initializer or scheduling gate name given to `--only`.
/// Initializer names are DNS subdomains (`podimage.example.com`); gate names are
/// qualified names (`example.com/quota`); either form is accepted.
pub fn blocker_name(s: &str) -> Result<(), String> {
    if is_dns_subdomain(s) || is_qualified_name(s) {
        Ok(())
    } else {
        Err(
            "a name is an initializer name (a DNS subdomain such as 'podimage.example.com') \
             or a scheduling gate name (a qualified name such as 'example.com/quota')"
                .into(),
        )
    }
}

/// The longest duration a flag takes: ten years, far beyond any timeout, period or age
/// that makes sense, and small enough that adding it to any clock's reading cannot
/// overflow (`Instant + Duration` panics when it does).
pub const MAX_DURATION: Duration = Duration::from_secs(87_600 * 3600);

/// What a duration beyond `MAX_DURATION` is told.
pub const DURATION_TOO_LONG: &str = "a duration is at most 87600h (10 years)";

/// The instant `d` after `from`, or as far as the clock goes: `Instant + Duration`
/// panics on overflow, which `MAX_DURATION` rules out for a flag's value; this rules it
/// out for any duration.
pub fn later(from: tokio::time::Instant, mut d: Duration) -> tokio::time::Instant {
    loop {
        if let Some(at) = from.checked_add(d) {
            return at;
        }
        // Halving ends: `from + 0` is `from`.
        d /= 2;
    }
}

/// Parses a duration written as Kubernetes and Go do: `500ms`, `30s`, `5m`, `1h30m`.
/// At most `MAX_DURATION`: a longer one is refused, never saturated.
pub fn duration(s: &str) -> Result<Duration, String> {
    const RULE: &str = "a duration is a number followed by a unit, ms, s, m or h, repeated (e.g. '30s', '5m', '1h30m')";
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(RULE.into());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(RULE.into());
        }
        // Nothing but ASCII digits: the only way to fail is a number beyond u64.
        let n: Option<u64> = rest[..digits].parse().ok();
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let secs_per = match &rest[..unit_len] {
            "ms" => None,
            "s" => Some(1),
            "m" => Some(60),
            "h" => Some(3600),
            _ => return Err(RULE.into()),
        };
        let step = n.and_then(|n| match secs_per {
            None => Some(Duration::from_millis(n)),
            Some(per) => n.checked_mul(per).map(Duration::from_secs),
        });
        total = step
            .and_then(|step| total.checked_add(step))
            .filter(|t| *t <= MAX_DURATION)
            .ok_or(DURATION_TOO_LONG)?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_names_and_paths() {
        for good in ["metainit", "m-1"] {
            assert!(service_name(good).is_ok(), "{good}");
        }
        for bad in ["", "1m", "M", "m_1", "m-", &"m".repeat(64)] {
            assert!(service_name(bad).is_err(), "{bad}");
        }
        for good in ["metrics", "http-2", "h2c"] {
            assert!(port_name(good).is_ok(), "{good}");
        }
        for bad in ["", "8080", "a--b", "-a", "Metrics", "abcdefghijklmnop"] {
            assert!(port_name(bad).is_err(), "{bad}");
        }
        for good in ["/readyz", "/", "/metrics?x=1"] {
            assert!(http_path(good).is_ok(), "{good}");
        }
        for bad in ["", "readyz", "/a b", "/a\nb"] {
            assert!(http_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn label_keys() {
        let good = [
            "k8s.opsani.io/initializer",
            "initializer",
            "a",
            "A_b.c-D",
            "example.com/x",
            &format!(
                "{}/x",
                [
                    "a".repeat(63),
                    "b".repeat(63),
                    "c".repeat(63),
                    "d".repeat(61)
                ]
                .join(".")
            ),
            &"n".repeat(63),
        ];
        for k in good {
            assert_eq!(label_key(k), Ok(()), "{k} should be valid");
        }
        let bad = [
            "",
            "/x",
            "x/",
            "-x",
            "x-",
            "a b",
            "Example.com/x",
            "a/b/c",
            "ex_ample.com/x",
            &"n".repeat(64),
            &format!("{}/x", "a".repeat(254)),
            "k8s.opsani.io/",
            "é",
        ];
        for k in bad {
            assert!(label_key(k).is_err(), "{k:?} should be invalid");
        }
    }

    #[test]
    fn namespaces() {
        assert!(namespace("kube-system").is_ok());
        assert!(namespace("Kube").is_err());
        assert!(namespace("-a").is_err());
        assert!(namespace(&"a".repeat(64)).is_err());
    }

    #[test]
    fn blocker_names() {
        assert!(blocker_name("podimage.example.com").is_ok());
        assert!(blocker_name("kueue.x-k8s.io/admission").is_ok());
        assert!(blocker_name("bad name").is_err());
        assert!(blocker_name("").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("0s"), Ok(Duration::ZERO));
        for bad in ["", "s", "10", "10x", "1.5h", "-1s", "m5"] {
            assert!(duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_have_a_bound_and_are_never_saturated() {
        assert_eq!(duration("87600h"), Ok(MAX_DURATION));
        assert_eq!(duration("87599h60m"), Ok(MAX_DURATION));
        assert_eq!(duration("315360000000ms"), Ok(MAX_DURATION));
        let too_long = Err(DURATION_TOO_LONG.to_string());
        for huge in [
            "87600h1ms",
            "87601h",
            "5256001m",
            "99999999999999999h",
            "18446744073709551615h",
            "18446744073709551616s",
            "99999999999999999999999999h",
            "87600h87600h",
            "18446744073709551615s18446744073709551615s",
        ] {
            assert_eq!(duration(huge), too_long, "{huge:?}");
        }
        // The bound is one any clock can take.
        assert!(
            std::time::Instant::now()
                .checked_add(MAX_DURATION)
                .is_some()
        );
        assert!(
            tokio::time::Instant::now()
                .checked_add(MAX_DURATION)
                .is_some()
        );
        let now = tokio::time::Instant::now();
        assert_eq!(later(now, MAX_DURATION), now + MAX_DURATION);
        assert!(later(now, Duration::MAX) >= now + MAX_DURATION);
        // A malformed value is still told the form, not the bound.
        assert_ne!(duration("99999999999999999x"), too_long);
    }
}
