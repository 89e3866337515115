package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrParse is wrapped by the errors of the /proc and INFO parsers.
var ErrParse = errors.New("cannot parse")

// procCPU returns the user plus system CPU time process pid has used so
// far, all its threads included, from /proc/PID/stat (Linux only). Its
// resolution is one clock tick (10 ms on Linux).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of pid %d (needs Linux' /proc): %w", pid, err)
	}
	return parseProcStat(b, clockTicks())
}

// maxSeconds bounds a CPU time read from /proc or INFO (about 30 years),
// so that converting it to a time.Duration cannot overflow.
const maxSeconds = 1e9

// parseProcStat reads utime and stime (fields 14 and 15, in clock ticks)
// of a /proc/PID/stat line and returns their sum. The command name, field
// 2, is in parentheses and may hold spaces and parentheses itself: fields
// are counted from the last ')'.
func parseProcStat(b []byte, ticksPerSecond int64) (time.Duration, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 || ticksPerSecond <= 0 {
		return 0, fmt.Errorf("%w /proc stat %q", ErrParse, b)
	}
	// After the name: state (field 3), ppid (4), ... utime (14), stime (15).
	fields := strings.Fields(string(b[end+1:]))
	const utime = 14 - 3
	if len(fields) <= utime+1 {
		return 0, fmt.Errorf("%w /proc stat: %d fields after the name, want at least %d", ErrParse, len(fields), utime+2)
	}
	var ticks int64
	for _, f := range fields[utime : utime+2] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 || n/ticksPerSecond > maxSeconds {
			return 0, fmt.Errorf("%w /proc stat field %q", ErrParse, f)
		}
		ticks += n
	}
	secs, rest := ticks/ticksPerSecond, ticks%ticksPerSecond
	return time.Duration(secs)*time.Second + time.Duration(rest)*time.Second/time.Duration(ticksPerSecond), nil
}

// clockTicks returns the kernel's USER_HZ, the unit of /proc/PID/stat's
// times: getconf CLK_TCK, or 100, its value on every Linux architecture
// Go supports.
var clockTicks = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
})

// redisStats are the counters of one INFO reply that a run reads twice.
type redisStats struct {
	cpu      time.Duration // used_cpu_sys + used_cpu_user: Redis' own CPU, every thread
	sys      time.Duration // used_cpu_sys: the kernel's share of it
	commands int64         // total_commands_processed
	scripts  int64         // calls of EVALSHA, EVAL and FCALL (INFO commandstats)
}

func (s redisStats) add(o redisStats) redisStats {
	return redisStats{cpu: s.cpu + o.cpu, sys: s.sys + o.sys, commands: s.commands + o.commands, scripts: s.scripts + o.scripts}
}

func (s redisStats) sub(o redisStats) redisStats {
	return redisStats{cpu: s.cpu - o.cpu, sys: s.sys - o.sys, commands: s.commands - o.commands, scripts: s.scripts - o.scripts}
}

// scriptCommands are the commandstats entries of script calls.
var scriptCommands = []string{"cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall"}

// parseInfo reads used_cpu_sys, used_cpu_user (seconds, microsecond
// precision) and total_commands_processed from the text of an INFO reply
// (sections cpu and stats at least), and the calls of script commands
// from its commandstats section when it has one. The children's CPU
// (used_cpu_*_children: forks for persistence) is not Redis' own work and
// is left out.
func parseInfo(text string) (redisStats, error) {
	var s redisStats
	var seen int
	for line := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
		if !ok {
			continue
		}
		switch k {
		case "used_cpu_sys", "used_cpu_user":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f < maxSeconds) {
				return s, fmt.Errorf("%w INFO %s:%q", ErrParse, k, v)
			}
			d := time.Duration(f * float64(time.Second))
			s.cpu += d
			if k == "used_cpu_sys" {
				s.sys = d
			}
			seen++
		case "total_commands_processed":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return s, fmt.Errorf("%w INFO %s:%q", ErrParse, k, v)
			}
			s.commands = n
			seen++
		default:
			if !slices.Contains(scriptCommands, k) {
				continue
			}
			calls, _, _ := strings.Cut(v, ",")
			n, err := strconv.ParseInt(strings.TrimPrefix(calls, "calls="), 10, 64)
			if err != nil || n < 0 || !strings.HasPrefix(calls, "calls=") {
				return s, fmt.Errorf("%w INFO %s:%q", ErrParse, k, v)
			}
			s.scripts += n
		}
	}
	if seen != 3 {
		return s, fmt.Errorf("%w INFO: used_cpu_sys, used_cpu_user or total_commands_processed missing", ErrParse)
	}
	return s, nil
}

// infoCPU runs redis-cli INFO against addr and parses it.
func infoCPU(ctx context.Context, cli, addr string) (redisStats, error) {
	out, err := redisCLI(ctx, cli, addr, "INFO", "cpu", "stats", "commandstats")
	if err != nil {
		return redisStats{}, err
	}
	return parseInfo(out)
}
