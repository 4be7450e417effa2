package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"
)

// These tests hold the Kubernetes example (deploy/kubernetes) to the binary. Every environment
// variable it sets is one the worker reads, and secrets come only from mounted Secret files.
// The readiness probe hits /readyz on HTTP_ADDR's port; the grace period covers the handover.

// pendingEnv are variables the example sets for a feature another change adds to the binary:
// name → what adds it. The test accepts them until the binary reads them, then requires nothing.
var pendingEnv = map[string]string{
	"HTTP_ADDR": "the observability issue's HTTP server (/readyz, /metrics)",
}

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Resources  []string          `yaml:"resources"`
	Spec       struct {
		Replicas *int `yaml:"replicas"`
		Strategy struct {
			Type          string `yaml:"type"`
			RollingUpdate struct {
				MaxSurge       any `yaml:"maxSurge"`
				MaxUnavailable any `yaml:"maxUnavailable"`
			} `yaml:"rollingUpdate"`
		} `yaml:"strategy"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	ServiceAccountName            string      `yaml:"serviceAccountName"`
	TerminationGracePeriodSeconds int         `yaml:"terminationGracePeriodSeconds"`
	Containers                    []container `yaml:"containers"`
	Volumes                       []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type container struct {
	Name    string   `yaml:"name"`
	Args    []string `yaml:"args"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef any `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Env []struct {
		Name      string `yaml:"name"`
		Value     *string
		ValueFrom any `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
	} `yaml:"readinessProbe"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

// loadManifests parses every YAML document under deploy/kubernetes, by file.
func loadManifests(t *testing.T) map[string][]k8sObject {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string][]k8sObject{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var o k8sObject
			if err := dec.Decode(&o); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.Kind == "" || o.APIVersion == "" {
				t.Fatalf("%s: a document without kind or apiVersion", f)
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], o)
		}
	}
	return out
}

func byKind(all map[string][]k8sObject, kind string) []k8sObject {
	var r []k8sObject
	for _, objs := range all {
		for _, o := range objs {
			if o.Kind == kind {
				r = append(r, o)
			}
		}
	}
	return r
}

// binaryEnv is what `worker env` lists: every variable the binary reads.
func binaryEnv(t *testing.T) map[string]bool {
	t.Helper()
	var out, errb bytes.Buffer
	if code := stockRun(context.Background(), []string{"env"}, &out, &errb); code != 0 {
		t.Fatalf("worker env: %d %s", code, errb.String())
	}
	names := map[string]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names[f[0]] = true
		}
	}
	return names
}

// secretEnv are variables whose value is a secret: never set in a manifest.
var secretEnv = []string{"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN", "NATS_PASSWORD"}

// fileEnv are variables naming a file, which must be on a mounted Secret volume.
var fileEnv = []string{"STORAGE_SAS_FILE", "NATS_CREDS", "NATS_NKEY_FILE", "NATS_PASSWORD_FILE", "NATS_TLS_CA", "NATS_TLS_CERT", "NATS_TLS_KEY"}

func TestDeployKubernetes_ManifestsMatchTheBinary(t *testing.T) {
	all := loadManifests(t)
	known := binaryEnv(t)

	deps := byKind(all, "Deployment")
	if len(deps) != 1 {
		t.Fatalf("%d Deployments, want 1", len(deps))
	}
	d := deps[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Errorf("replicas %v: a failover needs at least 2 workers", d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != "RollingUpdate" || ru.MaxUnavailable != 0 || ru.MaxSurge != 1 {
		t.Errorf("strategy %+v: roll one worker at a time (maxSurge 1, maxUnavailable 0)", d.Spec.Strategy)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "run" {
		t.Errorf("args %v: the worker command is run", c.Args)
	}

	// The environment: ConfigMap keys and literal env, all read by the binary.
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef != nil {
			t.Errorf("envFrom secretRef: secrets are mounted as files, never put in the environment")
		}
		if ef.ConfigMapRef == nil {
			continue
		}
		var found bool
		for _, cm := range byKind(all, "ConfigMap") {
			if cm.Metadata.Name == ef.ConfigMapRef.Name {
				found = true
				for k, v := range cm.Data {
					env[k] = v
				}
			}
		}
		if !found {
			t.Errorf("envFrom names ConfigMap %q, not in the manifests", ef.ConfigMapRef.Name)
		}
	}
	for _, e := range c.Env {
		if e.Value != nil {
			env[e.Name] = *e.Value
		} else {
			env[e.Name] = ""
		}
	}
	for name := range env {
		switch {
		case known[name]:
		case pendingEnv[name] != "":
			t.Logf("%s: not read by the binary yet (%s)", name, pendingEnv[name])
		default:
			t.Errorf("%s is set but the worker does not read it (`worker env` lists what it reads)", name)
		}
	}
	for _, s := range secretEnv {
		if _, ok := env[s]; ok {
			t.Errorf("%s is set in the manifests: secrets come from mounted Secret files", s)
		}
	}

	// Files named by the environment are on mounted Secret volumes.
	secretVolumes := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secretVolumes[v.Name] = true
		}
	}
	for _, name := range fileEnv {
		path, ok := env[name]
		if !ok {
			continue
		}
		var mounted bool
		for _, m := range c.VolumeMounts {
			if secretVolumes[m.Name] && strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
				mounted = true
			}
		}
		if !mounted {
			t.Errorf("%s=%s is not on a mounted Secret volume", name, path)
		}
	}
	if env["NATS_USER"] != "" && env["NATS_PASSWORD_FILE"] == "" {
		t.Error("NATS_USER without NATS_PASSWORD_FILE")
	}

	// Readiness: /readyz on the container port that HTTP_ADDR opens.
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Fatalf("readiness probe %+v: want httpGet /readyz", c.ReadinessProbe)
	}
	_, portStr, err := net.SplitHostPort(env["HTTP_ADDR"])
	if err != nil {
		t.Fatalf("HTTP_ADDR %q: %v", env["HTTP_ADDR"], err)
	}
	httpPort, _ := strconv.Atoi(portStr)
	probePort := 0
	for _, p := range c.Ports {
		if p.Name == c.ReadinessProbe.HTTPGet.Port || p.ContainerPort == c.ReadinessProbe.HTTPGet.Port {
			probePort = p.ContainerPort
		}
	}
	if probePort == 0 || probePort != httpPort {
		t.Errorf("readiness probe port %v is container port %d, HTTP_ADDR opens %d", c.ReadinessProbe.HTTPGet.Port, probePort, httpPort)
	}

	// The graceful handover fits in the grace period: in-flight shards (SHARD_TIMEOUT) plus a
	// checkpoint and the lease release.
	shardTimeout, err := time.ParseDuration(env["SHARD_TIMEOUT"])
	if err != nil {
		t.Fatalf("SHARD_TIMEOUT %q: %v", env["SHARD_TIMEOUT"], err)
	}
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; grace < shardTimeout+15*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v: below SHARD_TIMEOUT %v + 15s, a stopping worker may be killed mid-handover", grace, shardTimeout)
	}
	if lease, err := time.ParseDuration(env["LEASE_DURATION"]); err != nil || lease < 15*time.Second || lease > 60*time.Second {
		t.Errorf("LEASE_DURATION %q: 15s to 60s", env["LEASE_DURATION"])
	}
	if r, err := strconv.Atoi(env["STREAM_REPLICAS"]); err != nil || r != 3 {
		t.Errorf("STREAM_REPLICAS %q: the production example runs R3 streams", env["STREAM_REPLICAS"])
	}
	if strings.Count(env["NATS_URL"], ",") < 2 {
		t.Errorf("NATS_URL %q: list the three cluster nodes", env["NATS_URL"])
	}

	// Workload identity: the pod uses the ServiceAccount, which names a client id; no account
	// key or SAS anywhere.
	if d.Spec.Template.Metadata.Labels["azure.workload.identity/use"] != "true" {
		t.Error("pod template lacks the label azure.workload.identity/use: \"true\"")
	}
	var sa bool
	for _, s := range byKind(all, "ServiceAccount") {
		if s.Metadata.Name == pod.ServiceAccountName && s.Metadata.Annotations["azure.workload.identity/client-id"] != "" {
			sa = true
		}
	}
	if !sa {
		t.Errorf("serviceAccountName %q: no ServiceAccount with an azure.workload.identity/client-id annotation", pod.ServiceAccountName)
	}
	if env["STORAGE_ACCOUNT_URL"] == "" {
		t.Error("STORAGE_ACCOUNT_URL unset")
	}

	// Secret templates hold placeholders only.
	for _, s := range byKind(all, "Secret") {
		for k, v := range s.StringData {
			if !strings.Contains(v, "REPLACE-ME") {
				t.Errorf("Secret %s key %s holds a value: ship placeholders, create real Secrets with kubectl", s.Metadata.Name, k)
			}
		}
		if len(s.Data) > 0 {
			t.Errorf("Secret %s has data: ship placeholders only", s.Metadata.Name)
		}
	}
	// The kustomization lists files that exist, and not the Secret template.
	for _, k := range byKind(all, "Kustomization") {
		for _, r := range k.Resources {
			if _, ok := all[r]; !ok {
				t.Errorf("kustomization resource %s: no such manifest", r)
			}
			if r == "secret.yaml" {
				t.Error("kustomization applies the Secret template: real Secrets are created with kubectl")
			}
		}
	}
}
