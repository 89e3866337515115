package settings

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fastlimit/fastlimit/internal/source/xds"
)

// Values of --config-type (CONFIG_TYPE), taken in any case.
const (
	configTypeFile = "FILE"
	configTypeXDS  = "GRPC_XDS_SOTW"
)

// XDS configures rules over xDS. The flags are named so that their
// environment twins are envoyproxy/ratelimit's variables, with its
// defaults.
type XDS struct {
	ConfigType   string // FILE or GRPC_XDS_SOTW, in any case
	ForceStart   bool
	NodeID       string
	NodeMetadata string // key=value,key2=value2
	ServerURL    string
	Headers      string // name:value,name2:value2
	UseTLS       bool
	CertFile     string
	KeyFile      string
	CAFile       string
	ServerSAN    string
	Backoff      xds.Backoff
	ConnectRetry time.Duration
	MaxMsgSize   int
}

// Enabled reports whether rules come from xDS.
func (o *XDS) Enabled() bool { return strings.EqualFold(o.ConfigType, configTypeXDS) }

func (o *XDS) validate() error {
	if !o.Enabled() && !strings.EqualFold(o.ConfigType, configTypeFile) {
		return fmt.Errorf("--config-type (CONFIG_TYPE): %q is neither %s nor %s", o.ConfigType, configTypeFile, configTypeXDS)
	}
	if !o.Enabled() {
		return nil
	}
	if strings.TrimSpace(o.ServerURL) == "" {
		return errors.New("--config-grpc-xds-server-url (CONFIG_GRPC_XDS_SERVER_URL) is required with GRPC_XDS_SOTW")
	}
	if _, err := ParseHeaders(o.Headers); err != nil {
		return fmt.Errorf("--config-grpc-xds-client-additional-headers (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS): %w", err)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--xds-client-backoff-initial-interval (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL)", o.Backoff.Initial},
		{"--xds-client-backoff-max-interval (XDS_CLIENT_BACKOFF_MAX_INTERVAL)", o.Backoff.Max},
		{"--config-grpc-xds-server-connect-retry-interval (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL)", o.ConnectRetry},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s must be positive", d.name)
		}
	}
	if !(o.Backoff.Factor > 0) {
		return errors.New("--xds-client-backoff-random-factor (XDS_CLIENT_BACKOFF_RANDOM_FACTOR) must be positive")
	}
	if o.MaxMsgSize < 0 {
		return errors.New("--xds-client-max-msg-size-in-bytes (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES) must not be negative")
	}
	if t := o.TLS(); t != nil {
		// Read once now, so that a wrong path stops the start; every
		// connection reads the files again.
		if _, err := t.Config(); err != nil {
			return fmt.Errorf("xDS TLS (CONFIG_GRPC_XDS_CLIENT_TLS_CERT, CONFIG_GRPC_XDS_CLIENT_TLS_KEY, CONFIG_GRPC_XDS_SERVER_TLS_CACERT): %w", err)
		}
	}
	return nil
}

// TLS returns the TLS files, or nil for plaintext.
func (o *XDS) TLS() *xds.TLS {
	if !o.UseTLS {
		return nil
	}
	return &xds.TLS{CertFile: o.CertFile, KeyFile: o.KeyFile, CAFile: o.CAFile, ServerName: o.ServerSAN}
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

// ParseHeaders reads name:value,name2:value2, the reference's format.
// A value may hold ':' (the reference refuses that); an entry without ':'
// or without a name is an error.
func ParseHeaders(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	h := map[string]string{}
	for _, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(e, ":")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not name:value", e)
		}
		if strings.Trim(k, "abcdefghijklmnopqrstuvwxyz0123456789-_.") != "" {
			return nil, fmt.Errorf("%q is not a valid header name", k)
		}
		h[k] = v
	}
	return h, nil
}
