package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/loopback"
	"github.com/fastlimit/fastlimit/internal/testing/wait"
)

// cost is what a row's measured calls cost, instructions a call: in the
// functions that run commands (EVALSHA's, or INCRBY's and EXPIRE's: the
// time INFO commandstats reports), of which in the commands a script
// runs (redis.call), and in the whole server (reading, parsing and
// replying included). -1: the profile does not name the function.
type cost struct {
	command, inner, total int64
}

// commandFuncs are the redis-server functions that run the rows' commands;
// scriptFunc runs a script's redis.call.
var (
	commandFuncs = []string{"evalShaCommand", "evalCommand", "incrbyCommand", "expireCommand"}
	scriptFunc   = "scriptCall"
)

// count profiles base and base followed by measured, and returns the
// difference over o.calls calls.
func count(ctx context.Context, o *options, s *streams, name string) (cost, error) {
	base, err := profile(ctx, o, s.base, "")
	if err != nil {
		return cost{}, err
	}
	keep := ""
	if o.keep != "" {
		keep = filepath.Join(o.keep, name+".callgrind")
	}
	all, err := profile(ctx, o, append(bytes.Clone(s.base), s.measured...), keep)
	if err != nil {
		return cost{}, err
	}
	if time.Now().Unix()/3600 != s.hour {
		return cost{}, errors.New("the hour turned between recording and replay (the store's window guesses are stale): run again")
	}
	n := int64(o.calls)
	c := cost{total: (all.total - base.total) / n, command: -1, inner: -1}
	if all.command >= 0 {
		c.command = (all.command - max(base.command, 0)) / n
	}
	if all.inner >= 0 {
		c.inner = (all.inner - max(base.inner, 0)) / n
	}
	return c, nil
}

// profile feeds stream to a redis-server under callgrind and returns its
// instructions, whole and in the command functions; keep, if set, is where
// the profile goes.
func profile(ctx context.Context, o *options, stream []byte, keep string) (cost, error) {
	dir, err := os.MkdirTemp("", "callgrind-")
	if err != nil {
		return cost{}, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "callgrind.out")
	if keep != "" {
		out = keep
	}
	port, err := loopback.FreePort()
	if err != nil {
		return cost{}, err
	}
	p := strconv.Itoa(port)
	var log bytes.Buffer
	vg := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+out,
		o.server, "--port", p, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	vg.Stdout, vg.Stderr = &log, &log
	if err := vg.Start(); err != nil {
		return cost{}, fmt.Errorf("start valgrind (Debian: apt-get install valgrind): %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- vg.Wait() }()
	cli := func(stdin io.Reader, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, o.cli, append([]string{"-h", "127.0.0.1", "-p", p}, args...)...)
		cmd.Stdin = stdin
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	err = wait.Until(ctx, 60*time.Second, func() error {
		out, err := cli(nil, "PING")
		if err == nil && strings.TrimSpace(out) != "PONG" {
			err = errors.New(out)
		}
		return err
	})
	if err == nil {
		var res string
		res, perr := cli(bytes.NewReader(stream), "--pipe")
		if perr != nil || !strings.Contains(res, "errors: 0,") {
			err = fmt.Errorf("redis-cli --pipe: %v: %s", perr, strings.TrimSpace(res))
		}
	}
	_, _ = cli(nil, "SHUTDOWN", "NOSAVE")
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		_ = vg.Process.Kill()
		<-exited
	}
	if err != nil {
		return cost{}, fmt.Errorf("%w\n%s", err, log.String())
	}
	c := cost{command: -1, inner: -1}
	if c.total, err = collected(log.String()); err != nil {
		return cost{}, err
	}
	ann, err := exec.CommandContext(ctx, "callgrind_annotate", "--inclusive=yes", "--threshold=100", out).Output()
	if err != nil {
		return cost{}, fmt.Errorf("callgrind_annotate: %w", err)
	}
	incl := inclusive(string(ann))
	for _, f := range commandFuncs {
		if v, ok := incl[f]; ok {
			c.command = max(c.command, 0) + v
		}
	}
	if v, ok := incl[scriptFunc]; ok {
		c.inner = v
	}
	return c, nil
}

// collected reads the instructions callgrind counted from its log.
func collected(log string) (int64, error) {
	m := regexp.MustCompile(`Collected : (\d+)`).FindStringSubmatch(log)
	if m == nil {
		return 0, fmt.Errorf("no instruction count in valgrind's output:\n%s", log)
	}
	return strconv.ParseInt(m[1], 10, 64)
}

// annotateLine is a line of callgrind_annotate's function list:
// "35,545,457 (52.86%)  ???:evalShaCommand [/usr/bin/redis-server]".
var annotateLine = regexp.MustCompile(`^\s*([\d,]+) \([^)]*\)\s+\S*?:([A-Za-z_][A-Za-z0-9_]*)(?:'\d+)? `)

// inclusive returns each named function's inclusive instructions from
// callgrind_annotate --inclusive=yes output (the first line of each).
func inclusive(text string) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := annotateLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if _, seen := out[m[2]]; seen {
			continue
		}
		v, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64)
		if err == nil {
			out[m[2]] = v
		}
	}
	return out
}
