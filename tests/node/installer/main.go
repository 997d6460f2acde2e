// The installer of tests/node.rs: the kind of controller metainit exists for. A mutating
// admission webhook puts a scheduling gate on every new pod of the namespaces it is
// configured for (failurePolicy Ignore), and a controller lifts that gate once it has
// processed a pod (it annotates it). They run as two Deployments; the controller's own pods
// are gated by the webhook like any other, so while no controller runs, nothing lifts the
// gate of the pod that would: the deadlock. Its pod template carries metainit's label key.
//
//	installer webhook      serves /mutate and /healthz over TLS on $ADDR ($CERT, $KEY)
//	installer controller   lifts the gate, every 200 ms; /readyz on $ADDR once it has listed
//	installer guard        a fail-closed webhook of tests/node_story/webhook.rs: /validate
//	                       allows every pod, /mutate annotates it example.com/admitted-by
//	                       with $POD_NAME (so the pod shows which replica the API server
//	                       called), each logged; /healthz; over TLS on $ADDR ($CERT, $KEY)
//
// Only the standard library: the controller talks to the API server with its projected
// token, at $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (the pod sets them to the
// loopback address: nothing here dials outside 127.0.0.0/8).
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

const gate = "example.com/installer"

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: installer webhook|controller|guard")
	}
	switch os.Args[1] {
	case "webhook":
		webhook()
	case "controller":
		controller()
	case "guard":
		guard()
	default:
		log.Fatalf("unknown mode %q", os.Args[1])
	}
}

type review struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Request    *reviewRequest  `json:"request,omitempty"`
	Response   *reviewResponse `json:"response,omitempty"`
}

type reviewRequest struct {
	UID       string `json:"uid"`
	Namespace string `json:"namespace"`
	Object    struct {
		Metadata struct {
			Name        string            `json:"name"`
			Namespace   string            `json:"namespace"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			SchedulingGates []map[string]string `json:"schedulingGates"`
		} `json:"spec"`
	} `json:"object"`
}

type reviewResponse struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType,omitempty"`
	Patch     []byte `json:"patch,omitempty"`
}

func webhook() {
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	http.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) {
		var in review
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		add := []map[string]any{{"op": "add", "path": "/spec/schedulingGates",
			"value": []map[string]string{{"name": gate}}}}
		if len(in.Request.Object.Spec.SchedulingGates) > 0 {
			add = []map[string]any{{"op": "add", "path": "/spec/schedulingGates/-",
				"value": map[string]string{"name": gate}}}
		}
		patch, _ := json.Marshal(add)
		log.Printf("gating pod %s/%s", in.Request.Object.Metadata.Namespace, in.Request.Object.Metadata.Name)
		out := review{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview",
			Response: &reviewResponse{UID: in.Request.UID, Allowed: true, PatchType: "JSONPatch", Patch: patch}}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
	log.Printf("webhook listening on %s", os.Getenv("ADDR"))
	log.Fatal(http.ListenAndServeTLS(os.Getenv("ADDR"), os.Getenv("CERT"), os.Getenv("KEY"), nil))
}

// guard: the webhook whose own pods its configuration intercepts (failurePolicy Fail).
func guard() {
	me := os.Getenv("POD_NAME")
	answer := func(w http.ResponseWriter, r *http.Request, mutate bool) {
		var in review
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		resp := &reviewResponse{UID: in.Request.UID, Allowed: true}
		if mutate {
			// A pod with no annotations has no map to add a key to.
			op := map[string]any{"op": "add", "path": "/metadata/annotations/example.com~1admitted-by", "value": me}
			if in.Request.Object.Metadata.Annotations == nil {
				op = map[string]any{"op": "add", "path": "/metadata/annotations",
					"value": map[string]string{"example.com/admitted-by": me}}
			}
			resp.PatchType = "JSONPatch"
			resp.Patch, _ = json.Marshal([]map[string]any{op})
		}
		log.Printf("%s called for pod %s/%s (mutate %v)", r.URL.Path, in.Request.Namespace,
			in.Request.Object.Metadata.Name, mutate)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(review{APIVersion: "admission.k8s.io/v1",
			Kind: "AdmissionReview", Response: resp})
	}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") })
	http.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) { answer(w, r, false) })
	http.HandleFunc("/mutate", func(w http.ResponseWriter, r *http.Request) { answer(w, r, true) })
	log.Printf("guard %s listening on %s", me, os.Getenv("ADDR"))
	log.Fatal(http.ListenAndServeTLS(os.Getenv("ADDR"), os.Getenv("CERT"), os.Getenv("KEY"), nil))
}

const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"

type api struct {
	client *http.Client
	base   string
}

func (a api) do(method, path string, body []byte, into any) error {
	token, err := os.ReadFile(sa + "token")
	if err != nil {
		return err
	}
	req, err := http.NewRequest(method, a.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+string(token))
	if method == http.MethodPatch {
		req.Header.Set("Content-Type", "application/json-patch+json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
	}
	if into != nil {
		return json.Unmarshal(data, into)
	}
	return nil
}

type podList struct {
	Items []struct {
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			SchedulingGates []map[string]string `json:"schedulingGates"`
		} `json:"spec"`
	} `json:"items"`
}

func controller() {
	ca, err := os.ReadFile(sa + "ca.crt")
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	a := api{
		client: &http.Client{Timeout: 10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
		base: "https://" + os.Getenv("KUBERNETES_SERVICE_HOST") + ":" + os.Getenv("KUBERNETES_SERVICE_PORT"),
	}
	var listed atomic.Bool
	http.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !listed.Load() {
			http.Error(w, "not listed yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	})
	go func() { log.Fatal(http.ListenAndServe(os.Getenv("ADDR"), nil)) }()
	me := os.Getenv("POD_NAME")
	for {
		var pods podList
		if err := a.do(http.MethodGet, "/api/v1/pods?fieldSelector=spec.nodeName%3D", nil, &pods); err != nil {
			log.Print(err)
		} else {
			listed.Store(true)
		}
		for _, p := range pods.Items {
			for i, g := range p.Spec.SchedulingGates {
				if g["name"] != gate {
					continue
				}
				patch := fmt.Sprintf(`[{"op":"test","path":"/spec/schedulingGates/%d/name","value":%q},`+
					`{"op":"remove","path":"/spec/schedulingGates/%d"},`+
					`{"op":"add","path":"/metadata/annotations","value":{"example.com/processed-by":%q}}]`, i, gate, i, me)
				path := "/api/v1/namespaces/" + p.Metadata.Namespace + "/pods/" + p.Metadata.Name
				if err := a.do(http.MethodPatch, path, []byte(patch), nil); err != nil {
					log.Print(err)
				} else {
					log.Printf("processed pod %s/%s", p.Metadata.Namespace, p.Metadata.Name)
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}
