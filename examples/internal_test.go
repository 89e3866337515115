package examples_test

// Helpers for examples_test.go: decoding the examples into Envoy protos,
// Kubernetes objects, compose services and Dockerfile stages.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/fastlimit/fastlimit/internal/testing/files"
	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/rules"

	// Every @type in the examples must resolve: these register the typed
	// configs that no test names.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

// --- Envoy helpers ---

func loadBootstrap(t *testing.T) *bootstrapv3.Bootstrap {
	t.Helper()
	return loadBootstrapFile(t, envoyYAML)
}

// loadBootstrapFile decodes the Envoy bootstrap at path strictly and
// validates it.
func loadBootstrapFile(t *testing.T, path string) *bootstrapv3.Bootstrap {
	t.Helper()
	var bs bootstrapv3.Bootstrap
	decodeStrict(t, path, readYAML(t, path), &bs)
	validateTree(t, path, &bs)
	return &bs
}

// decodeStrict decodes YAML-shaped data into m through protojson, failing
// on unknown fields and unresolvable @types.
func decodeStrict(t *testing.T, what string, v any, m proto.Message) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(b, m); err != nil {
		t.Fatalf("%s: decode as %s: %v", what, m.ProtoReflect().Descriptor().FullName(), err)
	}
}

// validateTree runs the generated validators on m and on every Any inside
// it, unpacked.
func validateTree(t *testing.T, path string, m proto.Message) {
	t.Helper()
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	for _, a := range findAnys(m.ProtoReflect()) {
		inner, err := a.UnmarshalNew()
		if err != nil {
			t.Errorf("%s: %s: %v", path, a.GetTypeUrl(), err)
			continue
		}
		validateTree(t, path+" > "+a.GetTypeUrl(), inner)
	}
}

// findAnys returns the Any messages in m, not looking inside them.
func findAnys(m protoreflect.Message) []*anypb.Any {
	var out []*anypb.Any
	visit := func(v protoreflect.Message) {
		if a, ok := v.Interface().(*anypb.Any); ok {
			out = append(out, a)
			return
		}
		out = append(out, findAnys(v)...)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				visit(v.List().Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					visit(mv.Message())
					return true
				})
			}
		default:
			visit(v.Message())
		}
		return true
	})
	return out
}

// findHCM returns the first HTTP connection manager and its listener.
func findHCM(t *testing.T, bs *bootstrapv3.Bootstrap) (*hcmv3.HttpConnectionManager, *listenerv3.Listener) {
	t.Helper()
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != hcmFilter {
					continue
				}
				var hcm hcmv3.HttpConnectionManager
				if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
					t.Fatalf("listener %s: %s: %v", l.GetName(), hcmFilter, err)
				}
				return &hcm, l
			}
		}
	}
	t.Fatalf("%s has no %s", envoyYAML, hcmFilter)
	return nil, nil
}

// rateLimitConfig checks that the rate limit filter comes before the
// router, the last filter, and returns its unpacked config.
func rateLimitConfig(t *testing.T, filters []*hcmv3.HttpFilter) *ratelimitv3.RateLimit {
	t.Helper()
	rlAt, routerAt := -1, -1
	for i, f := range filters {
		switch f.GetName() {
		case rateLimitFilter:
			rlAt = i
		case routerFilter:
			routerAt = i
		}
	}
	if rlAt < 0 || routerAt < 0 {
		t.Fatalf("http_filters lack %s or %s", rateLimitFilter, routerFilter)
	}
	if rlAt > routerAt {
		t.Errorf("%s comes after %s: it would never run", rateLimitFilter, routerFilter)
	}
	if routerAt != len(filters)-1 {
		t.Errorf("%s is not the last http filter", routerFilter)
	}
	var rl ratelimitv3.RateLimit
	if err := filters[rlAt].GetTypedConfig().UnmarshalTo(&rl); err != nil {
		t.Fatalf("%s typed_config: %v", rateLimitFilter, err)
	}
	return &rl
}

// rateLimitFilterRaw returns the rate limit filter's typed_config as YAML
// decoded it, to see which fields are written out.
func rateLimitFilterRaw(t *testing.T, doc any) map[string]any {
	t.Helper()
	var found map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["name"] == rateLimitFilter {
				if tc, ok := v["typed_config"].(map[string]any); ok {
					found = tc
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	if found == nil {
		t.Fatalf("no %s typed_config", rateLimitFilter)
	}
	return found
}

func clusterEndpoint(c *clusterv3.Cluster) (string, uint32) {
	for _, e := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range e.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			return sa.GetAddress(), sa.GetPortValue()
		}
	}
	return "", 0
}

