// Package benchproc measures the processes of the project's benchmarks
// (bench/rls, bench/rlqs): their CPU time from /proc, Redis' from INFO,
// and starts them apart from the caller's environment on loopback ports
// handed out once.
package benchproc

import (
	"bytes"
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

// ProcCPU returns the user plus system CPU time process pid has used so
// far, all its threads included, from /proc/PID/stat (Linux only). Its
// resolution is one clock tick (10 ms on Linux).
func ProcCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read the CPU time of pid %d (needs Linux' /proc): %w", pid, err)
	}
	return ParseProcStat(b, ClockTicks())
}

// maxSeconds bounds a CPU time read from /proc or INFO (about 30 years),
// so that converting it to a time.Duration cannot overflow.
const maxSeconds = 1e9

// ParseProcStat reads utime and stime (fields 14 and 15, in clock ticks)
// of a /proc/PID/stat line and returns their sum. The command name, field
// 2, is in parentheses and may hold spaces and parentheses itself: fields
// are counted from the last ')'.
func ParseProcStat(b []byte, ticksPerSecond int64) (time.Duration, error) {
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

// parseCommandStat reads "calls=400,usec=9000,usec_per_call=22.50,...".
func parseCommandStat(v string) (CommandTime, error) {
	calls, rest, _ := strings.Cut(v, ",")
	usec, _, _ := strings.Cut(rest, ",")
	var c CommandTime
	var err1, err2 error
	c.Calls, err1 = strconv.ParseInt(strings.TrimPrefix(calls, "calls="), 10, 64)
	c.Usec, err2 = strconv.ParseInt(strings.TrimPrefix(usec, "usec="), 10, 64)
	if err1 != nil || c.Calls < 0 || !strings.HasPrefix(calls, "calls=") ||
		err2 != nil || c.Usec < 0 || !strings.HasPrefix(usec, "usec=") {
		return c, errors.New("not calls=N,usec=N")
	}
	return c, nil
}

// MachineCPU returns the CPU time every processor of the machine has spent
// busy so far, every process and the kernel's own work included, from
// /proc/stat (Linux only): what runs beside a measurement shows as this
// less the measured processes' time.
func MachineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read the machine's CPU time (needs Linux' /proc): %w", err)
	}
	return ParseMachineStat(b, ClockTicks())
}

// ParseMachineStat reads /proc/stat's first line, "cpu user nice system
// idle iowait irq softirq steal ..." in clock ticks, and returns user +
// nice + system + irq + softirq + steal.
func ParseMachineStat(b []byte, ticksPerSecond int64) (time.Duration, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" || ticksPerSecond <= 0 {
		return 0, fmt.Errorf("%w /proc/stat %.80q", ErrParse, line)
	}
	var ticks int64
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || n/ticksPerSecond > maxSeconds {
			return 0, fmt.Errorf("%w /proc/stat field %q", ErrParse, v)
		}
		if i != 3 && i != 4 { // idle, iowait
			ticks += n
		}
	}
	secs, rest := ticks/ticksPerSecond, ticks%ticksPerSecond
	return time.Duration(secs)*time.Second + time.Duration(rest)*time.Second/time.Duration(ticksPerSecond), nil
}

// ClockTicks returns the kernel's USER_HZ, the unit of /proc/PID/stat's
// times: getconf CLK_TCK, or 100, its value on every Linux architecture
// Go supports.
var ClockTicks = sync.OnceValue(func() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil && n > 0 {
			return n
		}
	}
	return 100
})

// RedisStats are the counters of one INFO reply that a run reads twice.
type RedisStats struct {
	CPU      time.Duration // used_cpu_sys + used_cpu_user: Redis' own CPU, every thread
	Sys      time.Duration // used_cpu_sys: the kernel's share of it
	Commands int64         // total_commands_processed
	Scripts  int64         // calls of EVALSHA, EVAL and FCALL (INFO commandstats)
	// Timed holds the calls and time of each of TimedCommands (INFO
	// commandstats; commands a script runs count there too).
	Timed [len(TimedCommands)]CommandTime
}

// CommandTime is what INFO commandstats says of one command.
type CommandTime struct {
	Calls int64 // calls
	Usec  int64 // µs spent running them
}

// PerCall returns the µs a call, 0 without calls.
func (c CommandTime) PerCall() float64 {
	if c.Calls <= 0 {
		return 0
	}
	return float64(c.Usec) / float64(c.Calls)
}

// TimedCommands are the commands whose time RedisStats keeps: the
// scripts', and the reference's.
var TimedCommands = [...]string{"evalsha", "eval", "incrby", "expire", "fcall"}

// Add returns s + o, field by field.
func (s RedisStats) Add(o RedisStats) RedisStats {
	r := RedisStats{CPU: s.CPU + o.CPU, Sys: s.Sys + o.Sys, Commands: s.Commands + o.Commands, Scripts: s.Scripts + o.Scripts}
	for i := range r.Timed {
		r.Timed[i] = CommandTime{Calls: s.Timed[i].Calls + o.Timed[i].Calls, Usec: s.Timed[i].Usec + o.Timed[i].Usec}
	}
	return r
}

// Sub returns s - o, field by field.
func (s RedisStats) Sub(o RedisStats) RedisStats {
	r := RedisStats{CPU: s.CPU - o.CPU, Sys: s.Sys - o.Sys, Commands: s.Commands - o.Commands, Scripts: s.Scripts - o.Scripts}
	for i := range r.Timed {
		r.Timed[i] = CommandTime{Calls: s.Timed[i].Calls - o.Timed[i].Calls, Usec: s.Timed[i].Usec - o.Timed[i].Usec}
	}
	return r
}

// scriptCommands are the commandstats entries of script calls.
var scriptCommands = []string{"cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall"}

// ParseInfo reads used_cpu_sys, used_cpu_user (seconds, microsecond
// precision) and total_commands_processed from the text of an INFO reply
// (sections cpu and stats at least), and the calls of script commands and
// the calls and time of TimedCommands from its commandstats section when
// it has one. The children's CPU (used_cpu_*_children: forks for
// persistence) is not Redis' own work and is left out.
func ParseInfo(text string) (RedisStats, error) {
	var s RedisStats
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
			s.CPU += d
			if k == "used_cpu_sys" {
				s.Sys = d
			}
			seen++
		case "total_commands_processed":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return s, fmt.Errorf("%w INFO %s:%q", ErrParse, k, v)
			}
			s.Commands = n
			seen++
		default:
			name, ok := strings.CutPrefix(k, "cmdstat_")
			timed := slices.Index(TimedCommands[:], name)
			if !ok || timed < 0 && !slices.Contains(scriptCommands, k) {
				continue
			}
			c, err := parseCommandStat(v)
			if err != nil {
				return s, fmt.Errorf("%w INFO %s:%q", ErrParse, k, v)
			}
			if slices.Contains(scriptCommands, k) {
				s.Scripts += c.Calls
			}
			if timed >= 0 {
				s.Timed[timed] = c
			}
		}
	}
	if seen != 3 {
		return s, fmt.Errorf("%w INFO: used_cpu_sys, used_cpu_user or total_commands_processed missing", ErrParse)
	}
	return s, nil
}
