// Package refrules checks that a rules file uses only what
// envoyproxy/ratelimit (at the version FastLimit pins) accepts, so that
// rules shipped as the reference's format load on the reference too.
package refrules

import (
	"errors"
	"fmt"
	"slices"

	"gopkg.in/yaml.v3"
)

// Keys are the keys the reference accepts anywhere in a rules file (its
// src/config/config_impl.go validKeys at
// v1.4.1-0.20260122083618-3fb702589d36). "metadata" came after.
var Keys = []string{
	"descriptors", "detailed_metric", "domain", "key", "name", "quota_mode", "rate_limit", "replaces",
	"requests_per_unit", "shadow_mode", "share_threshold", "unit", "unlimited", "value", "value_to_metric",
}

// ErrNotReference is wrapped by every error of Check.
var ErrNotReference = errors.New("not loadable by envoyproxy/ratelimit")

// Check returns an error naming the first place where b leaves the
// reference's format, as the reference's validateYamlKeys walks it: every
// key of every mapping must be one of Keys, a list may hold only
// mappings, and a leaf only a string, an integer, a boolean or null.
func Check(b []byte) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%w: %w", ErrNotReference, err)
	}
	if len(doc.Content) == 0 {
		return nil
	}
	return check(doc.Content[0])
}

func check(n *yaml.Node) error {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.ShortTag() != "!!str" || !slices.Contains(Keys, k.Value) {
				return fmt.Errorf("%w: line %d: unknown key '%s'", ErrNotReference, k.Line, k.Value)
			}
			if err := check(v); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, e := range n.Content {
			for e.Kind == yaml.AliasNode {
				e = e.Alias
			}
			if e.Kind != yaml.MappingNode {
				return fmt.Errorf("%w: line %d: a list holds something other than mappings", ErrNotReference, e.Line)
			}
			if err := check(e); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str", "!!int", "!!bool", "!!null":
		default:
			return fmt.Errorf("%w: line %d: value %q is a %s", ErrNotReference, n.Line, n.Value, n.ShortTag())
		}
	}
	return nil
}
