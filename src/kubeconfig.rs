//! Finding and reading the kubeconfig as kubectl does: `--kubeconfig`, else every file
//! named in `KUBECONFIG` merged in order (missing ones skipped; the first to set a value
//! wins), else `~/.kube/config`, else the in-cluster service account. Relative
//! certificate, key, token-file and exec paths are resolved against the directory of the
//! file that names them (kube's `Kubeconfig::read_from`).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
};

use kube::{
    Config,
    config::{KubeConfigOptions, Kubeconfig},
};

use crate::{Error, Result};

/// Which kubeconfig and context to use, as `--kubeconfig` and `--context` give them.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub path: Option<PathBuf>,
    pub context: Option<String>,
}

/// The kubeconfig files to read, and where their names came from.
fn sources(settings: &Settings) -> (Vec<PathBuf>, &'static str) {
    if let Some(p) = &settings.path {
        return (vec![p.clone()], "--kubeconfig");
    }
    if let Some(v) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        let listed: Vec<PathBuf> = std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        let present: Vec<PathBuf> = listed.iter().filter(|p| p.exists()).cloned().collect();
        // kubectl skips missing files; if none exists, say which were named.
        return if present.is_empty() && !listed.is_empty() {
            (listed, "KUBECONFIG")
        } else {
            (present, "KUBECONFIG")
        };
    }
    let home = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".kube").join("config"))
        .filter(|p| p.exists());
    (home.into_iter().collect(), "~/.kube/config")
}

/// Loads the client configuration.
pub async fn load(settings: &Settings) -> Result<Config> {
    let (paths, source) = sources(settings);
    if paths.is_empty() {
        if settings.context.is_some() {
            return Err(Error::Config(
                "--context was given but there is no kubeconfig: pass --kubeconfig or set KUBECONFIG".into(),
            ));
        }
        return Config::incluster().map_err(|e| {
            Error::Config(format!(
                "no kubeconfig found and not running in a cluster ({e}): pass --kubeconfig PATH, \
                 set KUBECONFIG, or create ~/.kube/config"
            ))
        });
    }
    let mut merged = Kubeconfig::default();
    let mut origins = Origins::default();
    for path in &paths {
        let kc = read(path, source)?;
        origins.note(&kc, path);
        merged = merged.merge(kc).map_err(|e| {
            Error::Config(format!(
                "the kubeconfig {} (from {source}) cannot be merged with the ones before it: {e}",
                path.display()
            ))
        })?;
    }
    let shown = paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    use_context(merged, &shown, settings.context.as_deref(), &origins).await
}

/// Which file each user and cluster came from (the first to name it, as merging keeps).
#[derive(Default)]
struct Origins {
    users: HashMap<String, PathBuf>,
    clusters: HashMap<String, PathBuf>,
}

impl Origins {
    fn note(&mut self, kc: &Kubeconfig, path: &Path) {
        for u in &kc.auth_infos {
            self.users
                .entry(u.name.clone())
                .or_insert_with(|| path.to_path_buf());
        }
        for c in &kc.clusters {
            self.clusters
                .entry(c.name.clone())
                .or_insert_with(|| path.to_path_buf());
        }
    }
}

/// Every file the chosen context's user and cluster name and kube would read, with
/// the kubeconfig field that names it: those it would use (a `*-data` field or a
/// token given inline takes precedence over the file, as in kubectl).
fn file_references(kc: &Kubeconfig, context: &str) -> Vec<(&'static str, String, String, String)> {
    let mut out = Vec::new();
    let Some(ctx) = kc
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
    else {
        return out;
    };
    if let Some(user) = ctx.user.as_deref()
        && let Some(a) = kc
            .auth_infos
            .iter()
            .find(|u| u.name == user)
            .and_then(|u| u.auth_info.as_ref())
    {
        let who = format!("user \"{user}\"");
        if a.client_certificate_data.is_none()
            && let Some(f) = &a.client_certificate
        {
            out.push((
                "client-certificate",
                f.clone(),
                who.clone(),
                user.to_string(),
            ));
        }
        if a.client_key_data.is_none()
            && let Some(f) = &a.client_key
        {
            out.push(("client-key", f.clone(), who.clone(), user.to_string()));
        }
        if a.token.is_none()
            && let Some(f) = &a.token_file
        {
            out.push(("tokenFile", f.clone(), who, user.to_string()));
        }
    }
    if let Some(c) = kc
        .clusters
        .iter()
        .find(|c| c.name == ctx.cluster)
        .and_then(|c| c.cluster.as_ref())
        && c.certificate_authority_data.is_none()
        && let Some(f) = &c.certificate_authority
    {
        out.push((
            "certificate-authority",
            f.clone(),
            format!("cluster \"{}\"", ctx.cluster),
            ctx.cluster.clone(),
        ));
    }
    out
}

/// Reads every file the context needs now, so a missing one is named with the field
/// and the kubeconfig it came from, and the OS error.
fn check_files(kc: &Kubeconfig, context: &str, shown: &str, origins: &Origins) -> Result<()> {
    for (field, file, who, name) in file_references(kc, context) {
        if let Err(e) = std::fs::read(&file) {
            let from = if field == "certificate-authority" {
                origins.clusters.get(&name)
            } else {
                origins.users.get(&name)
            }
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| shown.to_string());
            return Err(Error::Config(format!(
                "cannot read {file}, the {field} of {who} in the kubeconfig {from}: {e}"
            )));
        }
    }
    Ok(())
}

fn read(path: &Path, source: &str) -> Result<Kubeconfig> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Config(format!(
            "cannot read the kubeconfig {shown} (from {source}): {e}"
        ))
    })?;
    if text.trim().is_empty() {
        return Err(Error::Config(format!(
            "the kubeconfig {shown} (from {source}) is empty"
        )));
    }
    Kubeconfig::read_from(path).map_err(|e| {
        Error::Config(format!(
            "the kubeconfig {shown} (from {source}) is not valid: {}",
            crate::failure::chain(&e)
        ))
    })
}

async fn use_context(
    kc: Kubeconfig,
    shown: &str,
    context: Option<&str>,
    origins: &Origins,
) -> Result<Config> {
    let wanted = match context
        .or(kc.current_context.as_deref())
        .filter(|c| !c.is_empty())
    {
        Some(c) => c.to_string(),
        None => {
            return Err(Error::Config(format!(
                "the kubeconfig {shown} has no current-context: pass --context NAME"
            )));
        }
    };
    if !kc.contexts.iter().any(|c| c.name == wanted) {
        let known: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        return Err(Error::Config(format!(
            "context \"{wanted}\" is not in the kubeconfig {shown}; it has: {}",
            if known.is_empty() {
                "no contexts".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    check_files(&kc, &wanted, shown, origins)?;
    let opts = KubeConfigOptions {
        context: Some(wanted),
        cluster: None,
        user: None,
    };
    Config::from_custom_kubeconfig(kc, &opts)
        .await
        .map_err(|e| Error::Config(format!("the kubeconfig {shown} cannot be used: {e}")))
}