// --- Rules helpers ---

// envoyRateLimits are the rate_limits of envoy.yaml's virtual hosts and
// routes.
func envoyRateLimits(t *testing.T, hcm *hcmv3.HttpConnectionManager) []*routev3.RateLimit {
	t.Helper()
	var all []*routev3.RateLimit
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		all = append(all, vh.GetRateLimits()...)
		for _, r := range vh.GetRoutes() {
			all = append(all, r.GetRoute().GetRateLimits()...)
		}
	}
	if len(all) == 0 {
		t.Fatal("envoy.yaml has no rate_limits")
	}
	return all
}

// envoyDescriptors are the descriptors envoy.yaml's rate_limits send.
func envoyDescriptors(t *testing.T, hcm *hcmv3.HttpConnectionManager) [][]descriptors.Entry {
	t.Helper()
	var all [][]descriptors.Entry
	for i, r := range envoyRateLimits(t, hcm) {
		descs, err := buildDescriptors(r)
		if err != nil {
			t.Fatalf("rate_limits[%d]: %v", i, err)
		}
		all = append(all, descs...)
	}
	return all
}

func loadDir(t *testing.T, dir string) *rules.Loaded {
	t.Helper()
	rules, err := rules.Load(dir)
	if err != nil {
		t.Fatalf("rules.Load(%s): %v", dir, err)
	}
	return rules
}

// rulesFiles returns the YAML files directly in dir, by name; none if dir
// does not exist.
func rulesFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	found := map[string][]byte{}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		found[e.Name()] = files.Read(t, filepath.Join(dir, e.Name()))
	}
	return found
}

// istioRuleFiles returns the ConfigMap fastlimit-rules' data as the files
// FastLimit sees in the mounted directory.
func istioRuleFiles(t *testing.T) map[string][]byte {
	t.Helper()
	for _, o := range loadManifests(t) {
		if o.Kind != "ConfigMap" || o.Metadata.Name != "fastlimit-rules" {
			continue
		}
		var cm struct {
			Data map[string]string `yaml:"data"`
		}
		decodeNode(t, o, &cm)
		if len(cm.Data) == 0 {
			t.Fatal("ConfigMap fastlimit-rules has no data")
		}
		files := map[string][]byte{}
		for k, v := range cm.Data {
			files[k] = []byte(v)
		}
		return files
	}
	t.Fatal("no ConfigMap fastlimit-rules")
	return nil
}

// --- Kubernetes helpers ---

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`

	file string
	node *yaml.Node
}

type deployment struct {
	Spec struct {
		Replicas int `yaml:"replicas"`
		Strategy struct {
			Type string `yaml:"type"`
		} `yaml:"strategy"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []container `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *secretKeyRef `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name        string `yaml:"name"`
		MountPath   string `yaml:"mountPath"`
		SubPath     string `yaml:"subPath"`
		SubPathExpr string `yaml:"subPathExpr"`
	} `yaml:"volumeMounts"`
}

type secretKeyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type servicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort any    `yaml:"targetPort"`
}

type service struct {
	Metadata struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Spec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []servicePort     `yaml:"ports"`
	} `yaml:"spec"`
}

type envoyFilterPatch struct {
	ApplyTo string `yaml:"applyTo"`
	Match   struct {
		Context  string `yaml:"context"`
		Listener struct {
			FilterChain struct {
				Filter struct {
					Name      string `yaml:"name"`
					SubFilter struct {
						Name string `yaml:"name"`
					} `yaml:"subFilter"`
				} `yaml:"filter"`
			} `yaml:"filterChain"`
		} `yaml:"listener"`
	} `yaml:"match"`
	Patch struct {
		Operation string         `yaml:"operation"`
		Value     map[string]any `yaml:"value"`
	} `yaml:"patch"`
}

type envoyFilter struct {
	Spec struct {
		WorkloadSelector struct {
			Labels map[string]string `yaml:"labels"`
		} `yaml:"workloadSelector"`
		ConfigPatches []envoyFilterPatch `yaml:"configPatches"`
	} `yaml:"spec"`
}

// loadManifests parses every YAML document in the istio directory.
func loadManifests(t *testing.T) []*k8sObject {
	t.Helper()
	return loadManifestsIn(t, istioDir)
}

