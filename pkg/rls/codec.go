package rls

import (
	"errors"
	"fmt"

	common "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	_ "google.golang.org/grpc/encoding/proto" // registers the codec this one wraps
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Codec is grpc-go's protobuf codec, except that a RateLimitRequest whose
// strings are not UTF-8 is decoded, its strings taken as bytes, instead
// of refused with Internal (docs/design.md#ratelimitservice-adapter).
func Codec() encoding.CodecV2 { return codec{std: encoding.GetCodecV2("proto")} }

// ServerOption installs Codec on a gRPC server.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(Codec()) }

type codec struct{ std encoding.CodecV2 }

func (c codec) Name() string                                { return c.std.Name() }
func (c codec) Marshal(v any) (mem.BufferSlice, error)      { return c.std.Marshal(v) }
func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.unmarshal(data, v) }

func (c codec) unmarshal(data mem.BufferSlice, v any) error {
	err := c.std.Unmarshal(data, v)
	req, ok := v.(*rlspb.RateLimitRequest)
	if err == nil || !ok {
		return err
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	proto.Reset(req)
	if lerr := unmarshalRequest(buf.ReadOnlyData(), req); lerr != nil {
		// Not a request at all: the standard codec's error says why.
		return err
	}
	return nil
}

// errWire marks wire data that does not parse.
var errWire = errors.New("malformed protobuf wire data")

// fieldFunc decodes one length-delimited field of a message, b its
// value; it returns false for a field it leaves to the standard decoder.
type fieldFunc func(num protowire.Number, b []byte) (bool, error)

// walk decodes b field by field with f; the standard decoder merges the
// fields f leaves into m, checking them as it always does.
func walk(b []byte, m proto.Message, f fieldFunc) error {
	merge := proto.UnmarshalOptions{Merge: true}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %w", errWire, protowire.ParseError(n))
		}
		vlen := protowire.ConsumeFieldValue(num, typ, b[n:])
		if vlen < 0 {
			return fmt.Errorf("%w: %w", errWire, protowire.ParseError(vlen))
		}
		field := b[:n+vlen]
		done := false
		if typ == protowire.BytesType {
			value, m := protowire.ConsumeBytes(b[n:])
			if m < 0 {
				return fmt.Errorf("%w: %w", errWire, protowire.ParseError(m))
			}
			var err error
			if done, err = f(num, value); err != nil {
				return err
			}
		}
		if !done {
			if err := merge.Unmarshal(field, m); err != nil {
				return err
			}
		}
		b = b[n+vlen:]
	}
	return nil
}

// unmarshalRequest decodes a RateLimitRequest, its strings as bytes.
func unmarshalRequest(b []byte, req *rlspb.RateLimitRequest) error {
	return walk(b, req, func(num protowire.Number, v []byte) (bool, error) {
		switch num {
		case 1: // domain
			req.Domain = string(v)
			return true, nil
		case 2: // descriptors
			d := &common.RateLimitDescriptor{}
			if err := unmarshalDescriptor(v, d); err != nil {
				return false, err
			}
			req.Descriptors = append(req.Descriptors, d)
			return true, nil
		}
		return false, nil
	})
}

func unmarshalDescriptor(b []byte, d *common.RateLimitDescriptor) error {
	return walk(b, d, func(num protowire.Number, v []byte) (bool, error) {
		if num != 1 { // entries; the limit override and hits have no strings
			return false, nil
		}
		e := &common.RateLimitDescriptor_Entry{}
		err := walk(v, e, func(num protowire.Number, v []byte) (bool, error) {
			switch num {
			case 1:
				e.Key = string(v)
			case 2:
				e.Value = string(v)
			default:
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			return false, err
		}
		d.Entries = append(d.Entries, e)
		return true, nil
	})
}
