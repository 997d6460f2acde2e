// Label and field selectors: parsing (with the real server's error wording) and matching.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Exists,
    DoesNotExist,
    Equals,
    NotEquals,
    In,
    NotIn,
    Gt,
    Lt,
}

#[derive(Clone, Debug, PartialEq)]
struct Requirement {
    key: String,
    op: Op,
    values: Vec<String>,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    In,
    NotIn,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
    End,
}

impl Tok {
    fn literal(&self) -> String {
        match self {
            Tok::Ident(s) => s.clone(),
            Tok::Bang => "!".into(),
            Tok::Eq => "=".into(),
            Tok::DoubleEq => "==".into(),
            Tok::NotEq => "!=".into(),
            Tok::In => "in".into(),
            Tok::NotIn => "notin".into(),
            Tok::Gt => ">".into(),
            Tok::Lt => "<".into(),
            Tok::Open => "(".into(),
            Tok::Close => ")".into(),
            Tok::Comma => ",".into(),
            Tok::End => String::new(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '<' | '>') || c.is_whitespace()
}

fn lex(s: &str) -> Vec<Tok> {
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let tok = match (c, next) {
            ('!', Some('=')) => {
                i += 2;
                Tok::NotEq
            }
            ('=', Some('=')) => {
                i += 2;
                Tok::DoubleEq
            }
            ('!', _) => {
                i += 1;
                Tok::Bang
            }
            ('=', _) => {
                i += 1;
                Tok::Eq
            }
            ('(', _) => {
                i += 1;
                Tok::Open
            }
            (')', _) => {
                i += 1;
                Tok::Close
            }
            (',', _) => {
                i += 1;
                Tok::Comma
            }
            ('<', _) => {
                i += 1;
                Tok::Lt
            }
            ('>', _) => {
                i += 1;
                Tok::Gt
            }
            _ => {
                let start = i;
                while i < chars.len() && !is_special(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                }
            }
        };
        out.push(tok);
    }
    out.push(Tok::End);
    out
}

const NAME_FMT: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_FMT: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Validates a label key; returns the detail message of the first problem.
pub fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return Err("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
    }
    if name.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    if !is_name_part(name) {
        return Err(NAME_FMT.into());
    }
    Ok(())
}

fn validate_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    if v.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !is_name_part(v) {
        return Err(VALUE_FMT.into());
    }
    Ok(())
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.toks.get(self.pos).unwrap_or(&Tok::End)
    }
    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }
}

impl LabelSelector {
    pub fn everything() -> LabelSelector {
        LabelSelector::default()
    }

    /// Parses a selector like `a=b,c!=d,e,!f,g in (h,i),j notin (k)`.
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut p = Parser {
            toks: lex(s),
            pos: 0,
        };
        let mut requirements = Vec::new();
        if *p.peek() == Tok::End {
            return Ok(LabelSelector::default());
        }
        loop {
            match p.peek() {
                Tok::Ident(_) | Tok::Bang => {}
                t => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        t.literal()
                    ));
                }
            }
            let r = parse_requirement(&mut p).map_err(|e| {
                if e.starts_with("unable to parse requirement: ") {
                    e
                } else {
                    format!("unable to parse requirement: {e}")
                }
            })?;
            requirements.push(r);
            match p.next() {
                Tok::End => break,
                Tok::Comma => {
                    if *p.peek() == Tok::End {
                        return Err("found '', expected: identifier after ','".into());
                    }
                }
                t => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        t.literal()
                    ));
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| {
            let v = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match r.op {
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
                Op::Equals | Op::In => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::NotEquals | Op::NotIn => !v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                Op::Gt | Op::Lt => {
                    let (Some(have), Some(want)) = (
                        v.and_then(|v| v.parse::<i64>().ok()),
                        r.values.first().and_then(|x| x.parse::<i64>().ok()),
                    ) else {
                        return false;
                    };
                    if r.op == Op::Gt {
                        have > want
                    } else {
                        have < want
                    }
                }
            }
        })
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches_object(&self, obj: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        self.matches(obj.pointer("/metadata/labels").and_then(Value::as_object))
    }
}

/// What a bad operator's message lists in 1.13.12 (apimachinery `parseOperator`); 1.33.4
/// and the real 1.37 list the operators as `binaryOperators` joins them: `modern_message`.
const OPERATORS_1_13: &str = "'=', '!=', '==', 'in', notin'";
const OPERATORS_1_33: &str = "in, notin, =, ==, !=, gt, lt";

/// A selector's parse error as the modern generation words it.
pub fn modern_message(message: String) -> String {
    message.replace(OPERATORS_1_13, OPERATORS_1_33)
}

fn requirement_error(path: &str, value: &str, detail: &str) -> String {
    format!("unable to parse requirement: {path}: Invalid value: \"{value}\": {detail}")
}