// loadManifestsIn parses every YAML document in dir.
func loadManifestsIn(t *testing.T, dir string) []*k8sObject {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s: %v", dir, err)
	}
	var objs []*k8sObject
	for _, p := range paths {
		dec := yaml.NewDecoder(bytes.NewReader(files.Read(t, p)))
		for {
			var n yaml.Node
			err := dec.Decode(&n)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if len(n.Content) == 0 || n.Content[0].Kind != yaml.MappingNode {
				continue // an empty document
			}
			o := &k8sObject{file: p, node: &n}
			if err := n.Decode(o); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			objs = append(objs, o)
		}
	}
	return objs
}

func decodeNode(t *testing.T, o *k8sObject, v any) {
	t.Helper()
	if err := o.node.Decode(v); err != nil {
		t.Fatalf("%s: %s %s: %v", o.file, o.Kind, o.Metadata.Name, err)
	}
}

// decodeStrictYAML decodes b into v, failing on fields v does not have.
func decodeStrictYAML(t *testing.T, what string, b []byte, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// decodeNodeStrict is decodeNode failing on fields v does not have.
func decodeNodeStrict(t *testing.T, o *k8sObject, v any) {
	t.Helper()
	b, err := yaml.Marshal(o.node)
	if err != nil {
		t.Fatal(err)
	}
	decodeStrictYAML(t, o.file+": "+o.Kind+" "+o.Metadata.Name, b, v)
}

// istioPatches returns the gateway's HTTP_FILTER and VIRTUAL_HOST patches.
func istioPatches(t *testing.T, objs []*k8sObject) (filter, vhost *envoyFilterPatch) {
	t.Helper()
	for _, o := range objs {
		if o.Kind != "EnvoyFilter" {
			continue
		}
		var ef envoyFilter
		decodeNode(t, o, &ef)
		if ef.Spec.WorkloadSelector.Labels["istio"] != "ingressgateway" {
			t.Errorf("EnvoyFilter %s does not select the ingress gateway (istio: ingressgateway)", o.Metadata.Name)
		}
		for i := range ef.Spec.ConfigPatches {
			p := &ef.Spec.ConfigPatches[i]
			switch p.ApplyTo {
			case "HTTP_FILTER":
				filter = p
			case "VIRTUAL_HOST":
				vhost = p
			}
		}
	}
	if filter == nil || vhost == nil {
		t.Fatal("want EnvoyFilter patches for HTTP_FILTER and VIRTUAL_HOST")
	}
	return filter, vhost
}

// resolvePort resolves a probe or targetPort (a number or a port name).
func resolvePort(p any, named map[string]int) int {
	switch p := p.(type) {
	case int:
		return p
	case string:
		if n, err := strconv.Atoi(p); err == nil {
			return n
		}
		return named[p]
	}
	return 0
}

func subset(sub, super map[string]string) bool {
	if len(sub) == 0 {
		return false
	}
	for k, v := range sub {
		if super[k] != v {
			return false
		}
	}
	return true
}

// flagValue returns the value of --name in args ("--name v" or
// "--name=v", one dash or two).
func flagValue(args []string, name string) string {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// --- Compose helpers ---

// loadCompose returns docker-compose.yml's services by name.
func loadCompose(t *testing.T) map[string]composeService {
	t.Helper()
	var cf struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(files.Read(t, composeFile), &cf); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return cf.Services
}

type composeService struct {
	Image       string `yaml:"image"`
	Build       any    `yaml:"build"`
	Command     any    `yaml:"command"`
	Environment any    `yaml:"environment"`
	Volumes     []any  `yaml:"volumes"`
	Ports       []any  `yaml:"ports"`
}

func (s composeService) build() (context, dockerfile string) {
	switch b := s.Build.(type) {
	case string:
		return b, "Dockerfile"
	case map[string]any:
		context, _ = b["context"].(string)
		dockerfile, _ = b["dockerfile"].(string)
		if dockerfile == "" {
			dockerfile = "Dockerfile"
		}
	}
	return context, dockerfile
}

func (s composeService) command() []string {
	switch c := s.Command.(type) {
	case string:
		return strings.Fields(c)
	case []any:
		out := make([]string, len(c))
		for i, a := range c {
			out[i] = fmt.Sprint(a)
		}
		return out
	}
	return nil
}

func (s composeService) env() map[string]string {
	out := map[string]string{}
	switch e := s.Environment.(type) {
	case map[string]any:
		for k, v := range e {
			out[k] = fmt.Sprint(v)
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			out[k] = v
		}
	}
	return out
}

type composeVolume struct{ source, target string }

func (s composeService) volumes() []composeVolume {
	var out []composeVolume
	for _, v := range s.Volumes {
		switch v := v.(type) {
		case string:
			parts := strings.Split(v, ":")
			if len(parts) >= 2 {
				out = append(out, composeVolume{parts[0], parts[1]})
			}
		case map[string]any:
			src, _ := v["source"].(string)
			dst, _ := v["target"].(string)
			out = append(out, composeVolume{src, dst})
		}
	}
	return out
}

// mountsFile reports whether s bind-mounts the repository path rel.
func mountsFile(t *testing.T, s composeService, rel string, dir bool) bool {
	t.Helper()
	for _, v := range s.volumes() {
		if filepath.Clean(v.source) != filepath.Clean(rel) {
			continue
		}
		st, err := os.Stat(filepath.Join("..", rel))
		if err != nil {
			t.Errorf("mounted %s: %v", rel, err)
			return false
		}
		return st.IsDir() == dir
	}
	return false
}

// publishes reports whether s publishes container port p.
func publishes(s composeService, p int) bool {
	for _, port := range s.Ports {
		switch port := port.(type) {
		case int:
			if port == p {
				return true
			}
		case string:
			parts := strings.Split(strings.TrimSuffix(port, "/tcp"), ":")
			if parts[len(parts)-1] == strconv.Itoa(p) {
				return true
			}
		case map[string]any:
			if port["target"] == p {
				return true
			}
		}
	}
	return false
}

// --- Dockerfile helpers ---

type dockerStage struct {
	from  string
	instr [][2]string // instruction, arguments
}

func (s dockerStage) all(instr string) []string {
	var out []string
	for _, in := range s.instr {
		if in[0] == instr {
			out = append(out, in[1])
		}
	}
	return out
}

func (s dockerStage) last(instr string) string {
	all := s.all(instr)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

// parseDockerfile splits a Dockerfile into stages of instructions, joining
// continued lines and dropping comments.
func parseDockerfile(t *testing.T, b []byte) []dockerStage {
	t.Helper()
	var stages []dockerStage
	var cur strings.Builder
	flush := func() {
		line := strings.TrimSpace(cur.String())
		cur.Reset()
		if line == "" {
			return
		}
		instr, args, _ := strings.Cut(line, " ")
		instr, args = strings.ToUpper(instr), strings.TrimSpace(args)
		if instr == "FROM" {
			f := strings.Fields(args)
			for len(f) > 0 && strings.HasPrefix(f[0], "--") {
				f = f[1:]
			}
			if len(f) == 0 {
				t.Fatalf("Dockerfile: FROM without an image")
			}
			stages = append(stages, dockerStage{from: f[0]})
			return
		}
		if len(stages) == 0 {
			if instr != "ARG" {
				t.Fatalf("Dockerfile: %s before FROM", instr)
			}
			return
		}
		s := &stages[len(stages)-1]
		s.instr = append(s.instr, [2]string{instr, args})
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if l, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), `\`); ok {
			cur.WriteString(l + " ")
			continue
		}
		cur.WriteString(line)
		flush()
	}
	flush()
	return stages
}

// dockerIgnored returns a matcher for .dockerignore's patterns, without
// the exceptions (!) it does not use: a path is ignored when it or one of
// its parents matches; a leading **/ matches at any depth.
func dockerIgnored(t *testing.T) func(string) bool {
	t.Helper()
	b, err := os.ReadFile(dockerignore)
	if errors.Is(err, os.ErrNotExist) {
		return func(string) bool { return false }
	}
	if err != nil {
		t.Fatal(err)
	}
	var pats []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			t.Fatalf(".dockerignore: this test does not understand exceptions (%s)", l)
		}
		pats = append(pats, strings.Trim(l, "/"))
	}
	return func(p string) bool {
		p = path.Clean(filepath.ToSlash(p))
		for q := p; q != "." && q != "/"; q = path.Dir(q) {
			for _, pat := range pats {
				target := q
				if rest, ok := strings.CutPrefix(pat, "**/"); ok {
					pat, target = rest, path.Base(q)
				}
				if ok, _ := path.Match(pat, target); ok {
					return true
				}
			}
		}
		return false
	}
}

// --- Files ---

// readYAML decodes a YAML file into plain maps and slices, ready for JSON.
func readYAML(t *testing.T, path string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(files.Read(t, path), &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}
