// Package opsctl is the operators' commands of the fastlimit binary (top,
// explain, reset, refund, usage): clients of the admin listeners of one or
// more replicas, whose answers they merge, printed as tables or JSON.
package opsctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fastlimit/fastlimit/internal/admin"
	"github.com/fastlimit/fastlimit/internal/settings"
)

// Exit codes of the commands.
const (
	ExitOK      = 0 // done; explain: the request would be OK
	ExitError   = 1 // a replica failed or refused
	ExitUsage   = 2 // bad flags or arguments
	ExitLimited = 3 // explain: the request would be OVER_LIMIT
)

// Commands are the operators' commands, by name.
var Commands = map[string]func(args []string, getenv func(string) string, stdout, stderr io.Writer) int{
	"top":     runTop,
	"explain": runExplain,
	"reset":   func(a []string, g func(string) string, o, e io.Writer) int { return runCounters("reset", a, g, o, e) },
	"refund":  func(a []string, g func(string) string, o, e io.Writer) int { return runCounters("refund", a, g, o, e) },
	"usage":   runUsage,
}

// errUsage marks a command line that cannot run; errUsageShown one whose
// error the flag package printed already.
var (
	errUsage      = errors.New("usage")
	errUsageShown = errors.New("usage shown")
)

// common are the flags of every command.
type common struct {
	admin     string
	json      bool
	timeout   time.Duration
	tokenFile string
	ca        string
	cert, key string
}

// newFlags returns the flag set of command name with the common flags;
// FASTLIMIT_ADMIN gives --admin's default, FASTLIMIT_TOKEN_FILE
// --token-file's.
func newFlags(name, synopsis string, c *common, getenv func(string) string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fastlimit "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: fastlimit %s %s\n\nExit codes: 0 ok, 1 a replica failed or refused, 2 bad usage%s.\n\n",
			name, synopsis, map[bool]string{true: ", 3 the request would be OVER_LIMIT"}[name == "explain"])
		fs.PrintDefaults()
	}
	def := getenv("FASTLIMIT_ADMIN")
	if def == "" {
		def = "127.0.0.1:6070"
	}
	fs.StringVar(&c.admin, "admin", def, "admin listeners of the replicas, host:port (or https://host:port) comma-separated, "+
		"or dns:///name:port for every address of a name, a headless Service's (env FASTLIMIT_ADMIN)")
	fs.Lookup("admin").DefValue = settings.MaskCredentials(def) // as -h prints it
	fs.BoolVar(&c.json, "json", false, "print the (merged) answer as JSON, for scripts")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "longest wait for each replica")
	fs.StringVar(&c.tokenFile, "token-file", getenv("FASTLIMIT_TOKEN_FILE"),
		"file of the bearer token the server's --admin-token-file holds: the token alone, or its name:token line; writes need it, "+
			"and reads of identifiers from an admin listener beyond loopback (env FASTLIMIT_TOKEN_FILE)")
	fs.StringVar(&c.ca, "tls-ca", "", "CA file (PEM) that verifies admin listeners served over TLS (--admin-tls-cert); implies https")
	fs.StringVar(&c.cert, "tls-cert", "", "client certificate file (PEM), instead of a token; implies https")
	fs.StringVar(&c.key, "tls-key", "", "key file (PEM) of --tls-cert")
	return fs
}

// parse parses args with fs; a bad flag or a positional argument is a
// usage error, -h none.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsageShown, err) // the flag package printed it, and the usage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q (-h lists the flags)", errUsage, term(settings.MaskCredentials(fs.Arg(0))))
	}
	return nil
}

// exit maps a command's error to its exit code, printing it.
func exit(err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, errUsageShown):
		return ExitUsage
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, strings.TrimPrefix(err.Error(), "usage: "))
		return ExitUsage
	}
	fmt.Fprintln(stderr, "fastlimit:", err)
	return ExitError
}

// client talks to the admin listeners.
type client struct {
	c     common
	http  *http.Client
	bases []string          // each replica's base URL, as printed: passwords masked
	urls  map[string]string // the base URLs whose passwords bases mask
	token string            // "" without --token-file
}

