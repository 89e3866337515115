package e2e_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/fastlimit/fastlimit/internal/testing/envoytest"
	"github.com/fastlimit/fastlimit/internal/testing/files"
)

// untilMidnight is the time left in today's UTC day: the reset of a fixed
// window of a day.
func untilMidnight() time.Duration {
	now := time.Now().UTC()
	return now.Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(now)
}

// secondsNear reports whether header value v is a whole number of seconds
// within 5 s of want.
func secondsNear(v string, want time.Duration) bool {
	n, err := strconv.Atoi(v)
	d := time.Duration(n) * time.Second
	return err == nil && d >= want-5*time.Second && d <= want+5*time.Second
}

// TestEnvoyDraft03Headers: with enable_x_ratelimit_headers DRAFT_VERSION_03
// Envoy builds X-RateLimit-Limit, -Remaining and -Reset from FastLimit's
// statuses (current_limit, limit_remaining, duration_until_reset), on the
// requests it passes and on its 429.
func TestEnvoyDraft03Headers(t *testing.T) {
	fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": envoyRules(3, 3, "fixed_window")}))
	f := startHTTPFront(t, "draft03", fl.GRPC, `enable_x_ratelimit_headers: "OFF"`, "enable_x_ratelimit_headers: DRAFT_VERSION_03")
	attempt(t, f.front, 24*time.Hour, func(c *envoytest.Client) error {
		for i := 1; i <= 4; i++ {
			r, err := f.checked(t, c, "GET", "/")
			if err != nil {
				return err
			}
			want := map[string]string{"X-Ratelimit-Limit": `3, 3;w=86400;name="api_per_client"`, "X-Ratelimit-Remaining": strconv.Itoa(max(3-i, 0))}
			if i == 4 && r.Code != http.StatusTooManyRequests || i < 4 && r.Code != http.StatusOK {
				return fmt.Errorf("request %d: %d", i, r.Code)
			}
			for k, v := range want {
				if got := r.Header.Get(k); got != v {
					return fmt.Errorf("request %d: %s %q, want %q", i, k, got, v)
				}
			}
			if reset := r.Header.Get("X-Ratelimit-Reset"); !secondsNear(reset, untilMidnight()) {
				return fmt.Errorf("request %d: X-RateLimit-Reset %q, want the %v left of the day's window", i, reset, untilMidnight().Round(time.Second))
			}
		}
		return nil
	})
}

// TestEnvoyFastLimitHeaders: FastLimit's own headers (--response-headers)
// reach the client through Envoy, on the requests it passes and on its
// 429, with Retry-After on the 429.
func TestEnvoyFastLimitHeaders(t *testing.T) {
	ietf := regexp.MustCompile(`^"api_per_client";r=(\d+);t=(\d+)$`)
	cases := []struct {
		mode  string
		check func(i int, h http.Header) error
	}{
		{"ietf", func(i int, h http.Header) error {
			if got, want := h.Get("RateLimit-Policy"), `"api_per_client";q=3;w=86400`; got != want {
				return fmt.Errorf("RateLimit-Policy %q, want %q", got, want)
			}
			m := ietf.FindStringSubmatch(h.Get("RateLimit"))
			if m == nil || m[1] != strconv.Itoa(max(3-i, 0)) || !secondsNear(m[2], untilMidnight()) {
				return fmt.Errorf("RateLimit %q, want r=%d and t the %v left of the day", h.Get("RateLimit"), max(3-i, 0), untilMidnight().Round(time.Second))
			}
			return nil
		}},
		{"legacy", func(i int, h http.Header) error {
			if h.Get("RateLimit-Limit") != "3" || h.Get("RateLimit-Remaining") != strconv.Itoa(max(3-i, 0)) || !secondsNear(h.Get("RateLimit-Reset"), untilMidnight()) {
				return fmt.Errorf("RateLimit-Limit %q, -Remaining %q, -Reset %q, want 3, %d and the %v left of the day",
					h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), h.Get("RateLimit-Reset"), max(3-i, 0), untilMidnight().Round(time.Second))
			}
			return nil
		}},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": envoyRules(3, 3, "fixed_window")}), "--response-headers", tc.mode)
			f := startHTTPFront(t, "headers-"+tc.mode, fl.GRPC)
			attempt(t, f.front, 24*time.Hour, func(c *envoytest.Client) error {
				for i := 1; i <= 4; i++ {
					r, err := f.checked(t, c, "GET", "/")
					if err != nil {
						return err
					}
					if i == 4 && r.Code != http.StatusTooManyRequests || i < 4 && r.Code != http.StatusOK {
						return fmt.Errorf("request %d: %d", i, r.Code)
					}
					if err := tc.check(i, r.Header); err != nil {
						return fmt.Errorf("request %d: %w", i, err)
					}
					ra := r.Header.Get("Retry-After")
					if i < 4 && ra != "" || i == 4 && !secondsNear(ra, untilMidnight()) {
						return fmt.Errorf("request %d (%d): Retry-After %q", i, r.Code, ra)
					}
				}
				return nil
			})
		})
	}
}

// bucketRules limit each client address's api requests with a token
// bucket of 2 refilled at 1 a minute: after two requests the bucket is
// full again in 120 s, and holds one token in 60.
const bucketRules = `domain: envoy-e2e
descriptors:
  - key: path_class
    value: api
    descriptors:
      - key: remote_address
        rate_limit: {name: api_per_client, algorithm: token_bucket, unit: minute, requests_per_unit: 1, burst: 2}
`