fn parse_requirement(p: &mut Parser) -> Result<Requirement, String> {
    let mut op = None;
    if *p.peek() == Tok::Bang {
        p.next();
        op = Some(Op::DoesNotExist);
    }
    let key = match p.next() {
        Tok::Ident(k) => k,
        t => {
            return Err(format!("found '{}', expected: identifier", t.literal()));
        }
    };
    validate_key(&key).map_err(|d| requirement_error("key", &key, &d))?;
    if op == Some(Op::DoesNotExist) {
        return Ok(Requirement {
            key,
            op: Op::DoesNotExist,
            values: vec![],
        });
    }
    let op = match p.peek() {
        Tok::End | Tok::Comma => {
            return Ok(Requirement {
                key,
                op: Op::Exists,
                values: vec![],
            });
        }
        Tok::Eq | Tok::DoubleEq => Op::Equals,
        Tok::NotEq => Op::NotEquals,
        Tok::In => Op::In,
        Tok::NotIn => Op::NotIn,
        Tok::Gt => Op::Gt,
        Tok::Lt => Op::Lt,
        t => {
            return Err(format!(
                "found '{}', expected: {OPERATORS_1_13}",
                t.literal()
            ));
        }
    };
    p.next();
    let values = match op {
        Op::In | Op::NotIn => {
            match p.next() {
                Tok::Open => {}
                t => return Err(format!("found '{}' expected: '('", t.literal())),
            }
            let mut values = Vec::new();
            loop {
                match p.next() {
                    Tok::Ident(v) => {
                        values.push(v);
                        match p.next() {
                            Tok::Comma => continue,
                            Tok::Close => break,
                            t => {
                                return Err(format!(
                                    "found '{}', expected: ',' or ')'",
                                    t.literal()
                                ));
                            }
                        }
                    }
                    Tok::Comma => values.push(String::new()),
                    Tok::Close => {
                        values.push(String::new());
                        break;
                    }
                    t => {
                        return Err(format!(
                            "found '{}', expected: ',', ')' or identifier",
                            t.literal()
                        ));
                    }
                }
            }
            values
        }
        _ => match p.peek().clone() {
            Tok::Ident(v) => {
                p.next();
                vec![v]
            }
            Tok::End | Tok::Comma if matches!(op, Op::Equals | Op::NotEquals) => {
                vec![String::new()]
            }
            t => {
                return Err(format!("found '{}', expected: identifier", t.literal()));
            }
        },
    };
    for (i, v) in values.iter().enumerate() {
        if matches!(op, Op::Gt | Op::Lt) {
            if v.parse::<i64>().is_err() {
                return Err(requirement_error(
                    &format!("values[{i}]"),
                    v,
                    "for 'Gt', 'Lt' operators, the value must be an integer",
                ));
            }
        } else {
            validate_value(v)
                .map_err(|d| requirement_error(&format!("values[{i}][{key}]"), v, &d))?;
        }
    }
    Ok(Requirement { key, op, values })
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value`, comma = AND.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

/// Field selectors the real server supports for every resource.
const COMMON_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];
/// Extra ones supported for pods.
const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

/// Extra ones supported for events (`pkg/registry/core/event/strategy.go`,
/// `ToSelectableFields`); `source` is the source's component, else the reporting controller.
pub const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

impl FieldSelector {
    /// The fields a resource supports beyond the metadata's: `POD_FIELDS` for pods,
    /// `EVENT_FIELDS` for events, none otherwise.
    pub fn fields_of(pods: bool, events: bool) -> &'static [&'static str] {
        match (pods, events) {
            (true, _) => POD_FIELDS,
            (_, true) => EVENT_FIELDS,
            _ => &[],
        }
    }

    pub fn parse(s: &str, pods: bool) -> Result<FieldSelector, String> {
        Self::parse_for(s, Self::fields_of(pods, false))
    }

    pub fn parse_for(s: &str, extra: &[&str]) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector::default());
        }
        for part in s.split(',') {
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            let known = COMMON_FIELDS.contains(&field) || extra.contains(&field);
            if !known {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn matches_object(&self, obj: &Value) -> bool {
        self.terms.iter().all(|(field, eq, want)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let value = match field.as_str() {
                "source" => obj
                    .pointer("/source/component")
                    .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
                    .or_else(|| obj.pointer("/reportingComponent")),
                _ => obj.pointer(&pointer),
            };
            let have = match value {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Null) | None => {
                    if field == "spec.hostNetwork" {
                        "false".into()
                    } else {
                        String::new()
                    }
                }
                Some(v) => v.to_string(),
            };
            (have == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "front", "n": "5"}));
        let yes = [
            "",
            "app=web",
            "app==web",
            "app!=db",
            "missing!=x",
            "app",
            "!missing",
            "app in (web,db)",
            "app notin (db)",
            "missing notin (db)",
            "app=web,tier=front",
            "n>3",
            "n<7",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches_object(&o), "{s}");
        }
        let no = [
            "app=db",
            "app!=web",
            "missing",
            "!app",
            "app in (db)",
            "app notin (web)",
            "app=web,tier=back",
            "n>5",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches_object(&o), "{s}");
        }
    }

    #[test]
    fn label_errors() {
        for s in [
            "a in (b", "=x", "a b", "a=b=c", "a in b", "a,", "!", "a/b/c=d", "a=b c",
        ] {
            assert!(LabelSelector::parse(s).is_err(), "{s}");
        }
        assert_eq!(
            LabelSelector::parse("a=b=c").unwrap_err(),
            "found '=', expected: ',' or 'end of string'"
        );
    }

    #[test]
    fn fields() {
        let o = obj(json!({}));
        let f = FieldSelector::parse("metadata.name=a,metadata.namespace!=x", false).unwrap();
        assert!(f.matches_object(&o));
        let f = FieldSelector::parse("metadata.name==b", false).unwrap();
        assert!(!f.matches_object(&o));
        assert_eq!(
            FieldSelector::parse("spec.foo=a", true).unwrap_err(),
            "field label not supported: spec.foo"
        );
        assert!(FieldSelector::parse("nonsense", false).is_err());
    }
}
