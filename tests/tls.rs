//! metainit over https, as every real cluster serves it: the double behind a TLS front
//! whose certificate a test CA signed (made with the `openssl` command), a kubeconfig
//! that names that CA and a bearer token. The per-object requests (PATCH, Event POST)
//! take metainit's own stack there, not kube's `Client`: this is where that stack meets
//! TLS and authentication.

mod common;

use std::{path::Path, process::Command, sync::Arc, time::Duration};

use common::{Bed, gated_pod, gates, run_to_end};
use kube_double::Config;
use tokio::net::{TcpListener, TcpStream};

const WAIT: Duration = Duration::from_secs(20);

/// A CA, and a certificate for 127.0.0.1 that it signed, in `dir`: `ca.crt`,
/// `server.crt`, `server.key`.
fn certificates(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("the openssl command runs (apt-get install openssl)");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=metainit test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    ]
    .concat());
    run(&[
        &["req"][..],
        &ec,
        &[
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    ]
    .concat());
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ]);
}

/// A TLS front on an ephemeral port that passes every connection on to `upstream`;
/// returns its `https://` URL.
async fn tls_front(dir: &Path, upstream: std::net::SocketAddr) -> String {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(dir.join("server.crt"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(dir.join("server.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let (Ok(mut tls), Ok(mut up)) = (
                    acceptor.accept(tcp).await,
                    TcpStream::connect(upstream).await,
                ) else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
            });
        }
    });
    url
}

/// A labelled pod held by one gate, in `default`.
fn hold(bed: &Bed, name: &str) {
    bed.double
        .create("pods", "default", gated_pod(name, true, &["example.com/a"]))
        .unwrap();
}

/// Waits until the pod's gates are gone from the server.
async fn cleared(bed: &Bed, name: &str, what: &str) {
    common::eventually(what, WAIT, || {
        bed.double
            .get("pods", "default", name)
            .is_some_and(|p| gates(&p).is_empty())
    })
    .await;
}

fn kubeconfig(dir: &Path, server: &str, ca: Option<&Path>) -> String {
    let ca = ca.map_or(String::new(), |p| {
        format!("    certificate-authority: {}\n", p.display())
    });
    let path = dir.join(if ca.is_empty() { "no-ca-kc" } else { "tls-kc" });
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n{ca}\
             users:\n- name: u\n  user:\n    token: user\ncontexts:\n- name: ctx\n  context:\n    cluster: c\n    user: u\n\
             current-context: ctx\n"
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn clears_and_writes_events_over_https_with_a_token() {
    // The token is required: a request without it is answered 401.
    let bed = Bed::as_user(Config::modern(), &["*"]).await;
    certificates(bed.dir.path());
    let url = tls_front(bed.dir.path(), bed.double.addr()).await;
    let kc = kubeconfig(bed.dir.path(), &url, Some(&bed.dir.path().join("ca.crt")));

    hold(&bed, "web");
    let m = common::Metainit::spawn(&[
        "--kubeconfig".into(),
        kc.clone(),
        "--admin-addr".into(),
        "127.0.0.1:0".into(),
        "--node-name".into(),
        "cp-1".into(),
    ]);
    cleared(&bed, "web", "the gate cleared over https").await;
    // A second pod after the first: the connections are reused, not only opened.
    hold(&bed, "api");
    cleared(&bed, "api", "the second gate cleared").await;
    assert!(m.problems().is_empty(), "{:#?}", m.log());
    assert!(m.stop().await.success());
    let events = bed.double.events();
    let mut named: Vec<&str> = events
        .iter()
        .filter(|e| e["reason"] == "SchedulingGatesCleared")
        .filter_map(|e| e["involvedObject"]["name"].as_str())
        .collect();
    named.sort();
    assert_eq!(named, ["api", "web"], "{events:#?}");

    // `--once`, the same way.
    hold(&bed, "job");
    let (code, _, stderr) = run_to_end(&["--kubeconfig", &kc, "--once"], WAIT).await;
    assert_eq!(code, 0, "{stderr}");
    let job = bed.double.get("pods", "default", "job").unwrap();
    assert!(gates(&job).is_empty(), "{job:#?}");
}

#[tokio::test]
async fn a_server_certificate_no_known_ca_signed_is_refused_and_said() {
    let bed = Bed::as_user(Config::modern(), &["*"]).await;
    certificates(bed.dir.path());
    let url = tls_front(bed.dir.path(), bed.double.addr()).await;
    // No certificate-authority: the system's CAs, none of which signed the test CA.
    let kc = kubeconfig(bed.dir.path(), &url, None);
    hold(&bed, "web");
    let (code, _, stderr) = run_to_end(&["--kubeconfig", &kc, "--once"], WAIT).await;
    assert_eq!(code, 2, "{stderr}");
    // The error docs/src/troubleshooting.md quotes, with the verifier's reason.
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer")
            && stderr.contains(
                "check the server URL's scheme and the kubeconfig's certificate-authority"
            ),
        "{stderr}"
    );
    let web = bed.double.get("pods", "default", "web").unwrap();
    assert_eq!(gates(&web), ["example.com/a"], "left as it was");
}
