package deploy

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	k8sjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// What the chart must always produce.
const (
	grpcPort          = 7400
	httpPort          = 7401
	nonrootUID        = 65532
	tlsDir            = "/etc/leasehold/tls"
	databaseURLEnv    = "LEASEHOLD_DATABASE_URL"
	traceFlushTimeout = 5 * time.Second // cmd/leasehold telemetryShutdownTimeout (traces and metrics)
	hookPhases        = "pre-install,pre-upgrade"
)

// manifestsFile is the committed default render (make manifests).
var manifestsFile = filepath.Join("kubernetes", "leasehold.yaml")

// fullValues turns every optional part on: TLS, mTLS, a chart-created
// database Secret, the ServiceMonitor and the HPA.
var fullValues = filepath.Join("helm", "leasehold", "ci", "full-values.yaml")

// render runs deploy/render.sh (the script make manifests uses) with extra
// helm template arguments.
func render(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := runRender(args...)
	if err != nil {
		t.Fatalf("render.sh %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func runRender(args ...string) ([]byte, error) {
	cmd := exec.Command("./render.sh", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// serviceMonitor is the part of the Prometheus Operator's
// monitoring.coreos.com/v1 ServiceMonitor that the chart may use. It has no
// type in k8s.io/api; decoding into it strictly catches a misspelled or
// misplaced field all the same (the field names are the CRD's).
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		JobLabel  string `json:"jobLabel,omitempty"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			HonorLabels   bool   `json:"honorLabels,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kinds maps each apiVersion/kind the chart may render to the type it must
// decode into. Anything else is an error.
var kinds = map[string]func() metav1.Object{
	"apps/v1/Deployment":                       func() metav1.Object { return &appsv1.Deployment{} },
	"v1/Service":                               func() metav1.Object { return &corev1.Service{} },
	"v1/ServiceAccount":                        func() metav1.Object { return &corev1.ServiceAccount{} },
	"v1/Secret":                                func() metav1.Object { return &corev1.Secret{} },
	"policy/v1/PodDisruptionBudget":            func() metav1.Object { return &policyv1.PodDisruptionBudget{} },
	"batch/v1/Job":                             func() metav1.Object { return &batchv1.Job{} },
	"autoscaling/v2/HorizontalPodAutoscaler":   func() metav1.Object { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"monitoring.coreos.com/v1/ServiceMonitor":  func() metav1.Object { return &serviceMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule":  func() metav1.Object { return &prometheusRule{} },
	"rbac.authorization.k8s.io/v1/Role":        func() metav1.Object { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() metav1.Object { return &rbacv1.RoleBinding{} },
	"networking.k8s.io/v1/NetworkPolicy":       func() metav1.Object { return &networkingv1.NetworkPolicy{} },
	"v1/Pod":                                   func() metav1.Object { return &corev1.Pod{} },
}

// prometheusRule is the part of the Prometheus Operator's
// monitoring.coreos.com/v1 PrometheusRule the chart uses, decoded strictly
// like serviceMonitor.
type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ruleFile `json:"spec"`
}

// ruleFile is a Prometheus rules file (and a PrometheusRule's spec).
type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Record      string            `json:"record,omitempty"`
			Alert       string            `json:"alert,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

// rendered is one render, decoded strictly.
type rendered struct {
	deployment     *appsv1.Deployment
	service        *corev1.Service
	serviceAccount *corev1.ServiceAccount // the coordinator's
	pdb            *policyv1.PodDisruptionBudget
	job            *batchv1.Job // the migration Job
	secrets        []*corev1.Secret
	hpa            *autoscalingv2.HorizontalPodAutoscaler
	serviceMonitor *serviceMonitor
	prometheusRule *prometheusRule
	networkPolicy  *networkingv1.NetworkPolicy

	// The bootstrap Job and the objects that exist for it.
	bootstrapJob            *batchv1.Job
	bootstrapServiceAccount *corev1.ServiceAccount
	bootstrapRole           *rbacv1.Role
	bootstrapRoleBinding    *rbacv1.RoleBinding
	testPod                 *corev1.Pod // helm test

	all []metav1.Object
}

// decode splits a multi-document YAML stream and decodes every object
// strictly into its k8s.io/api type: duplicate keys, unknown fields, fields
// whose case is wrong and values of the wrong type all fail.
func decode(t *testing.T, stream []byte) *rendered {
	t.Helper()
	var r rendered
	for i, doc := range splitYAML(stream) {
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		var tm metav1.TypeMeta
		if err := k8sjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		key := tm.APIVersion + "/" + tm.Kind
		newObj, ok := kinds[key]
		if !ok {
			t.Fatalf("document %d: unexpected object %s; add it to kinds in this test", i, key)
		}
		obj := newObj()
		strict, err := k8sjson.UnmarshalStrict(js, obj)
		if err != nil {
			t.Fatalf("%s %d: %v", key, i, err)
		}
		if len(strict) > 0 {
			t.Errorf("%s %q does not decode strictly:", key, obj.GetName())
			for _, e := range strict {
				t.Errorf("  %v", e)
			}
			continue
		}
		r.all = append(r.all, obj)
		switch o := obj.(type) {
		case *appsv1.Deployment:
			setOnce(t, &r.deployment, o)
		case *corev1.Service:
			setOnce(t, &r.service, o)
		case *corev1.ServiceAccount:
			if component(o) == "bootstrap" {
				setOnce(t, &r.bootstrapServiceAccount, o)
			} else {
				setOnce(t, &r.serviceAccount, o)
			}
		case *policyv1.PodDisruptionBudget:
			setOnce(t, &r.pdb, o)
		case *batchv1.Job:
			switch component(o) {
			case "migration":
				setOnce(t, &r.job, o)
			case "bootstrap":
				setOnce(t, &r.bootstrapJob, o)
			default:
				t.Fatalf("Job %q of component %q", o.Name, component(o))
			}
		case *rbacv1.Role:
			setOnce(t, &r.bootstrapRole, o)
		case *rbacv1.RoleBinding:
			setOnce(t, &r.bootstrapRoleBinding, o)
		case *corev1.Pod:
			setOnce(t, &r.testPod, o)
		case *networkingv1.NetworkPolicy:
			setOnce(t, &r.networkPolicy, o)
		case *prometheusRule:
			setOnce(t, &r.prometheusRule, o)
		case *corev1.Secret:
			r.secrets = append(r.secrets, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			setOnce(t, &r.hpa, o)
		case *serviceMonitor:
			setOnce(t, &r.serviceMonitor, o)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return &r
}

// component is an object's app.kubernetes.io/component label.
func component(o metav1.Object) string { return o.GetLabels()["app.kubernetes.io/component"] }

func setOnce[T any](t *testing.T, dst **T, v *T) {
	t.Helper()
	if *dst != nil {
		t.Fatalf("two objects of type %T rendered; expected one", v)
	}
	*dst = v
}

// splitYAML splits a YAML stream on document separators and drops
// documents that hold only comments.
func splitYAML(stream []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	flush := func() {
		content := false
		for line := range strings.Lines(cur.String()) {
			if s := strings.TrimSpace(line); s != "" && !strings.HasPrefix(s, "#") {
				content = true
				break
			}
		}
		if content {
			docs = append(docs, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	for line := range strings.Lines(string(stream)) {
		if strings.TrimRight(line, " \r\n") == "---" {
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return docs
}

// TestDefaultRender checks the render of the default values, strictly
// decoded, against the chart's invariants.
func TestDefaultRender(t *testing.T) {
	r := decode(t, render(t))
	checkCommon(t, r, expect{replicas: 2})
	if r.hpa != nil || r.serviceMonitor != nil {
		t.Error("HPA and ServiceMonitor are off by default but rendered")
	}
	if len(r.secrets) != 0 {
		t.Errorf("the default render creates %d Secrets; it must use the existing database Secret", len(r.secrets))
	}
	c := coordinatorContainer(t, r.deployment)
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--tls") {
			t.Errorf("TLS is off by default but args have %s", a)
		}
	}
}

// TestFullRender turns on TLS, mTLS, a chart-created database Secret, the
// ServiceMonitor and the HPA.
func TestFullRender(t *testing.T) {
	r := decode(t, render(t, "-f", fullValues))
	checkCommon(t, r, expect{tls: true, mtls: true, autoscaled: true})

	if r.serviceMonitor == nil {
		t.Fatal("no ServiceMonitor rendered")
	}
	sm := r.serviceMonitor
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints = %+v, want port http, path /metrics", sm.Spec.Endpoints)
	}
	if !selects(sm.Spec.Selector.MatchLabels, r.service.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select the Service (labels %v)", sm.Spec.Selector.MatchLabels, r.service.Labels)
	}
	if sm.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor lacks metrics.serviceMonitor.labels: %v", sm.Labels)
	}

	if r.hpa == nil {
		t.Fatal("no HorizontalPodAutoscaler rendered")
	}
	ref := r.hpa.Spec.ScaleTargetRef
	if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || ref.Name != r.deployment.Name {
		t.Errorf("HPA targets %+v, want the Deployment %q", ref, r.deployment.Name)
	}
	if r.hpa.Spec.MinReplicas == nil || *r.hpa.Spec.MinReplicas < 2 {
		t.Errorf("HPA minReplicas = %v, want at least 2 (the PDB keeps 1)", r.hpa.Spec.MinReplicas)
	}

	// The chart-created database Secret exists before the migration Job
	// (both are hooks; the Secret's weight is lower).
	if len(r.secrets) != 1 {
		t.Fatalf("rendered %d Secrets, want the chart-created database Secret", len(r.secrets))
	}
	s := r.secrets[0]
	ref2 := envSecretRef(t, coordinatorContainer(t, r.deployment).Env)
	if s.Name != ref2.Name {
		t.Errorf("the coordinator reads Secret %q, the chart created %q", ref2.Name, s.Name)
	}
	if _, ok := s.Data[ref2.Key]; !ok {
		t.Errorf("Secret %q has no key %q", s.Name, ref2.Key)
	}
	if s.Annotations["helm.sh/hook"] != hookPhases {
		t.Errorf("database Secret hook = %q, want %q (the migration Job needs it before install)", s.Annotations["helm.sh/hook"], hookPhases)
	}
	if hookWeight(t, s) >= hookWeight(t, r.job) {
		t.Errorf("database Secret hook weight %d must be below the migration Job's %d", hookWeight(t, s), hookWeight(t, r.job))
	}
}

// TestCommittedManifestsMatchDefaultRender keeps deploy/kubernetes in sync
// with the chart.
func TestCommittedManifestsMatchDefaultRender(t *testing.T) {
	want := render(t, "--skip-tests") // as make manifests renders it
	got, err := os.ReadFile(manifestsFile)
	if err != nil {
		t.Fatalf("%v (run make manifests)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("deploy/%s differs from the chart's default render: run make manifests and commit the result\n%s",
			manifestsFile, firstDifference(got, want))
	}
}

// TestBadValuesFail checks that the chart refuses values that cannot work,
// instead of rendering something broken.
func TestBadValuesFail(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  string
		want string
	}{
		{"TLS without a Secret", "tls.enabled=true", "tls.secretName is required"},
		{"mTLS without TLS", "tls.clientCA.enabled=true", "needs tls.enabled"},
		{"misspelled key", "replicaCont=3", "replicaCont"},
		{"no database", "database.existingSecret=", "database.existingSecret"},
		{"bad log level", "logLevel=verbose", "logLevel"},
		{"bad grace", "shutdownGrace=10", "shutdownGrace"},
		{"gRPC probes on a TLS port", "tls.enabled=true,tls.secretName=s,probes.type=grpc", "probes.type grpc"},
		{"unknown probe type", "probes.type=tcp", "probes"},
		// Each of these rendered a pod that crash-loops or a PDB that
		// blocks drains.
		{"auth none without the insecure opt-in", "auth.mode=none", "auth.insecureAllowUnauthenticated=true"},
		{"auth mtls without TLS", "auth.mode=mtls", "auth.mode mtls needs client certificates"},
		{"auth mtls without a client CA", "auth.mode=mtls,tls.enabled=true,tls.secretName=s", "tls.clientCA.enabled=true"},
		{"unknown auth mode", "auth.mode=basic", "/auth/mode"},
		{"the insecure opt-in with api-key", "auth.insecureAllowUnauthenticated=true", "applies to auth.mode none only"},
		{"a termination grace shorter than the shutdown", "shutdownGrace=60s,terminationGracePeriodSeconds=60", "does not cover the shutdown"},
		{"a grace in a unit the chart cannot add up", "shutdownGrace=1500ms", "shutdownGrace"},
		{"a PDB that keeps every replica", "podDisruptionBudget.minAvailable=2", "would block every node drain"},
		{"a PDB of 100%", "podDisruptionBudget.minAvailable=100%", "would block every node drain"},
		// settings passes serve flags as LEASEHOLD_* variables: a typo would
		// be ignored, and a flag the chart passes would lose to it silently.
		{"a setting that is no serve flag", "settings.max-paylod-bytes=1", "no flag --max-paylod-bytes"},
		{"a setting the chart passes itself", "settings.auth=none", "the chart sets --auth itself"},
		{"a retention the flag cannot parse", "retention=7d", "/retention"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runRender("--set", tc.set)
			if err == nil {
				t.Fatalf("--set %s rendered without error:\n%s", tc.set, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--set %s: error %q does not mention %q", tc.set, err, tc.want)
			}
		})
	}
}

// TestValueCombinations renders each values file of the chart's ci/
// folder (helm lint runs them too) and checks the chart's invariants on
// each.
func TestValueCombinations(t *testing.T) {
	cases := map[string]expect{
		"full-values.yaml":           {tls: true, mtls: true, autoscaled: true},
		"single-replica-values.yaml": {replicas: 1, noPDB: true},
		"auth-none-values.yaml":      {replicas: 2, auth: "none"},
		"mtls-values.yaml":           {replicas: 2, tls: true, mtls: true, auth: "mtls"},
	}
	files, err := filepath.Glob(filepath.Join("helm", "leasehold", "ci", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		want, ok := cases[filepath.Base(f)]
		if !ok {
			t.Errorf("%s: add its expectations to TestValueCombinations", f)
			continue
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := decode(t, render(t, "-f", f))
			checkCommon(t, r, want)
		})
	}
}

// TestShutdownGraceDrivesTermination: a longer shutdownGrace lengthens
// the pod's termination grace period (it rendered 45s for a 60s grace).
func TestShutdownGraceDrivesTermination(t *testing.T) {
	for grace, want := range map[string]int64{"10s": 45, "60s": 145, "1m30s": 205, "2m": 265} {
		r := decode(t, render(t, "--set", "shutdownGrace="+grace))
		checkCommon(t, r, expect{replicas: 2})
		if got := *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; got != want {
			t.Errorf("shutdownGrace %s: terminationGracePeriodSeconds %d, want %d (5s preStop + 2 x grace + 5s flush + 15s)", grace, got, want)
		}
	}
	r := decode(t, render(t, "--set", "shutdownGrace=60s,terminationGracePeriodSeconds=600"))
	if got := *r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds; got != 600 {
		t.Errorf("terminationGracePeriodSeconds set to 600 rendered %d", got)
	}
}

// TestOneReplicaDoesNotBlockDrains: with one replica there is no PDB,
// which would forbid evicting the only pod.
func TestOneReplicaDoesNotBlockDrains(t *testing.T) {
	for _, set := range []string{"replicaCount=1", "autoscaling.enabled=true,autoscaling.minReplicas=1"} {
		r := decode(t, render(t, "--set", set))
		if r.pdb != nil {
			t.Errorf("--set %s renders a PodDisruptionBudget with minAvailable %v: it blocks every node drain", set, r.pdb.Spec.MinAvailable)
		}
	}
}

// TestConnectionsAgeOutByDefault: serve gets --max-connection-age (and
// its grace) by default, so worker streams spread over new replicas; ""
// turns it off.
func TestConnectionsAgeOutByDefault(t *testing.T) {
	c := coordinatorContainer(t, decode(t, render(t)).deployment)
	if got := flagValue(c.Args, "--max-connection-age"); got != "30m" {
		t.Errorf("--max-connection-age %q, want 30m by default", got)
	}
	if got := flagValue(c.Args, "--max-connection-age-grace"); got != "30s" {
		t.Errorf("--max-connection-age-grace %q, want 30s", got)
	}
	c = coordinatorContainer(t, decode(t, render(t, "--set", "maxConnectionAge=")).deployment)
	if slices.Contains(c.Args, "--max-connection-age") {
		t.Errorf("maxConnectionAge empty still passes --max-connection-age: %q", c.Args)
	}
}

// TestRetentionAndSettings: retention and the idempotency window are
// serve flags with the coordinator's defaults, and settings become the
// flags' LEASEHOLD_* variables.
func TestRetentionAndSettings(t *testing.T) {
	c := coordinatorContainer(t, decode(t, render(t)).deployment)
	if r, w := flagValue(c.Args, "--retention"), flagValue(c.Args, "--idempotency-window"); r != "168h" || w != "24h" {
		t.Errorf("--retention %q, --idempotency-window %q; want 168h and 24h by default", r, w)
	}
	c = coordinatorContainer(t, decode(t, render(t, "--set", "retention=720h,settings.unary-rate=500,settings.pprof=true")).deployment)
	if r := flagValue(c.Args, "--retention"); r != "720h" {
		t.Errorf("--retention %q, want 720h", r)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env["LEASEHOLD_UNARY_RATE"] != "500" || env["LEASEHOLD_PPROF"] != "true" {
		t.Errorf("settings rendered as env %v, want LEASEHOLD_UNARY_RATE=500 and LEASEHOLD_PPROF=true", env)
	}
}

// TestFullRenderExtras checks the optional parts of full-values.yaml that
// checkCommon does not: envFrom, the extra container and volume, the Job
// pod annotations, the NetworkPolicy and the PrometheusRule.
func TestFullRenderExtras(t *testing.T) {
	r := decode(t, render(t, "-f", fullValues))
	pod := r.deployment.Spec.Template.Spec
	c := coordinatorContainer(t, r.deployment)
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "leasehold-env" {
		t.Errorf("envFrom = %+v", c.EnvFrom)
	}
	if len(pod.Containers) != 2 || pod.Containers[1].Name != "cloud-sql-proxy" {
		t.Errorf("extraContainers: containers %d", len(pod.Containers))
	}
	if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == "cloudsql" }) ||
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "cloudsql" }) {
		t.Error("extraVolumes/extraVolumeMounts not rendered")
	}
	for what, ann := range map[string]map[string]string{
		"migration": r.job.Spec.Template.Annotations, "bootstrap": r.bootstrapJob.Spec.Template.Annotations,
		"test": r.testPod.Annotations,
	} {
		if ann["sidecar.istio.io/inject"] != "false" {
			t.Errorf("%s pod annotations %v lack the values' sidecar.istio.io/inject", what, ann)
		}
	}

	np := r.networkPolicy
	if np == nil {
		t.Fatal("no NetworkPolicy rendered")
	}
	if !selects(np.Spec.PodSelector.MatchLabels, r.deployment.Spec.Template.Labels) || selects(np.Spec.PodSelector.MatchLabels, r.job.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy selects %v: want the coordinator pods only", np.Spec.PodSelector.MatchLabels)
	}
	ports := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			ports[p.Port.String()] = rule.From
		}
	}
	grpcPeers := ports["grpc"]
	if len(ports) != 2 || len(ports["http"]) != 1 || len(grpcPeers) != 2 || grpcPeers[0].NamespaceSelector == nil {
		t.Errorf("NetworkPolicy ingress %v, want grpc from the values' peer and the test pod, http from the values' peer", ports)
	} else if sel := grpcPeers[1].PodSelector; sel == nil || !selects(sel.MatchLabels, r.testPod.Labels) {
		t.Errorf("NetworkPolicy's second gRPC peer %+v does not let the helm test pod in (labels %v)", grpcPeers[1], r.testPod.Labels)
	}

	if r.prometheusRule == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	if r.prometheusRule.Labels["release"] != "prometheus" {
		t.Errorf("PrometheusRule lacks metrics.prometheusRule.labels: %v", r.prometheusRule.Labels)
	}
	file := readRules(t, filepath.Join("prometheus", "leasehold-rules.yaml"))
	if !reflect.DeepEqual(r.prometheusRule.Spec, file) {
		t.Errorf("the chart's PrometheusRule differs from deploy/prometheus/leasehold-rules.yaml: copy the file to helm/leasehold/files/")
	}
	alerts := map[string]bool{}
	for _, g := range file.Groups {
		for _, rule := range g.Rules {
			alerts[rule.Alert] = true
		}
	}
	for _, a := range []string{"LeaseholdQueueLagHigh", "LeaseholdDeadLettersGrowing", "LeaseholdBreakerOpen", "LeaseholdNoWorkers"} {
		if !alerts[a] {
			t.Errorf("no alert %s in the rules", a)
		}
	}
}

// readRules decodes a Prometheus rules file strictly.
func readRules(t *testing.T, path string) ruleFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSONStrict(b)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	strict, err := k8sjson.UnmarshalStrict(js, &f)
	if err != nil || len(strict) > 0 {
		t.Fatalf("%s: %v %v", path, err, strict)
	}
	return f
}

type expect struct {
	replicas   int32 // when not autoscaled
	tls, mtls  bool
	autoscaled bool
	auth       string // serve --auth; "" means api-key
	noPDB      bool   // one replica: no PodDisruptionBudget
}

// checkCommon checks what holds for every render.
func checkCommon(t *testing.T, r *rendered, want expect) {
	for name, present := range map[string]bool{
		"Deployment": r.deployment != nil, "Service": r.service != nil, "ServiceAccount": r.serviceAccount != nil,
		"migration Job": r.job != nil,
	} {
		if !present {
			t.Fatalf("no %s rendered", name)
		}
	}
	for _, o := range r.all {
		checkMeta(t, o)
	}

	d := r.deployment
	podLabels := d.Spec.Template.Labels
	if !selects(d.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("Deployment selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, podLabels)
	}
	if want.autoscaled {
		if d.Spec.Replicas != nil {
			t.Errorf("autoscaled, yet the Deployment sets replicas %d (it would fight the HPA)", *d.Spec.Replicas)
		}
	} else if d.Spec.Replicas == nil || *d.Spec.Replicas != want.replicas {
		t.Errorf("replicas = %v, want %d", d.Spec.Replicas, want.replicas)
	}

	pod := d.Spec.Template.Spec
	checkPodSecurity(t, "Deployment", &pod)
	c := coordinatorContainer(t, d)

	// Ports.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["grpc"] != grpcPort || ports["http"] != httpPort {
		t.Errorf("container ports = %v, want grpc %d and http %d", ports, grpcPort, httpPort)
	}

	// Probes: without TLS, native gRPC on the gRPC port with the health
	// service names; with TLS, httpGet on the plaintext HTTP port, since
	// the kubelet's gRPC probe cannot do TLS or mTLS.
	if want.tls {
		checkHTTPProbe(t, "liveness", c.LivenessProbe, "/healthz")
		checkHTTPProbe(t, "readiness", c.ReadinessProbe, "/readyz")
		if c.StartupProbe != nil {
			checkHTTPProbe(t, "startup", c.StartupProbe, "/healthz")
		}
	} else {
		checkGRPCProbe(t, "liveness", c.LivenessProbe, "liveness")
		checkGRPCProbe(t, "readiness", c.ReadinessProbe, "readiness")
		if c.StartupProbe != nil {
			checkGRPCProbe(t, "startup", c.StartupProbe, "liveness")
		}
	}

	// Arguments.
	args := c.Args
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("args = %q, want serve first", args)
	}
	for flag, value := range map[string]string{
		"--listen":      fmt.Sprintf("0.0.0.0:%d", grpcPort),
		"--http-listen": fmt.Sprintf("0.0.0.0:%d", httpPort),
		"--log-format":  "json",
		"--auth":        cmp.Or(want.auth, "api-key"),
	} {
		if got := flagValue(args, flag); got != value {
			t.Errorf("serve %s = %q, want %q (args %q)", flag, got, value, args)
		}
	}
	if !slices.Contains(args, "--no-migrate") {
		t.Errorf("serve lacks --no-migrate (the migration Job migrates): %q", args)
	}
	tlsFlags := map[string]string{
		"--tls-cert-file": tlsDir + "/tls.crt",
		"--tls-key-file":  tlsDir + "/tls.key",
	}
	if want.mtls {
		tlsFlags["--tls-client-ca-file"] = tlsDir + "/ca.crt"
	}
	if want.tls {
		for flag, value := range tlsFlags {
			if got := flagValue(args, flag); got != value {
				t.Errorf("serve %s = %q, want %q", flag, got, value)
			}
		}
		checkTLSVolume(t, &pod, c, want.mtls)
	}

	// Shutdown: preStop sleep + two grace periods + the trace flush fit in
	// terminationGracePeriodSeconds.
	grace, err := time.ParseDuration(flagValue(args, "--shutdown-grace"))
	if err != nil {
		t.Fatalf("serve --shutdown-grace: %v (args %q)", err, args)
	}
	var preStop time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Error("no native preStop sleep (the image has no shell, so it must be lifecycle.preStop.sleep)")
	} else {
		ps := c.Lifecycle.PreStop
		if ps.Exec != nil || ps.HTTPGet != nil || ps.TCPSocket != nil {
			t.Errorf("preStop has more than a sleep: %+v", ps)
		}
		preStop = time.Duration(ps.Sleep.Seconds) * time.Second
	}
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("terminationGracePeriodSeconds not set")
	}
	tgps := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	if need := preStop + 2*grace + traceFlushTimeout; tgps <= need {
		t.Errorf("terminationGracePeriodSeconds %v must exceed preStop %v + 2 x grace %v + flush %v = %v", tgps, preStop, grace, traceFlushTimeout, need)
	}
	if tgps <= 2*grace {
		t.Errorf("terminationGracePeriodSeconds %v must exceed 2 x --shutdown-grace %v", tgps, grace)
	}

	// Resources.
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[name]; !ok {
			t.Errorf("no %s request", name)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		t.Error("no memory limit")
	}

	// The database URL comes from a Secret, in both the coordinator and the
	// migration Job.
	dbRef := envSecretRef(t, c.Env)

	// ServiceAccount: never a token.
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("Deployment pods mount a service account token")
	}
	if a := r.serviceAccount.AutomountServiceAccountToken; a == nil || *a {
		t.Error("ServiceAccount automountServiceAccountToken is not false")
	}
	if pod.ServiceAccountName != r.serviceAccount.Name {
		t.Errorf("pods run as %q, the chart's ServiceAccount is %q", pod.ServiceAccountName, r.serviceAccount.Name)
	}

	// Service.
	svcPorts := map[string]corev1.ServicePort{}
	for _, p := range r.service.Spec.Ports {
		svcPorts[p.Name] = p
	}
	for name, wp := range map[string]struct {
		port  int32
		proto string
	}{"grpc": {grpcPort, "grpc"}, "http": {httpPort, "http"}} {
		p, ok := svcPorts[name]
		if !ok {
			t.Errorf("Service has no %s port", name)
			continue
		}
		if p.Port != wp.port || p.TargetPort.String() != name || p.AppProtocol == nil || *p.AppProtocol != wp.proto {
			t.Errorf("Service port %s = %+v, want port %d, targetPort %s, appProtocol %s", name, p, wp.port, name, wp.proto)
		}
	}
	if !selects(r.service.Spec.Selector, podLabels) {
		t.Errorf("Service selector %v does not select the pods %v", r.service.Spec.Selector, podLabels)
	}

	// PodDisruptionBudget: none with one replica (it could only block
	// drains), else one that leaves a pod to evict.
	var pdbSelector map[string]string
	switch {
	case want.noPDB:
		if r.pdb != nil {
			t.Errorf("one replica, yet a PodDisruptionBudget (minAvailable %v) blocks every node drain", r.pdb.Spec.MinAvailable)
		}
	case r.pdb == nil:
		t.Error("no PodDisruptionBudget rendered")
	default:
		if r.pdb.Spec.MinAvailable == nil || r.pdb.Spec.MinAvailable.String() != "1" {
			t.Errorf("PDB minAvailable = %v, want 1", r.pdb.Spec.MinAvailable)
		}
		if !selects(r.pdb.Spec.Selector.MatchLabels, podLabels) {
			t.Errorf("PDB selector %v does not select the pods %v", r.pdb.Spec.Selector.MatchLabels, podLabels)
		}
		pdbSelector = r.pdb.Spec.Selector.MatchLabels
	}

	// Migration Job.
	j := r.job
	if j.Annotations["helm.sh/hook"] != hookPhases {
		t.Errorf("migration Job hook = %q, want %q", j.Annotations["helm.sh/hook"], hookPhases)
	}
	jpod := j.Spec.Template.Spec
	checkPodSecurity(t, "migration Job", &jpod)
	if len(jpod.Containers) != 1 {
		t.Fatalf("migration Job has %d containers, want 1", len(jpod.Containers))
	}
	jc := jpod.Containers[0]
	if !slices.Equal(jc.Args, []string{"migrate"}) {
		t.Errorf("migration Job args = %q, want [migrate]", jc.Args)
	}
	if jc.Image != c.Image {
		t.Errorf("migration Job image %q differs from the coordinator's %q", jc.Image, c.Image)
	}
	if jpod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("migration Job restartPolicy = %q, want Never", jpod.RestartPolicy)
	}
	if got := envSecretRef(t, jc.Env); got.Name != dbRef.Name || got.Key != dbRef.Key {
		t.Errorf("migration Job reads %s/%s, the coordinator %s/%s", got.Name, got.Key, dbRef.Name, dbRef.Key)
	}
	// The migration pods must not look like coordinators: the Service would
	// route calls to them, and the PDB and Deployment would count them.
	jobLabels := j.Spec.Template.Labels
	for what, sel := range map[string]map[string]string{
		"Service": r.service.Spec.Selector, "PodDisruptionBudget": pdbSelector,
		"Deployment": d.Spec.Selector.MatchLabels,
	} {
		if selects(sel, jobLabels) {
			t.Errorf("the %s selector %v also selects the migration pods %v", what, sel, jobLabels)
		}
	}
	if jpod.AutomountServiceAccountToken == nil || *jpod.AutomountServiceAccountToken {
		t.Error("migration pods mount a service account token")
	}

	apiKey := cmp.Or(want.auth, "api-key") == "api-key"
	checkBootstrap(t, r, apiKey, dbRef)
	checkTestPod(t, r, apiKey, want.tls)
}

// checkBootstrap checks the bootstrap Job of auth.mode api-key: a
// post-install/post-upgrade hook that runs key create --kubernetes-secret
// with a service account allowed to read that one Secret and to create
// Secrets, and nothing more; no bootstrap objects in the other modes.
func checkBootstrap(t *testing.T, r *rendered, want bool, dbRef *corev1.SecretKeySelector) {
	t.Helper()
	if !want {
		if r.bootstrapJob != nil || r.bootstrapRole != nil || r.bootstrapRoleBinding != nil || r.bootstrapServiceAccount != nil {
			t.Error("bootstrap objects rendered without auth.mode api-key")
		}
		return
	}
	j, sa, role, rb := r.bootstrapJob, r.bootstrapServiceAccount, r.bootstrapRole, r.bootstrapRoleBinding
	if j == nil || sa == nil || role == nil || rb == nil {
		t.Fatalf("bootstrap: Job %v, ServiceAccount %v, Role %v, RoleBinding %v: want all four", j != nil, sa != nil, role != nil, rb != nil)
	}
	const phases = "post-install,post-upgrade"
	for _, o := range []metav1.Object{j, sa, role, rb} {
		if got := o.GetAnnotations()["helm.sh/hook"]; got != phases {
			t.Errorf("%T %q: hook %q, want %q (after the migration, on every upgrade)", o, o.GetName(), got, phases)
		}
	}
	for _, o := range []metav1.Object{sa, role, rb} {
		if hookWeight(t, o) >= hookWeight(t, j) {
			t.Errorf("%T %q: hook weight %d must be below the Job's %d", o, o.GetName(), hookWeight(t, o), hookWeight(t, j))
		}
		if !strings.Contains(o.GetAnnotations()["helm.sh/hook-delete-policy"], "hook-succeeded") {
			t.Errorf("%T %q outlives the hook: its delete policy lacks hook-succeeded", o, o.GetName())
		}
	}
	pod := j.Spec.Template.Spec
	checkPodSecurity(t, "bootstrap Job", &pod)
	if pod.ServiceAccountName != sa.Name || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("bootstrap pod runs as %q (token mounted: %v), want %q with its token", pod.ServiceAccountName, pod.AutomountServiceAccountToken, sa.Name)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("bootstrap Job has %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	secret := flagValue(c.Args, "--kubernetes-secret")
	if len(c.Args) < 2 || c.Args[0] != "key" || c.Args[1] != "create" || flagValue(c.Args, "--role") != "admin" || secret == "" {
		t.Errorf("bootstrap args %q, want key create --role admin --kubernetes-secret NAME", c.Args)
	}
	if got := flagValue(c.Args, "--database-url"); got != "$("+databaseURLEnv+")" {
		t.Errorf("bootstrap --database-url %q, want $(%s) (expanded by Kubernetes, so the URL is not in the spec)", got, databaseURLEnv)
	}
	if got := envSecretRef(t, c.Env); got.Name != dbRef.Name || got.Key != dbRef.Key {
		t.Errorf("bootstrap Job reads %s/%s, the coordinator %s/%s", got.Name, got.Key, dbRef.Name, dbRef.Key)
	}
	// RBAC: get that one Secret, create Secrets; nothing else.
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 ||
		rb.Subjects[0].Kind != "ServiceAccount" || rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != "leasehold" {
		t.Errorf("RoleBinding %+v does not bind Role %q to ServiceAccount %q", rb, role.Name, sa.Name)
	}
	verbs := map[string]bool{}
	for _, rule := range role.Rules {
		if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.Resources, []string{"secrets"}) {
			t.Errorf("bootstrap Role rule %+v reaches beyond core Secrets", rule)
		}
		for _, v := range rule.Verbs {
			verbs[v] = true
			if v == "get" && !slices.Equal(rule.ResourceNames, []string{secret}) {
				t.Errorf("bootstrap Role may get Secrets %q, want only %q", rule.ResourceNames, secret)
			}
		}
	}
	if len(verbs) != 2 || !verbs["get"] || !verbs["create"] {
		t.Errorf("bootstrap Role verbs %v, want get and create", verbs)
	}
	if slices.ContainsFunc(r.secrets, func(s *corev1.Secret) bool { return s.Name == secret }) {
		t.Errorf("the chart renders the Secret %q itself: the Job would find it and create no key", secret)
	}
	for what, sel := range map[string]map[string]string{
		"Service": r.service.Spec.Selector, "Deployment": r.deployment.Spec.Selector.MatchLabels,
	} {
		if selects(sel, j.Spec.Template.Labels) {
			t.Errorf("the %s selector %v also selects the bootstrap pods", what, sel)
		}
	}
}

// checkTestPod checks the helm test pod: it calls the coordinator's
// Service with the bootstrap key.
func checkTestPod(t *testing.T, r *rendered, apiKey, tls bool) {
	t.Helper()
	p := r.testPod
	if !apiKey {
		if p != nil {
			t.Error("helm test pod rendered without the bootstrap key to call with")
		}
		return
	}
	if p == nil {
		t.Fatal("no helm test pod rendered")
	}
	if p.Annotations["helm.sh/hook"] != "test" {
		t.Errorf("test pod hook %q, want test", p.Annotations["helm.sh/hook"])
	}
	checkPodSecurity(t, "test pod", &p.Spec)
	if len(p.Spec.Containers) != 1 {
		t.Fatalf("test pod has %d containers", len(p.Spec.Containers))
	}
	c := p.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	wantAddr := fmt.Sprintf("%s.leasehold.svc:%d", r.service.Name, grpcPort)
	if env["LEASEHOLD_ADDR"].Value != wantAddr {
		t.Errorf("test pod LEASEHOLD_ADDR %q, want %q", env["LEASEHOLD_ADDR"].Value, wantAddr)
	}
	ref := env["LEASEHOLD_API_KEY"].ValueFrom
	if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != flagValue(r.bootstrapJob.Spec.Template.Spec.Containers[0].Args, "--kubernetes-secret") || ref.SecretKeyRef.Key != "api-key" {
		t.Errorf("test pod LEASEHOLD_API_KEY %+v, want the bootstrap Secret's api-key", env["LEASEHOLD_API_KEY"])
	}
	if _, ok := env["LEASEHOLD_TLS_CA_FILE"]; ok != tls {
		t.Errorf("test pod LEASEHOLD_TLS_CA_FILE set = %v, want %v (TLS on)", ok, tls)
	}
}

// checkMeta checks names and the standard labels of every object.
func checkMeta(t *testing.T, o metav1.Object) {
	what := fmt.Sprintf("%T %q", o, o.GetName())
	for _, msg := range validation.IsDNS1123Subdomain(o.GetName()) {
		t.Errorf("%s: name: %s", what, msg)
	}
	if o.GetNamespace() != "leasehold" {
		t.Errorf("%s: namespace %q, want the release namespace leasehold", what, o.GetNamespace())
	}
	for _, l := range []string{
		"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
		"app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "helm.sh/chart",
	} {
		if o.GetLabels()[l] == "" {
			t.Errorf("%s: no %s label", what, l)
		}
	}
	for k, v := range o.GetLabels() {
		for _, msg := range validation.IsQualifiedName(k) {
			t.Errorf("%s: label key %q: %s", what, k, msg)
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			t.Errorf("%s: label %s=%q: %s", what, k, v, msg)
		}
	}
}

func checkPodSecurity(t *testing.T, what string, pod *corev1.PodSpec) {
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != nonrootUID {
		t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and runAsUser %d", what, psc, nonrootUID)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod seccompProfile is not RuntimeDefault", what)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: container %s has no securityContext", what, c.Name)
			continue
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: container %s: root filesystem is writable", what, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: container %s: privilege escalation allowed", what, c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: container %s is privileged", what, c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: container %s: capabilities %+v, want drop ALL and add none", what, c.Name, sc.Capabilities)
		}
		if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot || sc.RunAsUser != nil && *sc.RunAsUser != nonrootUID {
			t.Errorf("%s: container %s overrides the nonroot user", what, c.Name)
		}
	}
}

func checkGRPCProbe(t *testing.T, what string, p *corev1.Probe, service string) {
	if p == nil {
		t.Errorf("no %s probe", what)
		return
	}
	if p.Exec != nil || p.HTTPGet != nil || p.TCPSocket != nil {
		t.Errorf("%s probe is not (only) gRPC: %+v", what, p.ProbeHandler)
	}
	g := p.GRPC
	if g == nil {
		t.Errorf("%s probe is not a gRPC probe", what)
		return
	}
	if g.Port != grpcPort {
		t.Errorf("%s probe port %d, want %d", what, g.Port, grpcPort)
	}
	if g.Service == nil {
		t.Errorf("%s probe has no health service name, want %q", what, service)
	} else if *g.Service != service {
		t.Errorf("%s probe health service %q, want %q", what, *g.Service, service)
	}
	if g.Mode != nil {
		t.Errorf("%s probe mode %q: the chart never relies on the kubelet's TLS gRPC probe", what, *g.Mode)
	}
}

// checkHTTPProbe checks a probe of path on the plaintext HTTP port (by its
// name, so it follows service.httpPort).
func checkHTTPProbe(t *testing.T, what string, p *corev1.Probe, path string) {
	if p == nil {
		t.Errorf("no %s probe", what)
		return
	}
	if p.Exec != nil || p.GRPC != nil || p.TCPSocket != nil {
		t.Errorf("%s probe is not (only) httpGet: %+v", what, p.ProbeHandler)
	}
	h := p.HTTPGet
	if h == nil {
		t.Errorf("%s probe is not an httpGet probe", what)
		return
	}
	if h.Path != path || h.Port.String() != "http" || (h.Scheme != "" && h.Scheme != corev1.URISchemeHTTP) {
		t.Errorf("%s probe GET %s on port %s (%s), want %s on the http port in plaintext", what, h.Path, h.Port.String(), h.Scheme, path)
	}
}

// checkTLSVolume checks that the files the TLS flags name are mounted from
// Secrets.
func checkTLSVolume(t *testing.T, pod *corev1.PodSpec, c *corev1.Container, mtls bool) {
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == tlsDir {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("no read-only mount at %s: %+v", tlsDir, c.VolumeMounts)
	}
	files := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.Name != mount.Name {
			continue
		}
		if v.Projected == nil {
			t.Fatalf("TLS volume %q is not a projected volume of Secrets", v.Name)
		}
		for _, s := range v.Projected.Sources {
			if s.Secret == nil {
				t.Errorf("TLS volume source is not a Secret: %+v", s)
				continue
			}
			for _, it := range s.Secret.Items {
				files[it.Path] = true
			}
		}
	}
	want := []string{"tls.crt", "tls.key"}
	if mtls {
		want = append(want, "ca.crt")
	}
	for _, f := range want {
		if !files[f] {
			t.Errorf("TLS volume lacks %s (has %v)", f, files)
		}
	}
}

func coordinatorContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	cs := d.Spec.Template.Spec.Containers
	i := slices.IndexFunc(cs, func(c corev1.Container) bool { return c.Name == "leasehold" })
	if i < 0 {
		t.Fatalf("Deployment has no container named leasehold: %d containers", len(cs))
	}
	return &cs[i]
}

func envSecretRef(t *testing.T, env []corev1.EnvVar) *corev1.SecretKeySelector {
	t.Helper()
	for _, e := range env {
		if e.Name != databaseURLEnv {
			continue
		}
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Fatalf("%s is not read from a Secret: %+v", databaseURLEnv, e)
		}
		ref := e.ValueFrom.SecretKeyRef
		if ref.Optional != nil && *ref.Optional {
			t.Errorf("%s Secret is optional: without it the coordinator would not use PostgreSQL", databaseURLEnv)
		}
		return ref
	}
	t.Fatalf("no %s in env %+v", databaseURLEnv, env)
	return nil
}

func hookWeight(t *testing.T, o metav1.Object) int {
	t.Helper()
	var w int
	if _, err := fmt.Sscan(o.GetAnnotations()["helm.sh/hook-weight"], &w); err != nil {
		t.Fatalf("%s: helm.sh/hook-weight: %v", o.GetName(), err)
	}
	return w
}

// flagValue returns the argument after flag, or "" when flag is absent.
func flagValue(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

// selects reports whether every label of selector is in labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// firstDifference shows the first line where got and want differ.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n  committed: %q\n  rendered:  %q", i+1, gl, wl)
		}
	}
	return ""
}

// scaledObject is the part of KEDA's keda.sh/v1alpha1 ScaledObject the
// worker example uses, decoded strictly like serviceMonitor.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		Triggers        []struct {
			Type     string            `json:"type"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// TestWorkerExample decodes deploy/examples/worker-keda.yaml strictly: a
// worker Deployment that reaches the chart's Service, and a KEDA
// ScaledObject on its queue's due jobs that does not double-count the
// replicas' identical gauges.
func TestWorkerExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("examples", "worker-keda.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var d *appsv1.Deployment
	var so *scaledObject
	for i, doc := range splitYAML(b) {
		js, err := yaml.YAMLToJSONStrict(doc)
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var tm metav1.TypeMeta
		if err := k8sjson.UnmarshalCaseSensitivePreserveInts(js, &tm); err != nil {
			t.Fatal(err)
		}
		var obj any
		switch tm.APIVersion + "/" + tm.Kind {
		case "apps/v1/Deployment":
			d = &appsv1.Deployment{}
			obj = d
		case "keda.sh/v1alpha1/ScaledObject":
			so = &scaledObject{}
			obj = so
		default:
			t.Fatalf("document %d: unexpected %s/%s", i, tm.APIVersion, tm.Kind)
		}
		if strict, err := k8sjson.UnmarshalStrict(js, obj); err != nil || len(strict) > 0 {
			t.Fatalf("document %d does not decode strictly: %v %v", i, err, strict)
		}
	}
	if d == nil || so == nil {
		t.Fatal("want a Deployment and a ScaledObject")
	}
	if so.Spec.ScaleTargetRef.Name != d.Name || len(so.Spec.Triggers) != 1 {
		t.Fatalf("ScaledObject targets %q with %d triggers, want the Deployment %q", so.Spec.ScaleTargetRef.Name, len(so.Spec.Triggers), d.Name)
	}
	q := so.Spec.Triggers[0].Metadata["query"]
	if so.Spec.Triggers[0].Type != "prometheus" || !strings.HasPrefix(q, "max(leasehold_queue_available{") {
		t.Errorf("trigger %+v: want prometheus on max(leasehold_queue_available{...}) (every coordinator exports the same reading)", so.Spec.Triggers[0])
	}
	pod := d.Spec.Template.Spec
	checkPodSecurity(t, "worker example", &pod)
	env := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if want := fmt.Sprintf("leasehold.leasehold.svc:%d", grpcPort); env["LEASEHOLD_ADDR"] != want {
		t.Errorf("worker LEASEHOLD_ADDR %q, want the default release's Service %q", env["LEASEHOLD_ADDR"], want)
	}
}