// TestEnvoyRetryAfter: enable_retry_after_header (Envoy 1.40) makes
// Envoy's 429 carry Retry-After from FastLimit's duration_until_reset,
// which over the limit is when the same request would pass (a token
// bucket's: when the request's cost has refilled, 60 s here, not when it
// is full, 120 s), and leaves FastLimit's own Retry-After
// (--response-headers: the same 60 s) as it is; without it and without
// FastLimit's headers the 429 has none.
func TestEnvoyRetryAfter(t *testing.T) {
	cases := []struct {
		name    string
		enable  bool
		headers string        // --response-headers
		want    time.Duration // 0: no Retry-After
	}{
		{"envoy", true, "off", 60 * time.Second},
		{"fastlimit's kept", true, "ietf", 60 * time.Second},
		{"none", false, "off", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": bucketRules}), "--response-headers", tc.headers)
			f := startHTTPFront(t, "retry-after", fl.GRPC, "enable_retry_after_header: false", fmt.Sprintf("enable_retry_after_header: %v", tc.enable))
			attempt(t, f.front, 24*time.Hour, func(c *envoytest.Client) error {
				for i := 1; i <= 3; i++ {
					r, err := f.checked(t, c, "GET", "/")
					if err != nil {
						return err
					}
					ra := r.Header.Get("Retry-After")
					switch {
					case i < 3 && (r.Code != http.StatusOK || ra != ""):
						return fmt.Errorf("request %d: %d, Retry-After %q", i, r.Code, ra)
					case i == 3 && r.Code != http.StatusTooManyRequests:
						return fmt.Errorf("request 3: %d, want 429", r.Code)
					case i == 3 && tc.want == 0 && ra != "":
						return fmt.Errorf("the 429: Retry-After %q, want none", ra)
					case i == 3 && tc.want != 0 && !secondsNear(ra, tc.want):
						return fmt.Errorf("the 429: Retry-After %q, want about %v", ra, tc.want)
					}
				}
				return nil
			})
		})
	}
}

// TestEnvoyXEnvoyRateLimited: Envoy's 429 carries x-envoy-ratelimited:
// true (so that Envoy's own retries leave it alone) unless
// disable_x_envoy_ratelimited_header; a request it passes does not.
func TestEnvoyXEnvoyRateLimited(t *testing.T) {
	for _, disable := range []bool{false, true} {
		t.Run(fmt.Sprintf("disable=%v", disable), func(t *testing.T) {
			fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": envoyRules(1, 1, "fixed_window")}))
			f := startHTTPFront(t, "x-envoy-ratelimited", fl.GRPC,
				"disable_x_envoy_ratelimited_header: false", fmt.Sprintf("disable_x_envoy_ratelimited_header: %v", disable))
			attempt(t, f.front, 24*time.Hour, func(c *envoytest.Client) error {
				want := []string{"", "true"}
				if disable {
					want[1] = ""
				}
				for i, code := range []int{http.StatusOK, http.StatusTooManyRequests} {
					r, err := f.checked(t, c, "GET", "/")
					if err != nil {
						return err
					}
					if got := r.Header.Get("X-Envoy-Ratelimited"); r.Code != code || got != want[i] {
						return fmt.Errorf("request %d: %d, x-envoy-ratelimited %q; want %d, %q", i+1, r.Code, got, code, want[i])
					}
				}
				return nil
			})
		})
	}
}

// grpcClient returns a gRPC client of the front's listener from a source
// address of its own, closed when t ends.
func grpcClient(t testing.TB, f *front) healthpb.HealthClient {
	t.Helper()
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(nextSource())}}
	conn, err := grpc.NewClient("passthrough:///"+f.Listener, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// TestEnvoyResourceExhausted: a gRPC call over the limit fails with
// RESOURCE_EXHAUSTED under rate_limited_as_resource_exhausted, and with
// UNAVAILABLE (gRPC's mapping of HTTP 429) without; refused calls never
// reach the gRPC upstream.
func TestEnvoyResourceExhausted(t *testing.T) {
	for _, tc := range []struct {
		on   bool
		want codes.Code
	}{{true, codes.ResourceExhausted}, {false, codes.Unavailable}} {
		t.Run(fmt.Sprintf("rate_limited_as_resource_exhausted=%v", tc.on), func(t *testing.T) {
			fl := startAdmin(t, files.Dir(t, map[string]string{"e.yaml": envoyRules(1000, 2, "fixed_window")}))
			f := startHTTPFront(t, "grpc", fl.GRPC, "rate_limited_as_resource_exhausted: false",
				fmt.Sprintf("rate_limited_as_resource_exhausted: %v", tc.on))
			f.cluster = "grpc_upstream"
			attempt(t, f.front, 24*time.Hour, func(*envoytest.Client) error {
				h := grpcClient(t, f.front)
				before := f.rlsErrors()
				var got []codes.Code
				for range 3 {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					_, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
					cancel()
					got = append(got, status.Code(err))
				}
				if f.rlsErrors() != before {
					return fmt.Errorf("%w: Envoy's rate-limit calls failed", errInconclusive)
				}
				if fmt.Sprint(got) != fmt.Sprint([]codes.Code{codes.OK, codes.OK, tc.want}) {
					return fmt.Errorf("three calls: %v, want OK, OK, %v", got, tc.want)
				}
				return nil
			})
			if n := f.GRPC.Calls(); n%2 != 0 || n == 0 {
				t.Errorf("the gRPC upstream served %d calls, want 2 per attempt", n)
			}
		})
	}
}
