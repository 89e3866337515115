package envoysim

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	xdsmatcher "github.com/cncf/xds/go/xds/type/matcher/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	// The typed configs of a bootstrap's usual filters, for Any.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// Matcher is a rate_limit_quota filter's bucket_matchers as Envoy runs
// them (matcher.cc, the generic matcher): the first field matcher of a
// list whose predicate holds wins (one whose nested matcher matches
// nothing lets the next try), else on_no_match; a tree looks its input up
// in an exact or the longest prefix map. Its inputs are request headers
// (HttpRequestHeaderMatchInput); an absent header is no data, which no
// string matcher matches (a not_matcher of one does). Safe for concurrent
// use.
type Matcher struct {
	root *matchTree
}

type matchTree struct {
	list      []fieldMatcher
	input     string // a tree's header
	exact     map[string]*onMatch
	prefix    map[string]*onMatch
	onNoMatch *onMatch
}

type fieldMatcher struct {
	pred predicate
	on   *onMatch
}

// predicate tells whether a request's headers match.
type predicate func(h map[string]string) bool

// onMatch is a matcher's outcome: bucket settings, or a nested matcher.
type onMatch struct {
	settings *rlqsv3.RateLimitQuotaBucketSettings
	nested   *matchTree
}

// NewMatcher compiles a filter config's bucket_matchers; it fails on
// inputs, matchers or actions the simulator does not know.
func NewMatcher(cfg *rlqsv3.RateLimitQuotaFilterConfig) (*Matcher, error) {
	if cfg.GetBucketMatchers() == nil {
		return nil, errors.New("envoysim: no bucket_matchers")
	}
	root, err := compileTree(cfg.GetBucketMatchers())
	if err != nil {
		return nil, err
	}
	return &Matcher{root: root}, nil
}

// Match returns the bucket id and settings a request with these headers
// (lower-case names) gets, as generateBucketId builds it: a custom_value
// whose header is absent fails the id (ok false: Envoy lets the request
// through, uncounted), one whose header is empty leaves its key out. A
// nil Matcher matches nothing.
func (m *Matcher) Match(headers map[string]string) (map[string]string, *rlqsv3.RateLimitQuotaBucketSettings, bool) {
	if m == nil {
		return nil, nil, false
	}
	on := m.root.eval(headers)
	if on == nil {
		return nil, nil, false
	}
	s := on.settings
	id := map[string]string{}
	for k, vb := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
		if cv := vb.GetCustomValue(); cv != nil {
			name, err := headerInput(cv.GetTypedConfig())
			if err != nil {
				return nil, nil, false // compiled before: cannot happen
			}
			v, ok := headers[name]
			switch {
			case !ok:
				return nil, nil, false
			case v != "":
				id[k] = v
			}
			continue
		}
		id[k] = vb.GetStringValue()
	}
	return id, s, true
}

// allSettings returns every bucket settings of the matcher (none for a
// nil Matcher).
func (m *Matcher) allSettings() []*rlqsv3.RateLimitQuotaBucketSettings {
	if m == nil {
		return nil
	}
	var out []*rlqsv3.RateLimitQuotaBucketSettings
	var walk func(t *matchTree)
	on := func(o *onMatch) {
		switch {
		case o == nil:
		case o.nested != nil:
			walk(o.nested)
		default:
			out = append(out, o.settings)
		}
	}
	walk = func(t *matchTree) {
		for _, fm := range t.list {
			on(fm.on)
		}
		for _, o := range t.exact {
			on(o)
		}
		for _, o := range t.prefix {
			on(o)
		}
		on(t.onNoMatch)
	}
	walk(m.root)
	return out
}

func (t *matchTree) eval(h map[string]string) *onMatch {
	for _, fm := range t.list {
		if fm.pred(h) {
			if r := fm.on.eval(h); r != nil {
				return r
			}
		}
	}
	if t.input != "" {
		if v, ok := h[t.input]; ok {
			if on := t.exact[v]; on != nil {
				if r := on.eval(h); r != nil {
					return r
				}
			}
			if on := longestPrefix(t.prefix, v); on != nil {
				if r := on.eval(h); r != nil {
					return r
				}
			}
		}
	}
	return t.onNoMatch.eval(h)
}

