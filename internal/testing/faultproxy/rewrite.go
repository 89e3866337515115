package faultproxy

import (
	"net"
	"regexp"
	"strconv"
	"strings"
)

// textAddr finds "host:port" (CLUSTER NODES, MOVED, a replica's name) and
// "host port" (+switch-master messages) in text.
var textAddr = regexp.MustCompile(`\b(\d{1,3}(?:\.\d{1,3}){3}|localhost)([: ])(\d{1,5})\b`)

// rewrite maps the upstream addresses in a reply to cmd (nil: a reply to
// no command) into the addresses clients should use, when the proxy has
// an address map and the reply may carry topology: a CLUSTER or SENTINEL
// reply, an error (MOVED, ASK), or a pub/sub message.
func (p *Proxy) rewrite(cmd *Command, raw []byte) []byte {
	mp := p.mapper.Load()
	if mp == nil || len(raw) == 0 {
		return raw
	}
	topology := cmd != nil && (cmd.Name == "CLUSTER" || cmd.Name == "SENTINEL")
	if !topology && cmd != nil && raw[0] != KindError && raw[0] != KindBulkError {
		return raw
	}
	v, err := ParseValue(raw)
	if err != nil {
		return raw
	}
	if !rewriteValue(&v, *mp, topology) {
		return raw
	}
	return v.Bytes()
}

// rewriteValue rewrites the addresses in v's strings and, with pairs, the
// (host, port) pairs of its aggregates: adjacent elements (CLUSTER SLOTS,
// SENTINEL GET-MASTER-ADDR-BY-NAME) and "ip"/"port" fields (SENTINEL
// REPLICAS, CLUSTER SHARDS). It reports whether it changed anything.
func rewriteValue(v *Value, m func(string) (string, bool), pairs bool) bool {
	changed := false
	switch v.Kind {
	case KindSimple, KindError, KindBulk, KindBulkError, KindVerbatim:
		if s, ok := rewriteText(v.Str, m); ok {
			v.Str, changed = s, true
		}
		return changed
	case KindArray, KindSet, KindPush, KindMap:
	default:
		return false
	}
	if pairs {
		changed = rewriteFields(v.Elems, m)
		if v.Kind != KindMap && rewriteAdjacent(v.Elems, m) {
			changed = true
		}
	}
	for i := range v.Elems {
		if rewriteValue(&v.Elems[i], m, pairs) {
			changed = true
		}
	}
	return changed
}

func rewriteText(s string, m func(string) (string, bool)) (string, bool) {
	if !textAddr.MatchString(s) {
		return s, false
	}
	changed := false
	out := textAddr.ReplaceAllStringFunc(s, func(match string) string {
		sub := textAddr.FindStringSubmatch(match)
		to, ok := m(net.JoinHostPort(sub[1], sub[3]))
		if !ok {
			return match
		}
		host, port, err := net.SplitHostPort(to)
		if err != nil {
			return match
		}
		changed = true
		return host + sub[2] + port
	})
	return out, changed
}

// rewriteAdjacent rewrites elements i, i+1 that are a host and a port.
func rewriteAdjacent(elems []Value, m func(string) (string, bool)) bool {
	changed := false
	for i := 0; i+1 < len(elems); i++ {
		host, port := &elems[i], &elems[i+1]
		if !isString(host) || !isHost(host.Str) {
			continue
		}
		p, ok := portOf(port)
		if !ok {
			continue
		}
		if setAddr(host, port, p, m) {
			changed = true
			i++
		}
	}
	return changed
}

// rewriteFields rewrites the ("ip", "port") and ("master-host",
// "master-port") fields of a map or a flat key-value array.
func rewriteFields(elems []Value, m func(string) (string, bool)) bool {
	if len(elems)%2 != 0 {
		return false
	}
	field := func(name string) *Value {
		for i := 0; i+1 < len(elems); i += 2 {
			if isString(&elems[i]) && strings.EqualFold(elems[i].Str, name) {
				return &elems[i+1]
			}
		}
		return nil
	}
	changed := false
	for _, f := range [][2]string{{"ip", "port"}, {"master-host", "master-port"}} {
		host, port := field(f[0]), field(f[1])
		if host == nil || port == nil || !isString(host) {
			continue
		}
		p, ok := portOf(port)
		if !ok {
			continue
		}
		old := host.Str
		if setAddr(host, port, p, m) {
			changed = true
			if ep := field("endpoint"); ep != nil && isString(ep) && ep.Str == old {
				ep.Str = host.Str
			}
		}
	}
	return changed
}

// setAddr maps host:port through m and writes the result back, keeping
// the port's kind (integer or string).
func setAddr(host, port *Value, p int, m func(string) (string, bool)) bool {
	to, ok := m(net.JoinHostPort(host.Str, strconv.Itoa(p)))
	if !ok {
		return false
	}
	h, ps, err := net.SplitHostPort(to)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(ps)
	if err != nil {
		return false
	}
	host.Str = h
	if port.Kind == KindInt {
		port.Int = int64(n)
	} else {
		port.Str = ps
	}
	return true
}

func isString(v *Value) bool {
	switch v.Kind {
	case KindSimple, KindBulk:
		return !v.Null
	}
	return false
}

func isHost(s string) bool { return s == "localhost" || net.ParseIP(s) != nil }

func portOf(v *Value) (int, bool) {
	var n int64
	switch {
	case v.Kind == KindInt:
		n = v.Int
	case isString(v):
		var err error
		if n, err = strconv.ParseInt(v.Str, 10, 32); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	return int(n), n > 0 && n < 65536
}
