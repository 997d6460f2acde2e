// The kube-double binary: flags, kubeconfig output, control routes, bad values exit 2.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Client, PODS, pod};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_kube-double");

#[test]
fn bad_flag_values_exit_2_with_a_message() {
    for args in [
        vec!["--generation", "ancient"],
        vec!["--listen", "nowhere"],
        vec!["--error-fraction", "2"],
        vec!["--error-codes", "418"],
        vec!["--post-timeout", "soon"],
        vec!["--initializer", "nameonly"],
        vec!["--token", "abc=get"],
        vec!["--error-codes", "410,502"],
        vec!["--error-only", "watch,deletecollection"],
        vec!["--reject-writes", "bad-:403:no"],
        vec!["--reject-writes", ":422:no"],
        vec!["--hang-method", "TRACE", "--hang-count", "1"],
    ] {
        let out = Command::new(BIN).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("invalid value"), "{args:?}: {err}");
    }
}

struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn runs_with_flags_and_control_routes() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = std::env::temp_dir().join(format!("kd-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = dir.join("kubeconfig");
    let _child = Child(
        Command::new(BIN)
            .args([
                "--generation",
                "legacy",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--kubeconfig-out",
                kc.to_str().unwrap(),
                "--initializer",
                "a.example.com=pods",
                "--post-timeout",
                "500ms",
                "--token",
                "root=*",
                "--kubeconfig-token",
                "root",
                "--seed",
                "3",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let c = Client::new(&format!("http://127.0.0.1:{port}"));
    tokio::time::timeout(common::WAIT, async {
        while c
            .try_request("GET", "/_double/requests", None, None, None)
            .await
            .is_err()
            || !kc.exists()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("binary did not start");
    assert!(
        std::fs::read_to_string(&kc)
            .unwrap()
            .contains("token: \"root\"")
    );
    assert_eq!(c.get("/version").await.status, 401);
    let root = c.with_token("root");
    assert_eq!(root.get("/version").await.json()["gitVersion"], "v1.13.12");
    let r = root.post(PODS, pod("a")).await;
    assert_eq!(r.status, 504);
    let objs = c.get("/_double/objects/pods").await.json();
    assert_eq!(
        objs[0]["metadata"]["initializers"]["pending"][0]["name"],
        "a.example.com"
    );
    let reqs = c.get("/_double/requests").await.json();
    assert_eq!(reqs.as_array().unwrap().len(), 3);
    assert_eq!(reqs[2]["status"], 504);
    let hist = c.get("/_double/history/pods/default/a").await.json();
    assert_eq!(hist[0]["kind"], "ADDED");
    let r = c
        .put("/_double/faults", json!({"errorFraction": 2.0}))
        .await;
    assert_eq!(r.status, 400);
    let r = c.put("/_double/faults", json!({"latencyMs": 200})).await;
    assert_eq!(r.status, 200);
    assert_eq!(c.get("/_double/faults").await.json()["latencyMs"], 200);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn failure_mode_flags() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let _child = Child(
        Command::new(BIN)
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--error-codes",
                "410,504",
                "--error-only",
                "watch,list",
                "--reject-writes",
                "bad-:400:no: not now",
                "--hang-method",
                "patch",
                "--hang-count",
                "2",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let c = Client::new(&format!("http://127.0.0.1:{port}"));
    tokio::time::timeout(common::WAIT, async {
        while c
            .try_request("GET", "/_double/faults", None, None, None)
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("binary did not start");
    let f = c.get("/_double/faults").await.json();
    assert_eq!(f["errorCodes"], json!([410, 504]));
    assert_eq!(f["errorOnly"], json!(["watch", "list"]));
    assert_eq!(
        f["rejectWrites"],
        json!({"namePrefix": "bad-", "code": 400, "message": "no: not now"})
    );
    assert_eq!(
        (f["hangMethod"].as_str(), f["hangCount"].as_u64()),
        (Some("PATCH"), Some(2))
    );
}
