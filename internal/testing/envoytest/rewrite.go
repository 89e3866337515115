package envoytest

import (
	"bytes"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"

	"gopkg.in/yaml.v3"
)

// Rewrite returns bootstrap with each socket_address whose "address:port"
// is a key of addrs replaced by the value, and nothing else changed but
// the YAML's layout (comments stay). Every key must be found: a test that
// substitutes an address its bootstrap no longer has fails instead of
// testing something else.
func Rewrite(bootstrap []byte, addrs map[string]string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(bootstrap, &doc); err != nil {
		return nil, fmt.Errorf("parse bootstrap: %w", err)
	}
	seen := map[string]bool{}
	var err error
	walkSocketAddresses(&doc, func(sa *yaml.Node) {
		host, port := field(sa, "address"), field(sa, "port_value")
		if host == nil || port == nil || err != nil {
			return
		}
		from := net.JoinHostPort(host.Value, port.Value)
		to, ok := addrs[from]
		if !ok {
			return
		}
		seen[from] = true
		h, p, e := HostPort(to)
		if e != nil {
			err = fmt.Errorf("rewrite %s: %w", from, e)
			return
		}
		host.Value, host.Tag, host.Style = h, "!!str", 0
		port.Value, port.Tag, port.Style = strconv.Itoa(p), "!!int", 0
	})
	if err != nil {
		return nil, err
	}
	var missing []string
	for from := range addrs {
		if !seen[from] {
			missing = append(missing, from)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("the bootstrap has no socket_address %v", missing)
	}
	return encode(&doc)
}

// SetAdmin returns bootstrap with its admin listener at addr, added when
// the bootstrap has none.
func SetAdmin(bootstrap []byte, addr string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(bootstrap, &doc); err != nil {
		return nil, fmt.Errorf("parse bootstrap: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the bootstrap is not a YAML mapping")
	}
	host, port, err := HostPort(addr)
	if err != nil {
		return nil, err
	}
	var admin yaml.Node
	if err := yaml.Unmarshal(fmt.Appendf(nil, "address:\n  socket_address: {address: %q, port_value: %d}\n", host, port), &admin); err != nil {
		return nil, err
	}
	root := doc.Content[0]
	if old := field(root, "admin"); old != nil {
		// Keep the rest of the admin block (access logs, profile path).
		if a := field(old, "address"); a != nil {
			*a = *admin.Content[0].Content[1]
		} else {
			old.Content = append(old.Content, admin.Content[0].Content...)
		}
	} else {
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "admin"}, admin.Content[0])
	}
	return encode(&doc)
}

func encode(doc *yaml.Node) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}

// walkSocketAddresses calls fn with the value of every socket_address key.
func walkSocketAddresses(n *yaml.Node, fn func(*yaml.Node)) {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "socket_address" && n.Content[i+1].Kind == yaml.MappingNode {
				fn(n.Content[i+1])
			}
		}
	}
	for _, c := range n.Content {
		walkSocketAddresses(c, fn)
	}
}

// field returns the value of key in mapping m, or nil.
func field(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// Substitute returns bootstrap with each old string of pairs (old, new,
// old, new, ...) replaced by its new one. Each old must occur exactly
// once, or t fails: a test that varies one setting of a shipped or
// template bootstrap says which line it changes, and learns when that
// line is gone.
func Substitute(t testing.TB, bootstrap []byte, pairs ...string) []byte {
	t.Helper()
	if len(pairs)%2 != 0 {
		t.Fatalf("Substitute: %d strings, want old, new pairs", len(pairs))
	}
	out := bootstrap
	for i := 0; i < len(pairs); i += 2 {
		if n := bytes.Count(out, []byte(pairs[i])); n != 1 {
			t.Fatalf("Substitute: %q occurs %d times in the bootstrap, want once", pairs[i], n)
		}
		out = bytes.Replace(out, []byte(pairs[i]), []byte(pairs[i+1]), 1)
	}
	return out
}
