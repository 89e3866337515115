package descriptors

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// KV is a descriptor entry as a request carries it; Envoy's generated
// *RateLimitDescriptor_Entry satisfies it, so Match needs no copy.
type KV interface {
	GetKey() string
	GetValue() string
}

// Entry is a plain descriptor entry.
type Entry struct{ Key, Value string }

// GetKey returns the entry's key.
func (e Entry) GetKey() string { return e.Key }

// GetValue returns the entry's value.
func (e Entry) GetValue() string { return e.Value }

// Descriptor is one configured rule level, as the rules files nest them.
type Descriptor struct {
	Key   string
	Value string // "" matches any value; '*' is a wildcard
	Limit *Limit // nil: no limit at this level
	// Limits are several limits at this level (rules files' rate_limits),
	// one decision (Limit.Group); a descriptor has Limit or Limits, not both.
	Limits []*Limit
	// ShareThreshold: every value matching a wildcard Value shares a counter.
	ShareThreshold bool
	ValueToMetric  bool
	DetailedMetric bool
	ShadowMode     bool
	QuotaMode      bool
	Metadata       map[string]any
	Descriptors    []Descriptor
	// Source locates the rule for error messages, e.g. "rules.yaml:12".
	Source string
}

// DomainConfig is one domain's rules.
type DomainConfig struct {
	Name string
	// TenantKey is the descriptor key whose value is the tenant tier.
	TenantKey string
	// Atomic asks for all-or-nothing decisions over a request's descriptors.
	Atomic      bool
	Descriptors []Descriptor
	Source      string
}

// Domain is a compiled domain. It is immutable and safe for concurrent use.
type Domain struct {
	Name      string
	TenantKey string
	Atomic    bool
	root      node
}

// Set is a compiled, immutable set of domains, swapped whole on reload.
type Set struct {
	domains map[string]*Domain
	limits  []*Limit
}

type kv struct{ k, v string }

type wildNode struct {
	pat  pattern
	node *node
}

type node struct {
	exact   map[kv]*node
	wild    map[string][]wildNode // by key, in file order
	keyOnly map[string]*node
	limit   *Limit
	leaf    bool   // no nested descriptors
	source  string // of the descriptor that made it, for duplicates
}

// Errors reported by NewSet.
var (
	ErrEmptyDomain     = errors.New("config file cannot have empty domain")
	ErrDuplicateDomain = errors.New("duplicate domain")
	ErrDuplicatePath   = errors.New("duplicate descriptor")
)

// MaxGroup is the most limits one descriptor may carry (Descriptor.Limits).
const MaxGroup = 16

// Error is a rules error located at a source position.
type Error struct {
	Source string
	Err    error
}

