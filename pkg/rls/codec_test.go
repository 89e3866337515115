package rls

import (
	"context"
	"slices"
	"testing"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fastlimit/fastlimit/pkg/limiter"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// rawRequest is the wire form of a RateLimitRequest of one descriptor,
// written by hand so that its strings may be any bytes: domain, one entry
// key=value, a limit override, hits_addend on the descriptor and on the
// request, and a field no proto declares.
func rawRequest(domain, key, value string) []byte {
	entry := protowire.AppendTag(nil, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, key)
	entry = protowire.AppendTag(entry, 2, protowire.BytesType)
	entry = protowire.AppendString(entry, value)
	override := protowire.AppendTag(nil, 1, protowire.VarintType)
	override = protowire.AppendVarint(override, 7)
	override = protowire.AppendTag(override, 2, protowire.VarintType)
	override = protowire.AppendVarint(override, uint64(typev3.RateLimitUnit_MINUTE))
	hits := protowire.AppendTag(nil, 1, protowire.VarintType)
	hits = protowire.AppendVarint(hits, 3)
	d := protowire.AppendTag(nil, 1, protowire.BytesType)
	d = protowire.AppendBytes(d, entry)
	d = protowire.AppendTag(d, 2, protowire.BytesType)
	d = protowire.AppendBytes(d, override)
	d = protowire.AppendTag(d, 3, protowire.BytesType)
	d = protowire.AppendBytes(d, hits)
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendString(b, domain)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, d)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	b = protowire.AppendVarint(b, 2)
	b = protowire.AppendTag(b, 99, protowire.VarintType) // unknown
	return protowire.AppendVarint(b, 1)
}

func wantRequest(domain, key, value string) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: domain, HitsAddend: 2, Descriptors: []*common.RateLimitDescriptor{{
		Entries:    []*common.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		Limit:      &common.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_MINUTE},
		HitsAddend: wrapperspb.UInt64(3),
	}}}
}

// TestCodecDecodesBytes: strings that are not UTF-8 decode as the bytes
// sent, everything else as protobuf decodes it; UTF-8 requests decode as
// protobuf decodes them.
func TestCodecDecodesBytes(t *testing.T) {
	c := Codec()
	for _, tc := range []struct{ name, domain, key, value string }{
		{"UTF-8", "d", "k", "v é"},
		{"value not UTF-8", "d", "k", "bad\xff\xfeutf8"},
		{"key and domain not UTF-8", "d\xc0", "k\xe2\x82", "v"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got rlspb.RateLimitRequest
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(rawRequest(tc.domain, tc.key, tc.value))}, &got); err != nil {
				t.Fatal(err)
			}
			want := wantRequest(tc.domain, tc.key, tc.value)
			got.ProtoReflect().SetUnknown(nil) // compared apart
			if got.GetDomain() != want.GetDomain() || got.GetHitsAddend() != 2 || len(got.GetDescriptors()) != 1 {
				t.Fatalf("request %v", &got)
			}
			gd, wd := got.GetDescriptors()[0], want.GetDescriptors()[0]
			if e := gd.GetEntries(); len(e) != 1 || e[0].GetKey() != tc.key || e[0].GetValue() != tc.value {
				t.Errorf("entries %q", e)
			}
			if !proto.Equal(gd.GetLimit(), wd.GetLimit()) || gd.GetHitsAddend().GetValue() != 3 {
				t.Errorf("descriptor %v", gd)
			}
		})
	}
	// The unknown field is kept, as protobuf keeps it.
	var got rlspb.RateLimitRequest
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(rawRequest("d", "k", "\xff"))}, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Error("unknown field dropped")
	}
}

// TestCodecRefusesMalformed: bytes that are no request get the standard
// codec's error; other messages are the standard codec's.
func TestCodecRefusesMalformed(t *testing.T) {
	c := Codec()
	for _, b := range [][]byte{{0x0a, 0x05, 'a'}, {0xff, 0xff, 0xff}, append(rawRequest("d", "k", "\xff"), 0x12, 0x7f)} {
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &rlspb.RateLimitRequest{}); err == nil {
			t.Errorf("% x decoded", b)
		}
	}
	// A response (or any other message) with bad UTF-8 stays refused.
	var resp rlspb.RateLimitResponse
	bad := protowire.AppendTag(nil, 3, protowire.BytesType) // response_headers_to_add
	hv := protowire.AppendTag(nil, 1, protowire.BytesType)
	hv = protowire.AppendString(hv, "\xff")
	bad = protowire.AppendBytes(bad, hv)
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bad)}, &resp); err == nil {
		t.Error("a response with a header key that is not UTF-8 decoded")
	}
	if c.Name() != "proto" {
		t.Errorf("name %q", c.Name())
	}
}

// FuzzCodec: no bytes make the codec panic; what protobuf decodes, the
// codec decodes to the same request.
func FuzzCodec(f *testing.F) {
	f.Add(rawRequest("d", "k", "v"))
	f.Add(rawRequest("d", "k", "\xff\xfe"))
	f.Add([]byte{0x12, 0x02, 0x0a, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		var got, want rlspb.RateLimitRequest
		err := Codec().Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, &got)
		if proto.Unmarshal(b, &want) == nil {
			if err != nil || !proto.Equal(&got, &want) {
				t.Fatalf("codec %v, %v; protobuf %v", &got, err, &want)
			}
		}
	})
}

// TestDecidesValuesNotUTF8: a value that is not UTF-8 is decided like any
// other, each distinct byte string its own counter, and the answer (with
// dynamic metadata, which holds the entries) still encodes.
func TestDecidesValuesNotUTF8(t *testing.T) {
	rs, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n")})
	if err != nil {
		t.Fatal(err)
	}
	st := store.NewMemory(store.MemoryOptions{})
	t.Cleanup(func() { _ = st.Close() })
	l := limiter.New(st, limiter.Options{})
	l.SetRules(rs.Set)
	s := New(l, Options{Headers: HeaderOptions{ResponseHeaders: HeadersIETF, DynamicMetadata: true}}, zaptest.NewLogger(t))
	codes := func(value string) []rlspb.RateLimitResponse_Code {
		var out []rlspb.RateLimitResponse_Code
		for range 3 {
			resp, err := s.ShouldRateLimit(context.Background(), rlsRequest("d", "k", value))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := proto.Marshal(resp); err != nil {
				t.Fatalf("the answer does not encode: %v", err)
			}
			out = append(out, resp.GetOverallCode())
		}
		return out
	}
	want := []rlspb.RateLimitResponse_Code{rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OK, rlspb.RateLimitResponse_OVER_LIMIT}
	for _, v := range []string{"bad\xff", "bad\xfe", "bad\xff\xfe"} {
		if got := codes(v); !slices.Equal(got, want) {
			t.Errorf("value %q: %v, want %v", v, got, want)
		}
	}
}

// BenchmarkCodecUnmarshal: a request protobuf decodes takes the standard
// path alone; one with bytes that are not UTF-8 pays a failed standard
// decode and the walk.
func BenchmarkCodecUnmarshal(b *testing.B) {
	c := Codec()
	for _, tc := range []struct{ name, value string }{{"utf8", "203.0.113.7"}, {"not-utf8", "203.0.113.7\xff"}} {
		raw := rawRequest("edge", "remote_address", tc.value)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				var req rlspb.RateLimitRequest
				if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
