// Package faultproxy is a fault-injecting TCP proxy for tests, between
// Redis clients and a real redis-server, that breaks the network the way
// production networks break.
//
// A Proxy listens on a free loopback port and opens one upstream
// connection per client connection. It reads the clients' commands (RESP
// arrays of bulk strings, or inline commands) and the server's replies
// (RESP2 and RESP3, attributes and pushes included), so that a fault can
// target the nth command, a command by name (EVALSHA, SELECT, HELLO...),
// a connection's handshake, or a given connection, and act at a reply's
// boundary or inside it:
//
//	DropMidReply   close after part of a reply (the client sees EOF or a reset)
//	DropAndLose    forward a command, lose its reply, close
//	DropRequest    close without forwarding a command
//	ExtraReply     inject an unsolicited reply: replies are off by one after it
//	HoldReplies    deliver replies late; Freeze holds them (or commands) until released
//	SlowHandshake  delay the first replies of each connection, and the dial
//	SplitReplies   deliver replies in small pieces
//	ErrorReply     answer with BUSY, OOM, READONLY, LOADING, NOSCRIPT... instead of Redis
//	CutAll         reset every connection, and refuse new ones for a while
//
// Faults are added and released at run time, from any goroutine. Stats
// counts connections, commands forwarded (by name), replies delivered and
// faults applied, so that a test can check a client's answers against
// what Redis really did. A Group puts a proxy in front of every node of a
// Redis Cluster or a sentinel setup, and rewrites the node addresses the
// servers hand out so that clients reach the nodes only through proxies.
//
// A store test that drops one reply in the middle and checks what Redis
// counted:
//
//	addr := redistest.Addr(t)
//	p := faultproxy.New(t, addr) // closed when t ends
//	rule := p.Add(&faultproxy.DropMidReply{Match: faultproxy.Nth(3, "EVALSHA"), After: 4})
//	store := newStore(t, p.Addr()) // the client under test dials the proxy
//	// ... run calls; the third EVALSHA's caller sees its connection end
//	// mid-reply, though the script ran ...
//	<-rule.Done()
//	if got := p.Forwarded("EVALSHA"); got != calls {
//		t.Errorf("Redis ran %d scripts, want %d", got, calls)
//	}
//
// The package is for tests: it favours exactness over speed, and buffers
// each reply whole before it forwards it.
package faultproxy
