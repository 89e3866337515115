package admin

import (
	"errors"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
)

// access is what an endpoint needs of a client.
type access uint8

const (
	// open: anyone who reaches the listener (metrics, the rules, the
	// index): what Prometheus and the reference's debug listener serve.
	open access = iota
	// identifiers: an answer that names clients (descriptor values,
	// Envoy identities) or the process's memory (pprof). Authorized when
	// the listener is reachable beyond loopback.
	identifiers
	// write: changes state; always authorized.
	write
)

// Errors of the request checks.
var (
	errNotJSON   = errors.New("the body must be JSON: send Content-Type: application/json")
	errCrossSite = errors.New("a request from another site (Origin, Sec-Fetch-Site) is refused: the admin API takes no request a web page makes")
)

// guard checks what every request to the admin listener must pass: a
// Host it answers to (against DNS rebinding), a JSON body from no other
// site for a POST (against cross-site requests, which a browser holding
// a client certificate would otherwise send), and authorization as need
// and beyondLoopback say. A refusal is answered, counted and logged.
type guard struct {
	a              *API
	hosts          []string // names besides IP addresses and localhost
	beyondLoopback bool
}

// wrap serves h to the requests that pass the checks for need.
func (g *guard) wrap(need access, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if err := sameSite(r); err != nil {
				g.refuse(w, r, metrics.AdminCrossSite, err, statusOf(err))
				return
			}
		}
		if need == write || need == identifiers && g.beyondLoopback {
			if _, err := g.a.auth.who(r); err != nil {
				g.refuse(w, r, metrics.AdminUnauthorized, err, http.StatusForbidden)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// host serves h to requests whose Host the listener answers to, and
// 421 to others.
func (g *guard) host(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostAllowed(r.Host) {
			g.refuse(w, r, metrics.AdminHost, errors.New("Host "+quoted(r.Host)+" is not a name of this admin listener: "+
				"ask by IP address or localhost, or give the server --admin-allowed-hosts"), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether host (a Host header, with or without a
// port) is an IP address, localhost or a name of hosts. A page that DNS
// rebinding points at the listener sends its own name.
func (g *guard) hostAllowed(host string) bool {
	if host == "" {
		return true // HTTP/1.0: no browser
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	return net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") || slices.Contains(g.hosts, host)
}

// sameSite returns why a POST is refused as a cross-site request, nil
// when it is JSON from no web page of another origin. A browser sends
// JSON to another origin only after a CORS preflight, which the admin
// listener never answers; Origin and Sec-Fetch-Site say where the page
// that sent a request came from.
func sameSite(r *http.Request) error {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return errNotJSON
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return errCrossSite
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return errCrossSite
		}
	}
	return nil
}

func statusOf(err error) int {
	if errors.Is(err, errNotJSON) {
		return http.StatusUnsupportedMediaType
	}
	return http.StatusForbidden
}

// refuse answers a refused request with code and err, counts it and logs
// it (at most one line a second per reason).
func (g *guard) refuse(w http.ResponseWriter, r *http.Request, reason string, err error, code int) {
	g.a.metrics.Refused(reason)
	g.a.audit.refused(r, reason, err)
	http.Error(w, err.Error(), code)
}
