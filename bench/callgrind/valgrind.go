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

// The redis-server functions that run the rows' commands (a script's
// redis.calls run in them, and in scriptFunc).
var (
	scriptFuncs    = []string{"evalShaCommand", "evalCommand"}
	referenceFuncs = []string{"incrbyCommand", "expireCommand"}
	scriptFunc     = "scriptCall"
)

// count profiles base and base followed by measured, and returns the
// difference over o.calls calls.
func count(ctx context.Context, o *options, s *streams, name string) (cost, error) {
	base, err := profile(ctx, o, s.base, s.funcs, "")
	if err != nil {
		return cost{}, err
	}
	keep := ""
	if o.keep != "" {
		keep = filepath.Join(o.keep, name+".callgrind")
	}
	all, err := profile(ctx, o, append(bytes.Clone(s.base), s.measured...), s.funcs, keep)
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
// instructions, whole and in funcs; keep, if set, is where the profile
// goes.
func profile(ctx context.Context, o *options, stream []byte, funcs []string, keep string) (cost, error) {
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
	f, err := os.Open(out)
	if err != nil {
		return cost{}, err
	}
	defer f.Close()
	total, incl, err := parseProfile(f)
	if err != nil {
		return cost{}, fmt.Errorf("%s: %w", out, err)
	}
	c := cost{total: total, command: -1, inner: -1}
	for _, name := range funcs {
		if v, ok := incl[name]; ok {
			c.command = max(c.command, 0) + v
		}
	}
	if v, ok := incl[scriptFunc]; ok {
		c.inner = v
	}
	return c, nil
}

// parseProfile reads a callgrind profile (one event, Ir; positions by
// line): its total, and the inclusive cost of each named function, summed
// over the calls into it from other functions. (callgrind_annotate's
// inclusive figures count some cycles twice.)
func parseProfile(r io.Reader) (total int64, incl map[string]int64, err error) {
	names := map[string]string{} // "(id)" -> name
	name := func(ref string) string {
		id, rest, _ := strings.Cut(ref, " ")
		if rest != "" {
			names[id] = rest
			return rest
		}
		return names[id]
	}
	incl = map[string]int64{}
	var fn, callee string
	afterCalls := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "fn="):
			fn = name(line[3:])
		case strings.HasPrefix(line, "cfn="):
			callee = name(line[4:])
		case strings.HasPrefix(line, "calls="):
			afterCalls = true
		case afterCalls:
			afterCalls = false
			f := strings.Fields(line)
			if len(f) < 2 {
				return 0, nil, fmt.Errorf("%w: call cost %q", errProfile, line)
			}
			v, err := strconv.ParseInt(f[len(f)-1], 10, 64)
			if err != nil {
				return 0, nil, fmt.Errorf("%w: call cost %q", errProfile, line)
			}
			if callee != fn {
				incl[callee] += v
			}
		case strings.HasPrefix(line, "totals:"), strings.HasPrefix(line, "summary:"):
			v, err := strconv.ParseInt(strings.TrimSpace(line[strings.IndexByte(line, ':')+1:]), 10, 64)
			if err != nil {
				return 0, nil, fmt.Errorf("%w: %q", errProfile, line)
			}
			total = v
		}
	}
	if err := sc.Err(); err != nil {
		return 0, nil, err
	}
	if total == 0 {
		return 0, nil, fmt.Errorf("%w: no total", errProfile)
	}
	return total, incl, nil
}

// errProfile marks a callgrind profile that does not parse.
var errProfile = errors.New("callgrind profile")
