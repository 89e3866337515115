package e2e_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/internal/testing/redistest"
)

// rssKiB reads a process's resident set size.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func wantCode(t *testing.T, what string, err error, want codes.Code, msg string) {
	t.Helper()
	if status.Code(err) != want || !strings.Contains(status.Convert(err).Message(), msg) {
		t.Errorf("%s: %v, want %v with %q", what, err, want, msg)
	}
}

// TestHardening sends hostile requests to one server on Redis, twice, and
// checks each answer, the keys in Redis and that the server's memory stays
// bounded. The store timeout is raised from its 2 s default so that the
// 10,000-descriptor call is decided on a loaded CI machine too: the bounds
// are what is tested, not the timeout.
func TestHardening(t *testing.T) {
	r := redistest.StartServer(t)
	srv := startServer(t, "testdata/hard", true, "--redis-url", "redis://"+r.Addr+"/0", "--store-timeout", "10s")
	pid := srv.cmd.Process.Pid
	ctx := ctxTimeout(t, 2*time.Minute)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	id := fmt.Sprint(time.Now().UnixNano())
	call := func(req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
		return srv.Client.ShouldRateLimit(ctx, req, grpc.MaxCallSendMsgSize(64<<20))
	}
	mib := strings.Repeat("v", 1<<20)

	steps := []func(t *testing.T, round int){
		func(t *testing.T, round int) { // 1 MiB values: decided, as by the reference; 5 MiB requests refused
			for _, domain := range []string{"hard", "hardall"} {
				resp, err := call(&rls.RateLimitRequest{Domain: domain, Descriptors: []*common.RateLimitDescriptor{desc("fixed", mib)}})
				if err != nil || resp.Statuses[0].GetCurrentLimit() == nil {
					t.Errorf("1 MiB value: %v, %v; want a decision under the fixed rule", resp, err)
				}
				_, err = call(&rls.RateLimitRequest{Domain: domain, Descriptors: []*common.RateLimitDescriptor{desc("fixed", mib+mib+mib+mib+mib)}})
				wantCode(t, "5 MiB request", err, codes.ResourceExhausted, "larger than max")
			}
		},
		func(t *testing.T, round int) { // 10,000 descriptors, 1,000 entries: decided, bounded by bytes alone
			many := &rls.RateLimitRequest{Domain: "hard"}
			for i := range 10_000 {
				many.Descriptors = append(many.Descriptors, desc("fixed", fmt.Sprint(id, "-", i)))
			}
			if resp, err := call(many); err != nil || len(resp.GetStatuses()) != 10_000 {
				t.Errorf("10,000 descriptors: %d statuses, %v", len(resp.GetStatuses()), err)
			}
			deep := &common.RateLimitDescriptor{}
			for i := range 1000 {
				deep.Entries = append(deep.Entries, &common.RateLimitDescriptor_Entry{Key: "fixed", Value: fmt.Sprint(i)})
			}
			// No rule is 1,000 levels deep: OK without a limit.
			if resp, err := call(request(deep)); err != nil || resp.GetOverallCode() != rls.RateLimitResponse_OK {
				t.Errorf("1,000 entries: %v, %v; want OK", resp, err)
			}
		},
		func(t *testing.T, round int) { // invalid UTF-8
			testInvalidUTF8(t, srv, round == 0)
		},
		func(t *testing.T, round int) { // hits that overflow
			for _, domain := range []string{"hard", "hardall"} {
				for _, key := range []string{"fixed", "sliding", "bucket"} {
					v := fmt.Sprint(id, "-huge-", round)
					req := &rls.RateLimitRequest{Domain: domain, HitsAddend: math.MaxUint32, Descriptors: []*common.RateLimitDescriptor{desc(key, v)}}
					huge := desc(key, v)
					huge.HitsAddend = wrapperspb.UInt64(math.MaxUint64)
					for _, q := range []*rls.RateLimitRequest{req, {Domain: domain, Descriptors: []*common.RateLimitDescriptor{huge}}} {
						resp, err := call(q)
						if err != nil || resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT {
							t.Errorf("%s %s: hits %d/%d answered %v, %v; want OVER_LIMIT", domain, key, q.HitsAddend, q.Descriptors[0].GetHitsAddend().GetValue(), resp, err)
						}
					}
					// A fixed window of the plain domain counts denied hits:
					// it saturates at 2^52 instead of wrapping. Nothing else
					// was charged.
					_, code := remaining(t, srv.Client, domain, v, key)
					wantOver := domain == "hard" && key == "fixed"
					if (code == rls.RateLimitResponse_OVER_LIMIT) != wantOver {
						t.Errorf("%s %s after huge hits: %v, want over %v", domain, key, code, wantOver)
					}
				}
			}
			keys, err := rdb.Keys(ctx, fmt.Sprintf("ratelimit:{hard/fixed=%s-huge-%d}:*", id, round)).Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("huge counter keys %v, %v", keys, err)
			}
			if v, err := rdb.Get(ctx, keys[0]).Result(); err != nil || v != "4503599627370496" {
				t.Errorf("saturated counter = %q, %v; want 2^52", v, err)
			}
		},
	}

	testSpecialValues(t, srv, rdb, id)
	base := rssKiB(t, pid)
	var after []int
	const rounds = 5
	for round := range rounds {
		for i, f := range steps {
			t.Run(fmt.Sprintf("round%d/%d", round, i), func(t *testing.T) { f(t, round) })
		}
		after = append(after, rssKiB(t, pid))
	}
	// The server still decides.
	if resp, err := call(request(desc("fixed", id+"-alive"))); err != nil || resp.OverallCode != rls.RateLimitResponse_OK {
		t.Fatalf("after the hostile requests: %v, %v", resp, err)
	}
	t.Logf("server RSS: %d KiB at start, after each round %v KiB", base, after)
	if last := after[rounds-1]; last > 256<<10 || last > after[0]+after[0]/2+32<<10 {
		t.Errorf("RSS grew from %d KiB to %v KiB: not bounded", base, after)
	}
}

