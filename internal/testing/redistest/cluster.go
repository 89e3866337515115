package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// clusterSize is the number of masters of a Cluster; each has one replica.
const clusterSize = 3

// Cluster is a Redis Cluster of three masters with one replica each, on
// free loopback ports, without persistence. StartCluster makes one per
// test; it stops when the test ends, and on Linux it also dies with the
// test binary.
type Cluster struct {
	nodes []*proc
	dir   string
	stop  sync.Once
}

// StartCluster starts six cluster-enabled redis-server processes, joins
// them with redis-cli --cluster create, and waits until every node says
// cluster_state:ok and every replica is in sync with its master (about
// three seconds). It skips t when redis-server or redis-cli is missing,
// or fails it with FASTLIMIT_REQUIRE_REDIS=1.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	server := lookPath(t, "redis-server")
	cli := lookPath(t, "redis-cli")
	c := &Cluster{}
	c.dir = setupDir(t, "cluster", c.Logs, c.Stop)
	dir := c.dir
	start := time.Now()
	// Start the nodes in parallel: each takes a few hundred ms.
	c.nodes = make([]*proc, 2*clusterSize)
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nodes[i], errs[i] = startProc(fmt.Sprintf("node %d", i+1), server, dir, clusterNodeArgs)
		}()
	}
	wg.Wait()
	c.nodes = compact(c.nodes)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start cluster nodes: %v", err)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	create := exec.CommandContext(ctx, cli, args...)
	create.SysProcAttr = child.Attr()
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := wait.Until(context.Background(), waitTimeout, func() error { return c.ready(true) }); err != nil {
		t.Fatalf("redis cluster not ready: %v", err)
	}
	t.Logf("redis cluster of %d nodes ready in %v: %s", len(c.nodes), time.Since(start).Round(time.Millisecond), c.Seeds())
	return c
}

func clusterNodeArgs(port int, dir string) ([]string, error) {
	// The bus port defaults to port+10000, which may be taken or past
	// 65535: choose a free one.
	bus, err := loopback.FreePort()
	if err != nil {
		return nil, err
	}
	return []string{
		"--port", strconv.Itoa(port),
		"--cluster-port", strconv.Itoa(bus),
		"--bind", "127.0.0.1",
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "1000",
		"--repl-diskless-sync", "yes",
		"--repl-diskless-sync-delay", "0",
		// Replicas appear in CLUSTER SLOTS once their replication
		// offset moves: ping them every second rather than every ten.
		"--repl-ping-replica-period", "1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
	}, nil
}

func compact(ps []*proc) []*proc {
	out := ps[:0]
	for _, p := range ps {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// ready checks that every live node has the whole slot map, knows every
// node, and that every live replica's link to its master is up; with
// replicas, also that every node lists a replica for every slot range in
// CLUSTER SLOTS, as clients see them.
func (c *Cluster) ready(replicas bool) error {
	live := 0
	for _, n := range c.nodes {
		if !n.Alive() {
			continue
		}
		live++
		info, err := doString(n.addr, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.addr, err)
		}
		if s := infoField(info, "cluster_state"); s != "ok" {
			return fmt.Errorf("%s: cluster_state %q", n.addr, s)
		}
		if s := infoField(info, "cluster_slots_ok"); s != "16384" {
			return fmt.Errorf("%s: cluster_slots_ok %q", n.addr, s)
		}
		if s := infoField(info, "cluster_known_nodes"); s != strconv.Itoa(len(c.nodes)) {
			return fmt.Errorf("%s: cluster_known_nodes %q", n.addr, s)
		}
		repl, err := doString(n.addr, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("%s: INFO replication: %w", n.addr, err)
		}
		if infoField(repl, "role") == "slave" {
			if s := infoField(repl, "master_link_status"); s != "up" {
				return fmt.Errorf("%s: replica link %q", n.addr, s)
			}
			if s := infoField(repl, "master_sync_in_progress"); s != "0" {
				return fmt.Errorf("%s: replica still syncing", n.addr)
			}
		}
		if replicas {
			v, err := do(n.addr, "CLUSTER", "SLOTS")
			if err != nil {
				return fmt.Errorf("%s: CLUSTER SLOTS: %w", n.addr, err)
			}
			ranges, _ := v.([]any)
			for _, r := range ranges {
				// [start, end, master, replicas…]
				if e, _ := r.([]any); len(e) < 4 {
					return fmt.Errorf("%s: CLUSTER SLOTS range without a replica: %v", n.addr, e)
				}
			}
		}
	}
	if live == 0 {
		return errors.New("no node is running")
	}
	return nil
}

// Addrs returns the address of every node, masters and replicas, dead or
// alive.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr
	}
	return out
}

