package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/store"
)

func TestTracingOptions(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string // "" for valid
	}{
		{"off ignores the rest", Options{ExporterProtocol: "udp", SamplingRate: 7}, ""},
		{"http", Options{Enabled: true, ExporterProtocol: "http", SamplingRate: 1}, ""},
		{"GRPC in capitals", Options{Enabled: true, ExporterProtocol: "GRPC", SamplingRate: 0}, ""},
		{"other protocol", Options{Enabled: true, ExporterProtocol: "zipkin", SamplingRate: 1}, `TRACING_EXPORTER_PROTOCOL: "zipkin" is neither http nor grpc`},
		{"rate above 1", Options{Enabled: true, ExporterProtocol: "http", SamplingRate: 100}, "TRACING_SAMPLING_RATE: 100 is not between 0 and 1"},
		{"negative rate", Options{Enabled: true, ExporterProtocol: "http", SamplingRate: -0.5}, "TRACING_SAMPLING_RATE: -0.5 is not between 0 and 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Validate()
			if tc.want == "" && err != nil {
				t.Fatalf("validate = %v, want nil", err)
			}
			if tc.want != "" && (err == nil || err.Error() != tc.want) {
				t.Fatalf("validate = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestTracingOff checks that tracing off installs nothing: no gRPC
// option, the store and the HTTP handler unwrapped.
func TestTracingOff(t *testing.T) {
	tr, err := New(Options{ServiceName: "RateLimit", ExporterProtocol: "http", SamplingRate: 1}, zap.NewNop())
	if err != nil || tr != nil {
		t.Fatalf("New(off) = %v, %v; want nil, nil", tr, err)
	}
	if opts := tr.ServerOptions("/a/b"); opts != nil {
		t.Errorf("ServerOptions = %v, want none", opts)
	}
	st := store.NewMemory(store.MemoryOptions{})
	defer st.Close()
	if got := tr.Store(st, "memory"); got != limiter.Store(st) {
		t.Errorf("store wrapped: %T", got)
	}
	h := http.NewServeMux()
	if got := tr.HTTP("x", h); got != http.Handler(h) {
		t.Errorf("handler wrapped: %T", got)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestThrottledErrors(t *testing.T) {
	core, logs := zapobserver.New(zapcore.WarnLevel)
	now := time.Unix(1000, 0)
	h := &throttled{log: zap.New(core), every: time.Minute, now: func() time.Time { return now }}
	for _, step := range []struct {
		advance  time.Duration
		wantLogs int
	}{
		{0, 1}, {time.Second, 1}, {30 * time.Second, 1}, {29 * time.Second, 2}, {time.Second, 2}, {time.Hour, 3},
	} {
		now = now.Add(step.advance)
		h.Handle(errors.New("export failed"))
		if n := logs.Len(); n != step.wantLogs {
			t.Fatalf("after %v: %d lines logged, want %d", step.advance, n, step.wantLogs)
		}
	}
	last := logs.All()[2].ContextMap()["errors_not_logged"]
	if last != int64(1) {
		t.Errorf("errors_not_logged = %v, want 1", last)
	}
}

// TestSDKLogDropsValues: the SDK's own lines are logged without their
// key/values, which may quote a header's token.
func TestSDKLogDropsValues(t *testing.T) {
	core, logs := zapobserver.New(zapcore.DebugLevel)
	l := logr.New(sdkLog{zap.New(core)})
	l.Error(errors.New("missing '="), "parse headers", "input", "Authorization Bearer s3cret")
	l.V(1).Info("a warning", "input", "s3cret")
	l.V(4).Info("info: not logged", "input", "s3cret")
	if logs.Len() != 2 {
		t.Fatalf("%d lines logged, want 2: %v", logs.Len(), logs.All())
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), "s3cret") {
			t.Errorf("logged the secret: %s %v", e.Message, e.ContextMap())
		}
	}
}
