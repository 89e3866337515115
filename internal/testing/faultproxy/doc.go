// Package faultproxy is a fault-injecting TCP proxy for tests, between
// Redis clients and a real redis-server. It parses commands and replies
// (RESP2 and RESP3), so that a Fault can target the nth command, a command
// by name, a handshake or a connection, and act at a reply's boundary or
// inside it. Faults are added and released at run time; Stats counts what
// Redis really did. A Set fronts every node of a Cluster or a sentinel
// setup. docs/development.md#the-fault-proxy has an example.
package faultproxy