// Seeds returns the nodes' addresses comma-separated, as --redis-url
// takes them with --redis-type cluster.
func (c *Cluster) Seeds() string { return strings.Join(c.Addrs(), ",") }

// MasterOf returns the address of the node that serves key's slot as a
// master, as a live node sees it.
func (c *Cluster) MasterOf(t testing.TB, key string) string {
	t.Helper()
	addr, err := c.masterOf(key)
	if err != nil {
		t.Fatalf("master of %q: %v", key, err)
	}
	return addr
}

func (c *Cluster) masterOf(key string) (string, error) {
	var errs []error
	for _, n := range c.nodes {
		if !n.Alive() {
			continue
		}
		addr, err := slotMaster(n.addr, key)
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("no live node answers: %w", errors.Join(errs...))
}

// slotMaster asks the node at addr which master serves key.
func slotMaster(addr, key string) (string, error) {
	v, err := do(addr, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return "", err
	}
	slot, ok := v.(int64)
	if !ok {
		return "", fmt.Errorf("CLUSTER KEYSLOT answered %T", v)
	}
	v, err = do(addr, "CLUSTER", "SLOTS")
	if err != nil {
		return "", err
	}
	ranges, _ := v.([]any)
	for _, r := range ranges {
		// [start, end, [ip, port, id, …], replicas…]
		e, _ := r.([]any)
		if len(e) < 3 {
			continue
		}
		start, _ := e[0].(int64)
		end, _ := e[1].(int64)
		if slot < start || slot > end {
			continue
		}
		m, _ := e[2].([]any)
		if len(m) < 2 {
			break
		}
		ip, _ := m[0].(string)
		port, _ := m[1].(int64)
		return net.JoinHostPort(ip, strconv.FormatInt(port, 10)), nil
	}
	return "", fmt.Errorf("slot %d has no master", slot)
}

// Kill ends the node at addr with SIGKILL, as a crash would.
func (c *Cluster) Kill(t testing.TB, addr string) {
	t.Helper()
	for _, n := range c.nodes {
		if n.addr == addr {
			n.Kill()
			return
		}
	}
	t.Fatalf("no cluster node at %s", addr)
}

// WaitFailover waits until a live node other than old serves key's slot
// as a master and every live node has the whole slot map again, and
// returns the new master's address.
func (c *Cluster) WaitFailover(t testing.TB, key, old string) string {
	t.Helper()
	var addr string
	err := wait.Until(context.Background(), waitTimeout, func() error {
		a, err := c.masterOf(key)
		if err != nil {
			return err
		}
		if a == old {
			return fmt.Errorf("%s still serves %q", old, key)
		}
		addr = a
		return c.ready(false)
	})
	if err != nil {
		t.Fatalf("cluster failover from %s: %v\n%s", old, err, c.Logs())
	}
	return addr
}

// Logs returns the last lines of every node's output.
func (c *Cluster) Logs() string { return logs(c.nodes, 40) }

// Stop kills every node and removes their directories. It is idempotent;
// StartCluster arranges for it to run when the test ends.
func (c *Cluster) Stop() {
	c.stop.Do(func() {
		for _, n := range c.nodes {
			n.Kill()
		}
		_ = os.RemoveAll(c.dir)
	})
}
