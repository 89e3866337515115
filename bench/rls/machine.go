package main

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/internal/testing/procstat"
)

// machine are the facts a reader needs to weigh the figures.
type machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	Memory     string `json:"memory"`
	Kernel     string `json:"kernel"`
	Go         string `json:"go"`
	Redis      string `json:"redis_server"`
	LoadBefore string `json:"loadavg_before"` // 1, 5 and 15 minutes
	LoadAfter  string `json:"loadavg_after"`
	Date       string `json:"date"` // UTC, at the start
	GOMAXPROCS string `json:"gomaxprocs_env,omitempty"`
}

func readMachine(ctx context.Context, redisServer string) machine {
	m := machine{
		CPU:        "unknown",
		Cores:      runtime.NumCPU(),
		Memory:     "unknown",
		Kernel:     runtime.GOOS,
		Go:         runtime.Version(),
		LoadBefore: loadAverages(),
		Date:       time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		GOMAXPROCS: os.Getenv("GOMAXPROCS"),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if v := procField(string(b), "model name"); v != "" {
			m.CPU = v
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kib, err := strconv.ParseFloat(strings.TrimSuffix(procField(string(b), "MemTotal"), " kB"), 64); err == nil {
			m.Memory = strconv.FormatFloat(kib/(1<<20), 'f', 1, 64) + " GiB"
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel += " " + strings.TrimSpace(string(b))
	}
	m.Redis = "unknown"
	if out, err := exec.CommandContext(ctx, redisServer, "--version").Output(); err == nil {
		// "Redis server v=7.0.15 sha=... malloc=jemalloc-5.3.0 bits=64 ..."
		for f := range strings.FieldsSeq(string(out)) {
			if v, ok := strings.CutPrefix(f, "v="); ok {
				m.Redis = v
			}
		}
	}
	return m
}

// procField returns the value of the first "key: value" line of a /proc
// file, trimmed.
func procField(text, key string) string {
	for line := range strings.SplitSeq(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverages returns the 1, 5 and 15 minute load averages, or "".
func loadAverages() string { return procstat.LoadAverages() }

// loadAverage returns the 1-minute load average, or 0; tests replace it.
var loadAverage = readLoadAverage

func readLoadAverage() float64 {
	f := strings.Fields(loadAverages())
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