// newClient builds the client of the common flags, warning on stderr of
// a token that would cross the network in clear.
func newClient(c common, stderr io.Writer) (*client, error) {
	cl := &client{c: c, urls: map[string]string{}}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	https := c.ca != "" || c.cert != ""
	if c.ca != "" {
		var err error
		if conf.RootCAs, err = caPool(c.ca); err != nil {
			return nil, err
		}
	}
	if c.cert != "" || c.key != "" {
		pair, err := tls.LoadX509KeyPair(c.cert, c.key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert, --tls-key: %w", err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	tr := &http.Transport{TLSClientConfig: conf}
	cl.http = &http.Client{Timeout: c.timeout, Transport: tr}
	names := map[string]string{} // a dns:/// replica's address -> its name, for TLS
	for _, a := range strings.Split(c.admin, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if name, ok := strings.CutPrefix(a, "dns:///"); ok {
			addrs, err := resolve(name, c.timeout)
			if err != nil {
				return nil, err
			}
			scheme := map[bool]string{true: "https://", false: "http://"}[https]
			for _, addr := range addrs {
				cl.bases = append(cl.bases, scheme+addr)
				host, _, _ := net.SplitHostPort(name)
				names[addr] = host
			}
			continue
		}
		if !strings.Contains(a, "://") {
			a = map[bool]string{true: "https://", false: "http://"}[https] + a
		}
		u, err := url.Parse(a)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("%w: --admin %q is not host:port", errUsage, term(settings.MaskCredentials(a)))
		}
		base := strings.TrimSuffix(a, "/")
		shown := settings.MaskCredentials(base)
		if shown != base {
			cl.urls[shown] = base
		}
		cl.bases = append(cl.bases, shown)
	}
	if len(names) > 0 {
		// A replica found by name is dialled by address; its certificate
		// names the name.
		tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			cfg := conf.Clone()
			cfg.ServerName = names[addr]
			d := &tls.Dialer{Config: cfg}
			return d.DialContext(ctx, network, addr)
		}
	}
	if len(cl.bases) == 0 {
		return nil, fmt.Errorf("%w: --admin names no replica", errUsage)
	}
	if c.tokenFile != "" {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		cl.token = strings.TrimSpace(string(b))
		if _, tok, ok := strings.Cut(cl.token, ":"); ok && !strings.Contains(cl.token, "\n") {
			cl.token = tok // a name:token line of the server's file
		}
		var clear []string
		for _, b := range cl.bases {
			if u, err := url.Parse(cl.target(b)); err == nil && u.Scheme == "http" && !loopbackHost(u.Hostname()) {
				clear = append(clear, term(b))
			}
		}
		if len(clear) > 0 {
			fmt.Fprintf(stderr, "fastlimit: warning: the token goes to %s over plain http, readable on the way: "+
				"serve the admin listener over TLS (--admin-tls-cert) and use https:// or --tls-ca\n", strings.Join(clear, ", "))
		}
	}
	return cl, nil
}

// lookupHost resolves a host name (tests replace it).
var lookupHost = net.DefaultResolver.LookupHost

// resolve returns every address of name (host:port), sorted: each
// replica behind a headless Service.
func resolve(name string, timeout time.Duration) ([]string, error) {
	host, port, err := net.SplitHostPort(name)
	if err != nil {
		return nil, fmt.Errorf("%w: --admin dns:///%s: give dns:///name:port", errUsage, term(name))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ips, err := lookupHost(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("--admin dns:///%s: %w", term(name), err)
	}
	slices.Sort(ips)
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = net.JoinHostPort(ip, port)
	}
	return out, nil
}

