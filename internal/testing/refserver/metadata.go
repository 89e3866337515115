package refserver

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// MetadataRules is the rules file (domain meta) of MetadataCases. The
// pinned reference refuses it: its rules carry metadata.
//
//go:embed testdata/metadata.yaml
var MetadataRules []byte

//go:embed testdata/metadata.json
var metadataJSON []byte

// MetadataCase is a request over MetadataRules and the dynamic metadata
// that envoyproxy/ratelimit's main builds for it (testdata/metadata.json
// says how it was derived).
type MetadataCase struct {
	Name string
	// Mode is a global setting of the server: "", "shadow" or "quota".
	Mode    string
	Request *rlspb.RateLimitRequest
	Code    rlspb.RateLimitResponse_Code
	// Upstream is main's struct; Differs says why FastLimit's is not it.
	Upstream *structpb.Struct
	Differs  string
	// Want is FastLimit's whole struct, its "fastlimit" key included.
	Want *structpb.Struct
}

// MetadataCases returns the table, in the order its requests must be sent.
func MetadataCases(t testing.TB) []MetadataCase {
	t.Helper()
	var file struct {
		Cases []struct {
			Name, Mode, Code, Differs string
			Request, Upstream, Want   json.RawMessage
			Fast                      json.RawMessage `json:"fastlimit"`
		}
	}
	if err := json.Unmarshal(metadataJSON, &file); err != nil {
		t.Fatalf("metadata.json: %v", err)
	}
	out := make([]MetadataCase, 0, len(file.Cases))
	for _, c := range file.Cases {
		mc := MetadataCase{Name: c.Name, Mode: c.Mode, Differs: c.Differs, Request: &rlspb.RateLimitRequest{}}
		code, ok := rlspb.RateLimitResponse_Code_value[c.Code]
		if !ok || (c.Differs == "") != (c.Want == nil) {
			t.Fatalf("metadata.json %q: code %q, or differs without want (or want without differs)", c.Name, c.Code)
		}
		mc.Code = rlspb.RateLimitResponse_Code(code)
		mc.Upstream, mc.Want = parseStruct(t, c.Name, c.Upstream), parseStruct(t, c.Name, c.Upstream)
		if c.Want != nil {
			mc.Want = parseStruct(t, c.Name, c.Want)
			if proto.Equal(mc.Want, mc.Upstream) {
				t.Fatalf("metadata.json %q: differs, but want is upstream's struct", c.Name)
			}
		}
		if c.Fast != nil {
			mc.Want.Fields["fastlimit"] = structpb.NewStructValue(parseStruct(t, c.Name, c.Fast))
		}
		if err := protojson.Unmarshal(c.Request, mc.Request); err != nil {
			t.Fatalf("metadata.json %q: request: %v", c.Name, err)
		}
		out = append(out, mc)
	}
	return out
}

func parseStruct(t testing.TB, name string, b json.RawMessage) *structpb.Struct {
	t.Helper()
	s := &structpb.Struct{}
	if err := protojson.Unmarshal(b, s); err != nil {
		t.Fatalf("metadata.json %q: %v", name, err)
	}
	return s
}

// Check compares resp's code and dynamic metadata with c's.
func (c *MetadataCase) Check(resp *rlspb.RateLimitResponse) error {
	got := resp.GetDynamicMetadata()
	if resp.GetOverallCode() != c.Code || !proto.Equal(got, c.Want) {
		return fmt.Errorf("%s, dynamic metadata\n%s\nwant %s,\n%s", resp.GetOverallCode(), js(got), c.Code, js(c.Want))
	}
	return nil
}

// SameLimitText reports whether two descriptors' "limit" texts are equal
// but for whitespace, which the reference's varies between builds.
func SameLimitText(a, b string) bool {
	return strings.Join(strings.Fields(a), " ") == strings.Join(strings.Fields(b), " ")
}

func js(s *structpb.Struct) string {
	b, _ := protojson.MarshalOptions{Multiline: true}.Marshal(s)
	return string(b)
}
