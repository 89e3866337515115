package faultproxy

import "testing"

func TestRewrite(t *testing.T) {
	p := &Proxy{}
	p.SetAddrMap(map[string]string{"127.0.0.1:7001": "127.0.0.1:9001", "127.0.0.1:7002": "127.0.0.1:9002"})
	cmd := func(name string, args ...string) *Command { return &Command{Name: name, Args: args} }
	kv := func(kind byte, pairs ...Value) Value { return Value{Kind: kind, Elems: pairs} }
	slotNode := func(port int64, id string) Value { return Array(Bulk("127.0.0.1"), Int(port), Bulk(id), Array()) }
	push := func(text string) Value {
		return Value{Kind: KindPush, Elems: []Value{Bulk("message"), Bulk("+switch-master"), Bulk(text)}}
	}
	for _, tc := range []struct {
		name      string
		cmd       *Command
		in, want  Value
		unchanged bool
	}{
		{name: "CLUSTER SLOTS", cmd: cmd("CLUSTER", "SLOTS"),
			in:   Array(Array(Int(0), Int(8191), slotNode(7001, "a"), slotNode(7002, "b")), Array(Int(8192), Int(16383), slotNode(7003, "c"))),
			want: Array(Array(Int(0), Int(8191), slotNode(9001, "a"), slotNode(9002, "b")), Array(Int(8192), Int(16383), slotNode(7003, "c")))},
		{name: "GET-MASTER-ADDR-BY-NAME", cmd: cmd("SENTINEL", "get-master-addr-by-name", "m"),
			in: Array(Bulk("127.0.0.1"), Bulk("7001")), want: Array(Bulk("127.0.0.1"), Bulk("9001"))},
		{name: "SENTINEL REPLICAS, RESP2", cmd: cmd("SENTINEL", "replicas", "m"),
			in: Array(Array(Bulk("name"), Bulk("127.0.0.1:7002"), Bulk("ip"), Bulk("127.0.0.1"), Bulk("port"), Bulk("7002"),
				Bulk("master-host"), Bulk("127.0.0.1"), Bulk("master-port"), Bulk("7001"))),
			want: Array(Array(Bulk("name"), Bulk("127.0.0.1:9002"), Bulk("ip"), Bulk("127.0.0.1"), Bulk("port"), Bulk("9002"),
				Bulk("master-host"), Bulk("127.0.0.1"), Bulk("master-port"), Bulk("9001")))},
		{name: "SENTINEL SENTINELS, RESP3", cmd: cmd("SENTINEL", "sentinels", "m"),
			in:   Array(kv(KindMap, Bulk("ip"), Bulk("127.0.0.1"), Bulk("port"), Bulk("7001"), Bulk("runid"), Bulk("x"))),
			want: Array(kv(KindMap, Bulk("ip"), Bulk("127.0.0.1"), Bulk("port"), Bulk("9001"), Bulk("runid"), Bulk("x")))},
		{name: "CLUSTER SHARDS", cmd: cmd("CLUSTER", "SHARDS"),
			in:   Array(kv(KindMap, Bulk("port"), Int(7002), Bulk("ip"), Bulk("127.0.0.1"), Bulk("endpoint"), Bulk("127.0.0.1"))),
			want: Array(kv(KindMap, Bulk("port"), Int(9002), Bulk("ip"), Bulk("127.0.0.1"), Bulk("endpoint"), Bulk("127.0.0.1")))},
		{name: "CLUSTER NODES", cmd: cmd("CLUSTER", "NODES"),
			in:   Bulk("a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-8191\nc 127.0.0.1:7003@17003 master - 0 0 3 connected\n"),
			want: Bulk("a 127.0.0.1:9001@17001 myself,master - 0 0 1 connected 0-8191\nc 127.0.0.1:7003@17003 master - 0 0 3 connected\n")},
		{name: "MOVED", cmd: cmd("EVALSHA"), in: Error("MOVED 3999 127.0.0.1:7002"), want: Error("MOVED 3999 127.0.0.1:9002")},
		{name: "ASK", cmd: cmd("GET", "k"), in: Error("ASK 3999 127.0.0.1:7001"), want: Error("ASK 3999 127.0.0.1:9001")},
		{name: "+switch-master", in: push("m 127.0.0.1 7001 127.0.0.1 7002"), want: push("m 127.0.0.1 9001 127.0.0.1 9002")},
		{name: "not a topology reply", cmd: cmd("GET", "k"), in: Bulk("127.0.0.1:7001"), unchanged: true},
		{name: "a list that looks like an address", cmd: cmd("LRANGE", "k", "0", "-1"), in: Array(Bulk("127.0.0.1"), Int(7001)), unchanged: true},
		{name: "longer port", cmd: cmd("GET"), in: Error("MOVED 1 127.0.0.1:70010"), unchanged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.in.Bytes()
			got := p.rewrite(tc.cmd, raw)
			want := tc.want.Bytes()
			if tc.unchanged {
				want = raw
			}
			if string(got) != string(want) {
				t.Errorf("rewrite(%q)\n = %q\nwant %q", raw, got, want)
			}
		})
	}
	t.Run("no map", func(t *testing.T) {
		raw := Error("MOVED 1 127.0.0.1:7001").Bytes()
		if got := (&Proxy{}).rewrite(cmd("GET"), raw); string(got) != string(raw) {
			t.Errorf("rewrite without a map = %q", got)
		}
	})
}