// testSpecialValues: values with ':', '*', braces, newlines, spaces, '%'
// and '~' each get their own counter (a collision would make the second
// value's first hit over), and their Redis keys have one hash tag without
// raw ':' or whitespace.
func testSpecialValues(t *testing.T, srv *fastlimit, rdb *redis.Client, id string) {
	ctx := ctxTimeout(t, 30*time.Second)
	values := []string{"a:b", "a%3Ab", "*", "?", "[x]", "{x}", "}", "{", "a\nb", "a b", "a\tb", "x}:default:1",
		"x/special=y", "a~b", "é", ""}
	for _, domain := range []string{"hard", "hardall"} {
		for _, v := range values {
			for i, want := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT} {
				resp, err := srv.Client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: domain,
					Descriptors: []*common.RateLimitDescriptor{desc("special", id+v)}})
				if err != nil || resp.OverallCode != want {
					t.Errorf("%s value %q hit %d: %v, %v; want %v (no shared counter)", domain, v, i, resp, err, want)
				}
			}
		}
	}
	keys, err := rdb.Keys(ctx, "ratelimit:*special=*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2*len(values) {
		t.Errorf("%d special keys for %d values in 2 domains: %q", len(keys), len(values), keys)
	}
	for _, k := range keys {
		tag := k[strings.Index(k, "{")+1 : max(strings.Index(k, "}"), 0)]
		if strings.Count(k, "{") != 1 || strings.Count(k, "}") != 1 || strings.ContainsAny(tag, ": \t\n") ||
			strings.ContainsAny(k, " \t\n*?[") {
			t.Errorf("key %q: want one hash tag, escaped values", k)
		}
		if strings.HasPrefix(k, "ratelimit:{hardall}") != strings.Contains(k, "hardall") {
			t.Errorf("key %q: all-or-nothing domains are tagged by the domain alone", k)
		}
	}
}