func (e *Error) Error() string {
	if e.Source == "" {
		return e.Err.Error()
	}
	return e.Source + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// NewSet compiles domains into a Set, copying their Limits. It reports every
// problem (empty or duplicate domains, keys and paths, invalid limits and
// replaces, share_threshold without a wildcard), each an *Error, joined.
func NewSet(domains []DomainConfig) (*Set, error) {
	s := &Set{domains: make(map[string]*Domain, len(domains))}
	sources := make(map[string]string, len(domains))
	var errs []error
	for _, dc := range domains {
		d := &Domain{Name: dc.Name, TenantKey: dc.TenantKey, Atomic: dc.Atomic}
		first, dup := sources[dc.Name]
		switch {
		case dc.Name == "":
			errs = append(errs, &Error{dc.Source, ErrEmptyDomain})
		case dup:
			errs = append(errs, &Error{dc.Source, fmt.Errorf("%w '%s'%s", ErrDuplicateDomain, dc.Name, firstAt(first))})
		default:
			sources[dc.Name] = dc.Source
			s.domains[dc.Name] = d
		}
		errs = append(errs, s.build(&d.root, dc.Name, dc.Descriptors, nil, nil)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func firstAt(source string) string {
	if source == "" {
		return ""
	}
	return " (first at " + source + ")"
}

func (s *Set) build(n *node, path string, ds []Descriptor, shared []string, levels []Level) []error {
	n.leaf = len(ds) == 0
	var errs []error
	for i := range ds {
		errs = append(errs, s.add(n, path, &ds[i], shared, levels)...)
	}
	return errs
}

// add compiles d and its nested descriptors as a child of n, at levels.
func (s *Set) add(n *node, path string, d *Descriptor, shared []string, levels []Level) []error {
	if d.Key == "" {
		return []error{&Error{d.Source, errors.New("descriptor has empty key")}}
	}
	var errs []error
	fail := func(err error) { errs = append(errs, &Error{d.Source, err}) }
	child := &node{source: d.Source}
	wildcard := IsWildcard(d.Value)
	childShared := append(shared[:len(shared):len(shared)], "")
	if d.ShareThreshold {
		if wildcard {
			childShared[len(childShared)-1] = d.Value
		} else {
			fail(fmt.Errorf("share_threshold needs a wildcard value, but '%s' has value '%s'", d.Key, d.Value))
		}
	}
	childPath := path + "." + d.Key
	if d.Value != "" {
		childPath += "_" + d.Value
	}
	childLevels := append(levels[:len(levels):len(levels)], Level{
		Key: d.Key, Value: d.Value, ValueToMetric: d.ValueToMetric, ShareThreshold: d.ShareThreshold && wildcard,
	})
	if err := s.insert(n, d, child, wildcard, childPath); err != nil {
		fail(err)
	}
	at := placement{path: childPath, shared: childShared, levels: childLevels}
	switch {
	case d.Limit != nil && len(d.Limits) > 0:
		fail(errors.New("rate_limit and rate_limits on one descriptor; list every limit in rate_limits"))
	case d.Limit != nil:
		l, err := s.limit(d, d.Limit, at)
		if err != nil {
			fail(err)
		} else {
			s.limits = append(s.limits, l)
		}
		child.limit = l
	case len(d.Limits) > 0:
		l, gerrs := s.group(d, at)
		for _, err := range gerrs {
			fail(err)
		}
		child.limit = l
	}
	return append(errs, s.build(child, childPath, d.Descriptors, childShared, childLevels)...)
}

// placement is where a rule's limits sit: its path, share_threshold
// patterns and levels.
type placement struct {
	path   string
	shared []string
	levels []Level
}

// limit compiles dl, a limit of d placed at, or returns nil and why not.
func (s *Set) limit(d *Descriptor, dl *Limit, at placement) (*Limit, error) {
	l := *dl
	l.Group, l.Index, l.label = nil, 0, ""
	l.fillDefaults()
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if l.Calendar != "" {
		l.calendar, _ = NewCalendar(l.Calendar, l.Unit, l.UnitMultiplier) // Validate made one
	}
	for _, r := range l.Replaces {
		if r == "" {
			return nil, errors.New("should not have an empty replaces entry")
		}
		if r == l.Name {
			return nil, errors.New("replaces should not contain name of same descriptor")
		}
	}
	l.ShadowMode, l.QuotaMode = d.ShadowMode, d.QuotaMode
	l.DetailedMetric, l.ValueToMetric = d.DetailedMetric, d.ValueToMetric
	l.Metadata = d.Metadata
	l.Path = at.path
	l.Levels = at.levels
	l.Source = d.Source
	for _, p := range at.shared {
		if p != "" {
			l.hasShared = true
		}
	}
	l.shared = at.shared
	return &l, nil
}

func (s *Set) insert(n *node, d *Descriptor, child *node, wildcard bool, path string) error {
	var first *node
	switch {
	case d.Value == "":
		if n.keyOnly == nil {
			n.keyOnly = map[string]*node{}
		}
		first = n.keyOnly[d.Key]
		n.keyOnly[d.Key] = child
	case wildcard:
		if n.wild == nil {
			n.wild = map[string][]wildNode{}
		}
		for _, w := range n.wild[d.Key] {
			if first == nil && strings.Join(w.pat.parts, "*") == d.Value {
				first = w.node
			}
		}
		n.wild[d.Key] = append(n.wild[d.Key], wildNode{compilePattern(d.Value), child})
	default:
		if n.exact == nil {
			n.exact = map[kv]*node{}
		}
		first = n.exact[kv{d.Key, d.Value}]
		n.exact[kv{d.Key, d.Value}] = child
	}
	if first != nil {
		return fmt.Errorf("%w '%s'%s", ErrDuplicatePath, path, firstAt(first.source))
	}
	return nil
}

// Domain returns the named domain, or nil.
func (s *Set) Domain(name string) *Domain {
	if s == nil {
		return nil
	}
	return s.domains[name]
}

// Domains returns the domain names, sorted.
func (s *Set) Domains() []string {
	names := make([]string, 0, len(s.domains))
	for n := range s.domains {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Limits returns every configured limit, in file order per domain.
func (s *Set) Limits() []*Limit { return s.limits }

// Match returns the limit that a request's entries hit, or nil, with the
// reference's precedence (docs/rules.md, "Matching"): exact value, then the
// first wildcard, then key-only; entries as many as the path is deep. It
// does not allocate.
func Match[E KV](d *Domain, entries []E) *Limit {
	if d == nil || len(entries) == 0 {
		return nil
	}
	n := &d.root
	for i, e := range entries {
		next := n.step(e.GetKey(), e.GetValue())
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			return next.limit
		}
		if next.leaf {
			return nil
		}
		n = next
	}
	return nil
}

func (n *node) step(key, value string) *node {
	if next, ok := n.exact[kv{key, value}]; ok {
		return next
	}
	for _, w := range n.wild[key] {
		if w.pat.match(value) {
			return w.node
		}
	}
	return n.keyOnly[key]
}