// loopbackHost reports whether host is a loopback address or localhost.
func loopbackHost(host string) bool {
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// target is the URL of a base as printed.
func (cl *client) target(base string) string {
	if u := cl.urls[base]; u != "" {
		return u
	}
	return base
}

// caPool reads --tls-ca's PEM certificates.
func caPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	pool := x509.NewCertPool()
	if err == nil && !pool.AppendCertsFromPEM(pem) {
		err = errors.New("no PEM certificate")
	}
	if err != nil {
		return nil, fmt.Errorf("--tls-ca %s: %w", path, err)
	}
	return pool, nil
}

// statusError is an admin listener's refusal.
type statusError struct {
	base string
	code int
	msg  string
}

func (e *statusError) Error() string {
	msg := strings.TrimSpace(e.msg)
	if e.code == http.StatusNotFound && msg == "404 page not found" || strings.Contains(msg, "not on the HTTP port") {
		msg += " (is this an admin listener? it is --admin-addr, 127.0.0.1:6070 by default, not the HTTP port)"
	}
	return fmt.Sprintf("%s: %d %s: %s", term(e.base), e.code, http.StatusText(e.code), term(msg))
}

// do sends method to base+path with body (nil: none) and decodes the JSON
// answer into out.
func (cl *client) do(ctx context.Context, base, method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, cl.target(base)+path, rd)
	if err != nil {
		return err
	}
	if cl.token != "" {
		req.Header.Set("Authorization", "Bearer "+cl.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", term(base), err)
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{base: base, code: resp.StatusCode, msg: string(b)}
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: %w", term(base), err)
	}
	return nil
}

// each calls f for every replica, in --admin's order, and returns the
// replicas that answered with their errors joined.
func each[T any](cl *client, f func(ctx context.Context, base string) (T, error)) ([]T, []string, error) {
	var (
		out   []T
		bases []string
		errs  []error
	)
	for _, b := range cl.bases {
		ctx, cancel := context.WithTimeout(context.Background(), cl.c.timeout)
		v, err := f(ctx, b)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out, bases = append(out, v), append(bases, b)
	}
	return out, bases, errors.Join(errs...)
}

// printJSON writes v indented.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// descriptorList is a repeatable flag of descriptors, each
// "key=value,key2=value2", keys and values percent-decoded after
// splitting so that they may hold ',' and '=' (%2C, %3D).
type descriptorList [][]admin.Entry

func (l *descriptorList) String() string { return fmt.Sprint(*l) }

func (l *descriptorList) Set(s string) error {
	d, err := parseEntries(s)
	if err != nil {
		return err
	}
	*l = append(*l, d)
	return nil
}

func parseEntries(s string) ([]admin.Entry, error) {
	var d []admin.Entry
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		var e admin.Entry
		var err error
		if e.Key, err = url.QueryUnescape(k); err == nil {
			e.Value, err = url.QueryUnescape(v)
		}
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		d = append(d, e)
	}
	return d, nil
}

// query is a descriptor's entries as /v1/usage's descriptor parameter.
func query(d []admin.Entry) string {
	parts := make([]string, len(d))
	for i, e := range d {
		parts[i] = url.QueryEscape(e.Key) + "=" + url.QueryEscape(e.Value)
	}
	return strings.Join(parts, ",")
}

// entriesText is a descriptor for a table: "key=value,key2=value2",
// escaped for a terminal (term).
func entriesText(d []admin.Entry) string {
	parts := make([]string, len(d))
	for i, e := range d {
		parts[i] = term(e.Key) + "=" + term(e.Value)
	}
	return strings.Join(parts, ",")
}

// term is s for a terminal: what a client chose (a descriptor's value,
// an Envoy's identity) shown, never obeyed. Control characters (an
// escape sequence, a newline that would fake a row, a tab that would
// shift columns) and Unicode's format characters (bidirectional
// overrides) show as Go escapes, \x1b, \n, \u202e; bytes that are not
// UTF-8 as \xff; a backslash as \\, so that no value can read as
// another's escape.
func term(s string) string {
	clean := true
	for _, r := range s {
		if r < 0x20 || r == 0x7f || r == '\\' || r == utf8.RuneError || r >= 0x80 && (r <= 0x9f || unicode.Is(unicode.Cf, r)) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f, unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