func (on *onMatch) eval(h map[string]string) *onMatch {
	switch {
	case on == nil:
		return nil
	case on.nested != nil:
		return on.nested.eval(h)
	}
	return on
}

func longestPrefix(m map[string]*onMatch, v string) *onMatch {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return len(keys[i]) > len(keys[j]) })
	for _, k := range keys {
		if strings.HasPrefix(v, k) {
			return m[k]
		}
	}
	return nil
}

func compileTree(m *xdsmatcher.Matcher) (*matchTree, error) {
	t := &matchTree{}
	var err error
	if t.onNoMatch, err = compileOn(m.GetOnNoMatch()); err != nil {
		return nil, fmt.Errorf("on_no_match: %w", err)
	}
	switch {
	case m.GetMatcherList() != nil:
		for i, fm := range m.GetMatcherList().GetMatchers() {
			pred, err := compilePredicate(fm.GetPredicate())
			if err != nil {
				return nil, fmt.Errorf("matcher %d: %w", i, err)
			}
			on, err := compileOn(fm.GetOnMatch())
			if err != nil {
				return nil, fmt.Errorf("matcher %d: %w", i, err)
			}
			t.list = append(t.list, fieldMatcher{pred: pred, on: on})
		}
	case m.GetMatcherTree() != nil:
		tree := m.GetMatcherTree()
		if t.input, err = headerInput(tree.GetInput().GetTypedConfig()); err != nil {
			return nil, fmt.Errorf("matcher_tree: %w", err)
		}
		maps := map[*xdsmatcher.Matcher_MatcherTree_MatchMap]*map[string]*onMatch{
			tree.GetExactMatchMap(): &t.exact, tree.GetPrefixMatchMap(): &t.prefix}
		if tree.GetCustomMatch() != nil {
			return nil, errors.New("matcher_tree: custom_match is not simulated")
		}
		for mm, dst := range maps {
			if mm == nil {
				continue
			}
			*dst = map[string]*onMatch{}
			for k, om := range mm.GetMap() {
				if (*dst)[k], err = compileOn(om); err != nil {
					return nil, fmt.Errorf("matcher_tree %q: %w", k, err)
				}
			}
		}
	}
	return t, nil
}

func compileOn(om *xdsmatcher.Matcher_OnMatch) (*onMatch, error) {
	switch {
	case om == nil:
		return nil, nil
	case om.GetMatcher() != nil:
		nested, err := compileTree(om.GetMatcher())
		if err != nil {
			return nil, err
		}
		return &onMatch{nested: nested}, nil
	}
	var s rlqsv3.RateLimitQuotaBucketSettings
	if err := om.GetAction().GetTypedConfig().UnmarshalTo(&s); err != nil {
		return nil, fmt.Errorf("action %q is not RateLimitQuotaBucketSettings: %w", om.GetAction().GetName(), err)
	}
	for k, vb := range s.GetBucketIdBuilder().GetBucketIdBuilder() {
		if cv := vb.GetCustomValue(); cv != nil {
			if _, err := headerInput(cv.GetTypedConfig()); err != nil {
				return nil, fmt.Errorf("bucket id %q: %w", k, err)
			}
		}
	}
	return &onMatch{settings: &s}, nil
}

