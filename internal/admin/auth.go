package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fastlimit/fastlimit/internal/settings"
)

// Errors of admin write authorization.
var (
	errWritesOff = errors.New("admin writes are off: give --admin-token-file (bearer tokens, one name:token a line) " +
		"or --admin-tls-cert, --admin-tls-key and --admin-tls-client-ca (client certificates)")
	errNotAuthorized = errors.New("admin writes need a bearer token of --admin-token-file (Authorization: Bearer <token>) " +
		"or a client certificate of --admin-tls-client-ca")
)

// authorizer authorizes the admin listener's writes: a bearer token of
// the token file, or a client certificate that the admin TLS verified.
type authorizer struct {
	tokens *tokenFile // nil without --admin-token-file
	certs  bool       // client certificates are verified
}

// newAuthorizer reads o's token file, if any.
func newAuthorizer(o settings.Admin, log *zap.Logger, _ prometheus.Registerer) (*authorizer, error) {
	a := &authorizer{certs: o.TLSClientCA != ""}
	if o.TokenFile != "" {
		var err error
		if a.tokens, err = newTokenFile(o.TokenFile, log); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// who names the writer of r, a token's name ("token:<name>") or a
// certificate's subject ("cert:<subject>"), or says why r may not write.
func (a *authorizer) who(r *http.Request) (string, error) {
	if a.tokens == nil && !a.certs {
		return "", errWritesOff
	}
	if a.certs && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return "cert:" + r.TLS.VerifiedChains[0][0].Subject.String(), nil
	}
	if a.tokens != nil {
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			if name, ok := a.tokens.lookup(strings.TrimSpace(tok)); ok {
				return "token:" + name, nil
			}
		}
	}
	return "", errNotAuthorized
}

// tokenFile is --admin-token-file: one "name:token" a line ('#' starts a
// comment line), read again when its size or time changes. The
// tokens are held as SHA-256 digests and compared in constant time.
type tokenFile struct {
	path string
	log  *zap.Logger

	mu      sync.Mutex
	stamp   fileStamp
	tokens  []namedToken
	bad     fileStamp // the version last refused, logged once
	refused bool      // bad is set
}

type namedToken struct {
	name string
	sum  [sha256.Size]byte
}

// fileStamp tells versions of a file apart.
type fileStamp struct {
	size    int64
	modTime time.Time
}

// newTokenFile reads path; a file that cannot be read or parsed is an
// error naming the flag.
func newTokenFile(path string, log *zap.Logger) (*tokenFile, error) {
	f := &tokenFile{path: path, log: log}
	st, tokens, err := readTokens(path)
	if err != nil {
		return nil, settings.Bad("admin-token-file", "%w", err)
	}
	f.stamp, f.tokens = st, tokens
	log.Info("admin tokens loaded", zap.String("file", path), zap.Int("tokens", len(tokens)))
	return f, nil
}

// lookup returns the name of token, reading the file again if it changed.
// Every token is compared, in constant time: how long it takes tells
// nothing of which, or how much of one, matched.
func (f *tokenFile) lookup(token string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh()
	sum := sha256.Sum256([]byte(token))
	name, found := "", 0
	for _, t := range f.tokens {
		eq := subtle.ConstantTimeCompare(sum[:], t.sum[:])
		if eq == 1 && found == 0 {
			name = t.name
		}
		found |= eq
	}
	return name, found == 1 && token != ""
}

// refresh reads the file again if it changed; a version that cannot be
// read or parsed is refused (logged once) and the tokens in force stay.
func (f *tokenFile) refresh() {
	st, err := stampOf(f.path)
	if err == nil && (st == f.stamp || f.refused && st == f.bad) {
		return
	}
	st, tokens, err := readTokens(f.path)
	if err != nil {
		if !f.refused || st != f.bad {
			f.log.Warn("admin token file refused; the tokens in force stay", zap.String("file", f.path), zap.Error(err))
		}
		f.bad, f.refused = st, true
		return
	}
	f.stamp, f.tokens, f.refused = st, tokens, false
	f.log.Info("admin tokens reloaded", zap.String("file", f.path), zap.Int("tokens", len(tokens)))
}

// stampOf returns the size and time of the file at path.
func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{size: fi.Size(), modTime: fi.ModTime()}, nil
}

// readTokens reads and parses a token file; errors name the line, never
// its token.
func readTokens(path string) (fileStamp, []namedToken, error) {
	st, err := stampOf(path)
	if err != nil {
		return st, nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return st, nil, err
	}
	var out []namedToken
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, tok, ok := strings.Cut(line, ":")
		name, tok = strings.TrimSpace(name), strings.TrimSpace(tok)
		if !ok || name == "" || tok == "" {
			return st, nil, fmt.Errorf("%s:%d: want name:token", path, n)
		}
		out = append(out, namedToken{name: name, sum: sha256.Sum256([]byte(tok))})
	}
	if len(out) == 0 {
		return st, nil, fmt.Errorf("%s: no name:token line", path)
	}
	return st, out, sc.Err()
}
