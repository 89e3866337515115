package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/child"
	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/procstat"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// Timeouts of Redis' start and of one redis-cli call: generous, for a
// loaded machine.
const (
	redisStartTimeout = 20 * time.Second
	redisCLITimeout   = 10 * time.Second
)

// clusterMasters is the size of the Redis Cluster of the cluster scenario.
const clusterMasters = 3

// redisTools are the paths of redis-server and redis-cli.
type redisTools struct {
	server, cli string
}

// redisDeploy is the Redis of one server: one redis-server, or the
// masters of a Redis Cluster (no replicas). Each server under test has its
// own, so that one's keys and CPU never mix with the other's.
type redisDeploy struct {
	tools   redisTools
	nodes   []*child.Process
	addrs   []string // host:port of each node, as nodes
	cluster bool
}

// startRedis starts one redis-server (or, with cluster, the masters of a
// Redis Cluster joined with redis-cli --cluster create) on free loopback
// ports, without persistence, and waits until it serves requests.
func startRedis(ctx context.Context, ps *child.Group, pp *loopback.Ports, tools redisTools, name string, cluster bool) (*redisDeploy, error) {
	d := &redisDeploy{tools: tools, cluster: cluster}
	n := 1
	if cluster {
		n = clusterMasters
	}
	for i := range n {
		nodeName := "redis-server for " + name
		if cluster {
			nodeName = fmt.Sprintf("redis cluster node %d for %s", i+1, name)
		}
		p, addr, err := d.startNode(ctx, ps, pp, nodeName)
		if err != nil {
			d.stop(ps)
			return nil, err
		}
		d.nodes = append(d.nodes, p)
		d.addrs = append(d.addrs, addr)
	}
	if cluster {
		if err := d.createCluster(ctx); err != nil {
			d.stop(ps)
			return nil, err
		}
	}
	return d, nil
}

func (d *redisDeploy) startNode(ctx context.Context, ps *child.Group, pp *loopback.Ports, name string) (*child.Process, string, error) {
	port, err := pp.Free()
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp(ps.Dir, "redis-")
	if err != nil {
		return nil, "", err
	}
	args := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--logfile", "",
	}
	if d.cluster {
		// The bus port defaults to port+10000, which may be taken or
		// past 65535: choose a free one.
		bus, err := pp.Free()
		if err != nil {
			return nil, "", err
		}
		args = append(args, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000")
	}
	p, err := ps.Start(name, d.tools.server, args, child.Env())
	if err != nil {
		return nil, "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	err = wait.Until(ctx, redisStartTimeout, func() error {
		if !p.Alive() {
			return errors.New("exited")
		}
		out, err := redisCLI(ctx, d.tools.cli, addr, "PING")
		if err == nil && strings.TrimSpace(out) != "PONG" {
			err = fmt.Errorf("PING answered %q", out)
		}
		return err
	})
	if err != nil {
		ps.Stop(p)
		return nil, "", p.Failure(fmt.Errorf("not serving on %s: %w", addr, err))
	}
	return p, addr, nil
}

// createCluster joins the nodes as masters and waits until each says
// cluster_state:ok and knows every other.
func (d *redisDeploy) createCluster(ctx context.Context) error {
	args := append([]string{"--cluster", "create"}, d.addrs...)
	args = append(args, "--cluster-yes")
	cctx, cancel := context.WithTimeout(ctx, redisStartTimeout)
	defer cancel()
	if out, err := exec.CommandContext(cctx, d.tools.cli, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	return wait.Until(ctx, redisStartTimeout, func() error {
		for _, addr := range d.addrs {
			out, err := redisCLI(ctx, d.tools.cli, addr, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if !strings.Contains(out, "cluster_state:ok") ||
				!strings.Contains(out, "cluster_known_nodes:"+strconv.Itoa(len(d.addrs))) {
				return fmt.Errorf("%s: cluster not formed yet", addr)
			}
		}
		return nil
	})
}

// stats returns the INFO counters summed over every node.
func (d *redisDeploy) stats(ctx context.Context) (procstat.RedisStats, error) {
	var sum procstat.RedisStats
	for _, addr := range d.addrs {
		s, err := infoCPU(ctx, d.tools.cli, addr)
		if err != nil {
			return sum, fmt.Errorf("redis %s: %w", addr, err)
		}
		sum = sum.Add(s)
	}
	return sum, nil
}

// alive returns an error naming the first node that has exited.
func (d *redisDeploy) alive() error {
	for _, p := range d.nodes {
		if !p.Alive() {
			return p.Failure(errors.New("exited during the run"))
		}
	}
	return nil
}

func (d *redisDeploy) stop(ps *child.Group) {
	for _, p := range d.nodes {
		ps.Stop(p)
	}
}

// describe says what d is, for the report.
func (d *redisDeploy) describe() string {
	if d.cluster {
		return fmt.Sprintf("Redis Cluster of %d masters", len(d.addrs))
	}
	return "one redis-server"
}

// redisCLI runs one command with redis-cli against addr and returns its
// output. An error reply is an error.
func redisCLI(ctx context.Context, cli, addr string, args ...string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, redisCLITimeout)
	defer cancel()
	argv := append([]string{"-h", host, "-p", port}, args...)
	out, err := exec.CommandContext(ctx, cli, argv...).CombinedOutput()
	s := string(out)
	if err != nil {
		return s, fmt.Errorf("redis-cli %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(s))
	}
	if strings.HasPrefix(s, "ERR") || strings.HasPrefix(s, "Could not connect") || strings.HasPrefix(s, "(error)") {
		return s, fmt.Errorf("redis-cli %s: %s", strings.Join(args, " "), strings.TrimSpace(s))
	}
	return s, nil
}

// findRedis finds redis-server and redis-cli, installing Debian's
// redis-server and redis-tools with apt-get when one is missing and
// install is set.
func findRedis(ctx context.Context, install bool, log io.Writer) (redisTools, error) {
	look := func() (redisTools, error) {
		var t redisTools
		var err error
		if t.server, err = exec.LookPath("redis-server"); err != nil {
			return t, err
		}
		t.cli, err = exec.LookPath("redis-cli")
		return t, err
	}
	t, err := look()
	if err == nil || !install {
		if err != nil {
			err = fmt.Errorf("%w: install redis-server and redis-cli (Debian: apt-get install redis-server redis-tools)", err)
		}
		return t, err
	}
	apt, aptErr := exec.LookPath("apt-get")
	if aptErr != nil {
		return t, fmt.Errorf("%w, and no apt-get to install it: install redis-server and redis-cli", err)
	}
	argv := []string{apt}
	if os.Geteuid() != 0 {
		sudo, sudoErr := exec.LookPath("sudo")
		if sudoErr != nil {
			return t, fmt.Errorf("%w; installing it needs root or sudo: apt-get install redis-server redis-tools", err)
		}
		argv = []string{sudo, apt}
	}
	fmt.Fprintln(log, "bench: installing redis-server and redis-tools with apt-get")
	for _, step := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "redis-server", "redis-tools"}} {
		cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], step...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return t, fmt.Errorf("apt-get %s: %w\n%s", step[0], err, out)
		}
	}
	return look()
}
