package procstat

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name string
		line string
		hz   int64
		want time.Duration
		err  bool
	}{
		{
			name: "plain",
			line: "4242 (fastlimit) S 1 4242 4242 0 -1 4194560 2185 0 0 0 150 37 0 0 20 0 9 0 123456 1300000000 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
			hz:   100,
			want: 1870 * time.Millisecond,
		},
		{
			name: "name with spaces and parentheses",
			line: "77 (redis-server *:6379) (x) R 1 77 77 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 4 0 999 1 1 1",
			hz:   100,
			want: 80 * time.Millisecond,
		},
		{
			name: "other clock rate",
			line: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 1000 24 0 0 20 0 1 0 1 1 1 1",
			hz:   1024,
			want: time.Second,
		},
		{name: "too few fields", line: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 1000", hz: 100, err: true},
		{name: "no name", line: "1 init S 0 1 1 0 -1 0 0 0 0 0 1 2 0 0", hz: 100, err: true},
		{name: "not a number", line: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 x 2 0 0 20 0 1", hz: 100, err: true},
		{name: "negative", line: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 -5 2 0 0 20 0 1", hz: 100, err: true},
		{name: "no clock rate", line: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 1 2 0 0 20 0 1", hz: 0, err: true},
		{name: "empty", line: "", hz: 100, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcStat([]byte(tt.line), tt.hz)
			wantParsed(t, got, err, tt.err, tt.want)
		})
	}
}

// wantParsed checks what a parser returned: an ErrParse when the case
// wants an error, want otherwise.
func wantParsed[T comparable](t *testing.T, got T, err error, wantErr bool, want T) {
	t.Helper()
	if wantErr {
		if !errors.Is(err, ErrParse) {
			t.Fatalf("got %+v, %v; want an ErrParse", got, err)
		}
		return
	}
	if err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
}

// TestProcCPUReadsThisProcess burns CPU until /proc/self/stat shows more
// of it: the reading is live, and grows with work.
func TestProcCPUReadsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc/PID/stat is Linux'")
	}
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	x := 1.0
	for {
		for range 1_000_000 {
			x = x*1.0000001 + 1e-9
		}
		after, err := ProcCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stuck at %v after 30 s of work (%v)", before, x)
		}
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Fatal("no error for a pid that does not exist")
	}
}

// info is an INFO cpu stats commandstats reply of Redis 7.0, with its
// CRLFs.
const info = "# CPU\r\nused_cpu_sys:1.234567\r\nused_cpu_user:2.000001\r\nused_cpu_sys_children:9.000000\r\n" +
	"used_cpu_user_children:9.000000\r\nused_cpu_sys_main_thread:1.200000\r\nused_cpu_user_main_thread:1.900000\r\n\r\n" +
	"# Stats\r\ntotal_connections_received:3\r\ntotal_commands_processed:4711\r\ninstantaneous_ops_per_sec:0\r\n\r\n" +
	"# Commandstats\r\ncmdstat_evalsha:calls=400,usec=9000,usec_per_call=22.50,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_eval:calls=2,usec=90,usec_per_call=45.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_incrby:calls=30,usec=31,usec_per_call=1.03,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n"

func TestParseInfo(t *testing.T) {
	tests := []struct {
		name string
		text string
		want RedisStats
		err  bool
	}{
		{name: "cpu, stats and commandstats", text: info,
			want: RedisStats{CPU: 3234568 * time.Microsecond, Sys: 1234567 * time.Microsecond, Commands: 4711, Scripts: 402,
				Timed: [len(TimedCommands)]CommandTime{{Calls: 400, Usec: 9000}, {Calls: 2, Usec: 90}, {Calls: 30, Usec: 31}, {}}}},
		{name: "LF only", text: "used_cpu_user:0.5\nused_cpu_sys:0.25\ntotal_commands_processed:0\n",
			want: RedisStats{CPU: 750 * time.Millisecond, Sys: 250 * time.Millisecond}},
		{name: "bad script calls", text: "used_cpu_sys:1\r\nused_cpu_user:1\r\ntotal_commands_processed:1\r\ncmdstat_evalsha:usec=3\r\n", err: true},
		{name: "bad time", text: "used_cpu_sys:1\r\nused_cpu_user:1\r\ntotal_commands_processed:1\r\ncmdstat_incrby:calls=3,usec=x\r\n", err: true},
		{name: "no stats section", text: "# CPU\r\nused_cpu_sys:1\r\nused_cpu_user:1\r\n", err: true},
		{name: "no cpu section", text: "# Stats\r\ntotal_commands_processed:1\r\n", err: true},
		{name: "bad float", text: "used_cpu_sys:abc\r\nused_cpu_user:1\r\ntotal_commands_processed:1\r\n", err: true},
		{name: "bad count", text: "used_cpu_sys:1\r\nused_cpu_user:1\r\ntotal_commands_processed:-1\r\n", err: true},
		{name: "an error reply", text: "ERR unknown command", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseInfo(tt.text)
			wantParsed(t, got, err, tt.err, tt.want)
		})
	}
}

func TestRedisStatsArithmetic(t *testing.T) {
	a := RedisStats{CPU: 3 * time.Second, Sys: time.Second, Commands: 10, Scripts: 5}
	b := RedisStats{CPU: time.Second, Sys: time.Millisecond, Commands: 4, Scripts: 2}
	a.Timed[0], b.Timed[0] = CommandTime{Calls: 5, Usec: 100}, CommandTime{Calls: 2, Usec: 30}
	if got := a.Add(b).Sub(b); got != a {
		t.Fatalf("a + b - b = %+v, want %+v", got, a)
	}
	want := RedisStats{CPU: 2 * time.Second, Sys: 999 * time.Millisecond, Commands: 6, Scripts: 3}
	want.Timed[0] = CommandTime{Calls: 3, Usec: 70}
	if got := a.Sub(b); got != want {
		t.Fatalf("a - b = %+v", got)
	}
	if got := want.Timed[0].PerCall(); got < 23.3 || got > 23.4 {
		t.Fatalf("µs a call %v, want 70/3", got)
	}
}

func TestParseMachineStat(t *testing.T) {
	const stat = "cpu  100 5 50 9000 20 3 2 1 0 0\ncpu0 50 2 25 4500 10 1 1 0 0 0\n"
	got, err := ParseMachineStat([]byte(stat), 100)
	wantParsed(t, got, err, false, 1610*time.Millisecond) // 100+5+50+3+2+1 ticks
	for _, bad := range []string{"", "cpu 1 2 3", "intr 1 2 3 4 5 6 7 8 9", "cpu 1 2 3 x 5 6 7 8 9"} {
		_, err := ParseMachineStat([]byte(bad), 100)
		wantParsed(t, 0, err, true, 0)
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("4242 (fastlimit) S 1 4242 4242 0 -1 4194560 2185 0 0 0 150 37 0 0 20 0 9 0"))
	f.Add([]byte("1 ()) S"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParseProcStat(b, 100)
		if err == nil && d < 0 {
			t.Fatalf("negative CPU time %v from %q", d, b)
		}
	})
}

func FuzzParseInfo(f *testing.F) {
	f.Add(info)
	f.Fuzz(func(t *testing.T, s string) {
		st, err := ParseInfo(s)
		if err == nil && (st.CPU < 0 || st.Sys < 0 || st.Sys > st.CPU || st.Commands < 0 || st.Scripts < 0) {
			t.Fatalf("negative counters %+v from %q", st, s)
		}
	})
}