func compilePredicate(p *xdsmatcher.Matcher_MatcherList_Predicate) (predicate, error) {
	switch {
	case p.GetSinglePredicate() != nil:
		sp := p.GetSinglePredicate()
		name, err := headerInput(sp.GetInput().GetTypedConfig())
		if err != nil {
			return nil, err
		}
		if sp.GetValueMatch() == nil {
			return nil, errors.New("custom_match is not simulated")
		}
		match, err := compileString(sp.GetValueMatch())
		if err != nil {
			return nil, err
		}
		return func(h map[string]string) bool {
			v, ok := h[name]
			return ok && match(v)
		}, nil
	case p.GetNotMatcher() != nil:
		inner, err := compilePredicate(p.GetNotMatcher())
		if err != nil {
			return nil, err
		}
		return func(h map[string]string) bool { return !inner(h) }, nil
	case p.GetAndMatcher() != nil, p.GetOrMatcher() != nil:
		list, and := p.GetOrMatcher(), false
		if p.GetAndMatcher() != nil {
			list, and = p.GetAndMatcher(), true
		}
		var preds []predicate
		for _, q := range list.GetPredicate() {
			pq, err := compilePredicate(q)
			if err != nil {
				return nil, err
			}
			preds = append(preds, pq)
		}
		return func(h map[string]string) bool {
			for _, q := range preds {
				if q(h) != and {
					return !and
				}
			}
			return and
		}, nil
	}
	return nil, errors.New("empty predicate")
}

// compileString is a StringMatcher; a regex must match the whole value.
func compileString(m *xdsmatcher.StringMatcher) (func(string) bool, error) {
	fold := func(s string) string { return s }
	if m.GetIgnoreCase() {
		fold = strings.ToLower
	}
	switch p := m.GetMatchPattern().(type) {
	case *xdsmatcher.StringMatcher_Exact:
		want := fold(p.Exact)
		return func(v string) bool { return fold(v) == want }, nil
	case *xdsmatcher.StringMatcher_Prefix:
		want := fold(p.Prefix)
		return func(v string) bool { return strings.HasPrefix(fold(v), want) }, nil
	case *xdsmatcher.StringMatcher_Suffix:
		want := fold(p.Suffix)
		return func(v string) bool { return strings.HasSuffix(fold(v), want) }, nil
	case *xdsmatcher.StringMatcher_Contains:
		want := fold(p.Contains)
		return func(v string) bool { return strings.Contains(fold(v), want) }, nil
	case *xdsmatcher.StringMatcher_SafeRegex:
		re, err := regexp.Compile(`^(?:` + p.SafeRegex.GetRegex() + `)$`)
		if err != nil {
			return nil, fmt.Errorf("safe_regex: %w", err)
		}
		return re.MatchString, nil
	}
	return nil, fmt.Errorf("string matcher %T is not simulated", m.GetMatchPattern())
}

// headerInput is the header name of an HttpRequestHeaderMatchInput.
func headerInput(a *anypb.Any) (string, error) {
	var in matcherv3.HttpRequestHeaderMatchInput
	if err := a.UnmarshalTo(&in); err != nil {
		return "", fmt.Errorf("input %s is not simulated (only HttpRequestHeaderMatchInput): %w", a.GetTypeUrl(), err)
	}
	return strings.ToLower(in.GetHeaderName()), nil
}

// FilterConfig is the rate_limit_quota filter's config in an Envoy
// bootstrap (YAML, as envoy -c reads it), from the first listener's HTTP
// connection manager that has one, and the names of that manager's HTTP
// filters in order.
func FilterConfig(bootstrapYAML []byte) (*rlqsv3.RateLimitQuotaFilterConfig, []string, error) {
	var doc any
	if err := yaml.Unmarshal(bootstrapYAML, &doc); err != nil {
		return nil, nil, err
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, err
	}
	var bs bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &bs); err != nil {
		return nil, nil, fmt.Errorf("envoysim: bootstrap: %w", err)
	}
	for _, l := range bs.GetStaticResources().GetListeners() {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				var hcm hcmv3.HttpConnectionManager
				if f.GetTypedConfig().UnmarshalTo(&hcm) != nil {
					continue
				}
				var names []string
				var cfg *rlqsv3.RateLimitQuotaFilterConfig
				for _, hf := range hcm.GetHttpFilters() {
					names = append(names, hf.GetName())
					var c rlqsv3.RateLimitQuotaFilterConfig
					if cfg == nil && hf.GetTypedConfig().UnmarshalTo(&c) == nil {
						cfg = &c
					}
				}
				if cfg != nil {
					return cfg, names, nil
				}
			}
		}
	}
	return nil, nil, errors.New("envoysim: no rate_limit_quota filter in the bootstrap")
}