// testInvalidUTF8 sends a request whose value is not UTF-8, which proto3
// forbids: the gRPC client library refuses to encode it, so it goes out
// as raw bytes. FastLimit's codec decodes it as bytes and decides it: a
// limit of 5 answers OK five times, then OVER_LIMIT, beside a per-key
// descriptor. /json cannot carry such bytes (JSON strings are Unicode):
// it answers 400.
func testInvalidUTF8(t *testing.T, srv *fastlimit, log bool) {
	ctx := ctxTimeout(t, 10*time.Second)
	value := fmt.Sprintf("bad\xff\xfe%d", time.Now().UnixNano())
	for i := range 6 {
		raw := rawRequest("hard", [][2]string{{"fixed5", value}}, [][2]string{{"fixed", "per-key-" + value}})
		var out []byte
		err := srv.conn.Invoke(ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", raw, &out,
			grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			t.Fatalf("invalid UTF-8 over gRPC, hit %d: %v", i+1, err)
		}
		var resp rls.RateLimitResponse
		if err := proto.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		want := rls.RateLimitResponse_OK
		if i == 5 {
			want = rls.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != want || resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != 5 {
			t.Fatalf("invalid UTF-8 over gRPC, hit %d: %v, want %v under the limit of 5", i+1, &resp, want)
		}
		if log && i == 0 {
			t.Logf("invalid UTF-8 over gRPC: %v", &resp)
		}
	}

	resp, err := http.Post("http://"+srv.HTTP+"/json", "application/json",
		strings.NewReader("{\"domain\":\"hard\",\"descriptors\":[{\"entries\":[{\"key\":\"fixed\",\"value\":\"bad\xff\xfe\"}]}]}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("invalid UTF-8 over /json: %d, want 400", resp.StatusCode)
	}
}

// rawRequest encodes a RateLimitRequest by hand, so that its values may
// be any bytes: one descriptor per list of key=value entries.
func rawRequest(domain string, descs ...[][2]string) []byte {
	raw := protowire.AppendTag(nil, 1, protowire.BytesType)
	raw = protowire.AppendString(raw, domain)
	for _, entries := range descs {
		var d []byte
		for _, kv := range entries {
			entry := protowire.AppendTag(nil, 1, protowire.BytesType)
			entry = protowire.AppendString(entry, kv[0])
			entry = protowire.AppendTag(entry, 2, protowire.BytesType)
			entry = protowire.AppendString(entry, kv[1])
			d = protowire.AppendTag(d, 1, protowire.BytesType)
			d = protowire.AppendBytes(d, entry)
		}
		raw = protowire.AppendTag(raw, 2, protowire.BytesType)
		raw = protowire.AppendBytes(raw, d)
	}
	return raw
}

// TestHardeningRaisedLimits: with the request limits raised, a request of
// 10,000 descriptors, one of 1,000 entries and a 1 MiB value are decided,
// and keys stay short.
func TestHardeningRaisedLimits(t *testing.T) {
	r := redistest.StartServer(t)
	srv := startServer(t, "testdata/hard", true, "--redis-url", "redis://"+r.Addr+"/0",
		"--max-descriptors", "20000", "--max-entries", "2000", "--max-entry-bytes", "2000000", "--store-timeout", "10s")
	ctx := ctxTimeout(t, 2*time.Minute)
	id := fmt.Sprint(time.Now().UnixNano())
	for _, domain := range []string{"hard", "hardall"} {
		many := &rls.RateLimitRequest{Domain: domain}
		for i := range 10_000 {
			many.Descriptors = append(many.Descriptors, desc("fixed", fmt.Sprint(id, "-", i%5000)))
		}
		start := time.Now()
		resp, err := srv.Client.ShouldRateLimit(ctx, many)
		if err != nil {
			t.Fatalf("%s 10,000 descriptors: %v", domain, err)
		}
		t.Logf("%s: 10,000 descriptors decided in %v", domain, time.Since(start).Round(time.Millisecond))
		if len(resp.Statuses) != 10_000 || resp.OverallCode != rls.RateLimitResponse_OK || resp.Statuses[9999].LimitRemaining != 98 {
			t.Errorf("%s 10,000 descriptors: %v, %d statuses, last %v", domain, resp.OverallCode, len(resp.Statuses), resp.Statuses[9999])
		}

		deep := &common.RateLimitDescriptor{}
		for i := range 1000 {
			deep.Entries = append(deep.Entries, &common.RateLimitDescriptor_Entry{Key: "fixed", Value: fmt.Sprint(i)})
		}
		if resp, err := srv.Client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: domain, Descriptors: []*common.RateLimitDescriptor{deep}}); err != nil ||
			resp.OverallCode != rls.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil {
			t.Errorf("%s 1,000 entries: %v, %v; want OK, no rule that deep", domain, resp, err)
		}

		big := strings.Repeat("v", 1<<20) + id
		if resp, err := srv.Client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: domain,
			Descriptors: []*common.RateLimitDescriptor{desc("fixed", big)}}); err != nil || resp.Statuses[0].LimitRemaining != 99 {
			t.Errorf("%s 1 MiB value: %v, %v", domain, resp, err)
		}
	}
	t.Logf("server RSS after the large requests: %d KiB", rssKiB(t, srv.cmd.Process.Pid))
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), "ratelimit:*").Result()
	if err != nil || len(keys) != 2*5001 {
		t.Fatalf("%d keys, %v; want 10,002", len(keys), err)
	}
	longest := 0
	for _, k := range keys {
		longest = max(longest, len(k))
	}
	if longest > 200 {
		t.Errorf("longest key %d bytes, want at most 200", longest)
	}
}

// rawCodec sends and receives messages as raw bytes, to put on the wire
// what a proto library would refuse to encode.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }
