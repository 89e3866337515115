package settings

import (
	"fmt"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/internal/source/xds"
	"github.com/fastlimit/fastlimit/pkg/rules"
	"github.com/fastlimit/fastlimit/pkg/store"
)

// Values of --config-type (CONFIG_TYPE), taken in any case.
const (
	configTypeFile = "FILE"
	configTypeXDS  = "GRPC_XDS_SOTW"
)

// XDS configures rules over xDS.
type XDS struct {
	ConfigType           string // FILE or GRPC_XDS_SOTW, in any case
	StartWithoutRules    bool
	NodeID               string
	NodeMetadata         string // key=value,key2=value2
	Server               string
	Headers              string // name:value,name2:value2
	TLS                  bool
	TLSCert, TLSKey      string
	TLSCA                string
	TLSServerName        string
	Backoff              xds.Backoff
	ConnectRetryInterval time.Duration
	MaxResponseBytes     int
}

// Enabled reports whether rules come from xDS.
func (o *XDS) Enabled() bool { return strings.EqualFold(o.ConfigType, configTypeXDS) }

// xdsName names an xDS flag in errors, with the reference's variable.
func xdsName(flag string) string {
	if ref := refNames[flag]; ref != "" {
		return "--" + flag + " (" + ref + ")"
	}
	return "--" + flag + " (" + EnvName(flag) + ")"
}

func (o *XDS) validate() error {
	if !o.Enabled() && !strings.EqualFold(o.ConfigType, configTypeFile) {
		return fmt.Errorf("%s: %q is neither %s nor %s", xdsName("config-type"), o.ConfigType, configTypeFile, configTypeXDS)
	}
	if !o.Enabled() {
		return nil
	}
	if strings.TrimSpace(o.Server) == "" {
		return fmt.Errorf("%s is required with GRPC_XDS_SOTW", xdsName("xds-server"))
	}
	if masked := store.RedactAddr(o.Server); strings.Contains(o.Server, "@") && masked != o.Server && !isUnixTarget(o.Server) {
		// gRPC would print them in every connection error.
		return fmt.Errorf("%s %q: a gRPC target carries no credentials; send them as headers with %s",
			xdsName("xds-server"), masked, xdsName("xds-headers"))
	}
	if _, err := ParseHeaders(o.Headers); err != nil {
		return fmt.Errorf("%s: %w", xdsName("xds-headers"), err)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{
		{"xds-backoff-initial", o.Backoff.Initial},
		{"xds-backoff-max", o.Backoff.Max},
		{"xds-connect-retry-interval", o.ConnectRetryInterval},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive", xdsName(d.flag))
		}
	}
	if !(o.Backoff.Factor > 0) {
		return fmt.Errorf("%s must be positive", xdsName("xds-backoff-factor"))
	}
	if o.MaxResponseBytes < 0 {
		return fmt.Errorf("%s must not be negative", xdsName("xds-max-response-bytes"))
	}
	if t := o.ClientTLS(); t != nil {
		// Read once now, so that a wrong path stops the start.
		if _, err := t.Config(); err != nil {
			return fmt.Errorf("xDS TLS (%s, %s, %s): %w", xdsName("xds-tls-cert"), xdsName("xds-tls-key"), xdsName("xds-tls-ca"), err)
		}
	}
	return nil
}

// isUnixTarget reports a gRPC target of a unix socket, whose path may hold
// a '@'.
func isUnixTarget(t string) bool {
	return strings.HasPrefix(t, "unix:") || strings.HasPrefix(t, "unix-abstract:")
}

// ClientOptions are the xDS client's options for the server's version;
// Validate has passed. It also returns the node metadata entries that it
// ignores.
func (o *XDS) ClientOptions(version string) (xds.Options, []string) {
	md, ignored := ParseNodeMetadata(o.NodeMetadata)
	headers, _ := ParseHeaders(o.Headers)
	return xds.Options{
		ServerURL:        o.Server,
		TypeURL:          rules.XDSTypeURL,
		NodeID:           o.NodeID,
		NodeMetadata:     md,
		UserAgentName:    "fastlimit",
		UserAgentVersion: version,
		Headers:          headers,
		TLS:              o.ClientTLS(),
		Backoff:          o.Backoff,
		ConnectRetry:     o.ConnectRetryInterval,
		MaxRecvMsgSize:   o.MaxResponseBytes,
	}, ignored
}

// ClientTLS returns the TLS files of the connection to the xDS server, or
// nil for plaintext.
func (o *XDS) ClientTLS() *xds.TLS {
	if !o.TLS {
		return nil
	}
	return &xds.TLS{CertFile: o.TLSCert, KeyFile: o.TLSKey, CAFile: o.TLSCA, ServerName: o.TLSServerName}
}

// ParseNodeMetadata reads key=value,key2=value2 as the reference does: an
// entry without '=' is ignored (and returned), and a value may hold '='.
func ParseNodeMetadata(s string) (md map[string]string, ignored []string) {
	md = map[string]string{}
	if s == "" {
		return md, nil
	}
	for _, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			ignored = append(ignored, e)
			continue
		}
		md[k] = v
	}
	return md, ignored
}

// ParseHeaders reads name:value,name2:value2, the reference's format; a
// value may hold ':'. An entry without ':' or without a name is an error,
// which names the entry by its place: its text may be a secret.
func ParseHeaders(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	h := map[string]string{}
	for i, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(e, ":")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || k == "" {
			return nil, fmt.Errorf("entry %d is not name:value", i+1)
		}
		if strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
			return nil, fmt.Errorf("%q is not a valid header name", k)
		}
		h[k] = v
	}
	return h, nil
}
