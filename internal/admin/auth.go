package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/fastlimit/fastlimit/internal/observe/metrics"
	"github.com/fastlimit/fastlimit/internal/settings"
)

// Errors of authorization.
var (
	errAuthOff = errors.New("this needs authorization, and none is configured: give the server --admin-token-file " +
		"(bearer tokens, one name:token a line) or --admin-tls-cert, --admin-tls-key and --admin-tls-client-ca (client certificates)")
	errNotAuthorized = errors.New("this needs a bearer token of the server's --admin-token-file (Authorization: Bearer <token>; " +
		"fastlimit's commands: --token-file) or a client certificate of its --admin-tls-client-ca")
	errTokenFileRefused = errors.New("the server's --admin-token-file is refused (its log says why): no token is in force until it is mended")
)

// MinTokenBytes is the shortest token a token file may hold.
const MinTokenBytes = 16

// authorizer authorizes what needs authorization: a bearer token of the
// token file, or a client certificate that the admin TLS verified.
type authorizer struct {
	tokens *tokenFile // nil without --admin-token-file
	certs  bool       // client certificates are verified
}

// newAuthorizer reads o's token file, if any.
func newAuthorizer(o settings.Admin, log *zap.Logger, m *metrics.Admin) *authorizer {
	a := &authorizer{certs: o.TLSClientCA != ""}
	if o.TokenFile != "" {
		a.tokens = newTokenFile(o.TokenFile, log, m)
	}
	return a
}

// who names the client of r, a token's name ("token:<name>") or a
// certificate's subject ("cert:<subject>"), or says why it is not
// authorized.
func (a *authorizer) who(r *http.Request) (string, error) {
	if a.tokens == nil && !a.certs {
		return "", errAuthOff
	}
	if a.certs && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return "cert:" + r.TLS.VerifiedChains[0][0].Subject.String(), nil
	}
	if a.tokens != nil {
		tok, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		name, ok, refused := a.tokens.lookup(strings.TrimSpace(tok))
		switch {
		case bearer && ok:
			return "token:" + name, nil
		case refused && !a.certs:
			return "", errTokenFileRefused
		}
	}
	return "", errNotAuthorized
}

// tokenFile is --admin-token-file: one "name:token" a line ('#' starts a
// comment line), read again when it changes. Each version is taken
// whole or refused whole: a file that is missing or holds no token puts
// none in force; one that cannot be read or parsed is refused, logged
// at error and counted, and puts none in force either, so that an edit
// that revokes a token never leaves it valid. The tokens are held as
// SHA-256 digests and compared in constant time.
type tokenFile struct {
	path    string
	log     *zap.Logger
	metrics *metrics.Admin

	mu      sync.Mutex
	stamp   fileStamp
	tokens  []namedToken
	refused bool // the version of stamp was refused
}

type namedToken struct {
	name string
	sum  [sha256.Size]byte
}

// fileStamp tells versions of a file apart: its size, time and identity
// (a Kubernetes Secret's update is a new file); the zero stamp is a
// missing file.
type fileStamp struct {
	info fs.FileInfo
}

func (s fileStamp) exists() bool { return s.info != nil }

// same reports whether s and o are one version of the file.
func (s fileStamp) same(o fileStamp) bool {
	if s.info == nil || o.info == nil {
		return s.info == o.info
	}
	return os.SameFile(s.info, o.info) && s.info.Size() == o.info.Size() && s.info.ModTime().Equal(o.info.ModTime())
}

// newTokenFile reads path as refresh does.
func newTokenFile(path string, log *zap.Logger, m *metrics.Admin) *tokenFile {
	f := &tokenFile{path: path, log: log, metrics: m}
	f.load(true)
	return f
}

// lookup returns the name of token, reading the file again if it
// changed, and whether the version in force was refused. Every token is
// compared, in constant time: how long it takes tells nothing of which,
// or how much of one, matched.
func (f *tokenFile) lookup(token string) (name string, ok, refused bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.load(false)
	sum := sha256.Sum256([]byte(token))
	found := 0
	for _, t := range f.tokens {
		eq := subtle.ConstantTimeCompare(sum[:], t.sum[:])
		if eq == 1 && found == 0 {
			name = t.name
		}
		found |= eq
	}
	return name, found == 1 && token != "", f.refused
}

// load reads the file if it changed since the version in force (or
// first), and puts its tokens in force, or none.
func (f *tokenFile) load(first bool) {
	st, err := stampOf(f.path)
	if !first && err == nil && st.same(f.stamp) {
		return
	}
	var tokens []namedToken
	if err == nil && st.exists() {
		st, tokens, err = readTokens(f.path)
	}
	file := zap.String("file", f.path)
	switch {
	case err != nil:
		if !f.refused || !st.same(f.stamp) || first {
			f.log.Error("admin token file refused: no token is in force until it is mended", file, zap.Error(err))
			f.metrics.TokenFileRefused()
		}
		f.stamp, f.tokens, f.refused = st, nil, true
	case !st.exists():
		if first || f.stamp.exists() {
			f.log.Warn("admin token file missing: no token is in force", file)
		}
		f.stamp, f.tokens, f.refused = st, nil, false
	default:
		f.log.Info("admin tokens loaded", file, zap.Int("tokens", len(tokens)))
		f.stamp, f.tokens, f.refused = st, tokens, false
	}
	f.metrics.Tokens(len(f.tokens))
}

// stampOf returns the size and time of the file at path; a missing file
// is the zero stamp, without an error.
func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileStamp{}, nil
	}
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{info: fi}, nil
}

// tokenName is what a token's name may be: it is printed in audit lines.
var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)

// readTokens reads and parses a token file; errors name the line, never
// its token.
func readTokens(path string) (fileStamp, []namedToken, error) {
	st, err := stampOf(path)
	if err != nil {
		return st, nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fileStamp{}, nil, nil // removed since the stat
	}
	if err != nil {
		return st, nil, err
	}
	var out []namedToken
	names, sums := map[string]bool{}, map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, tok, ok := strings.Cut(line, ":")
		name, tok = strings.TrimSpace(name), strings.TrimSpace(tok)
		sum := sha256.Sum256([]byte(tok))
		switch {
		case !ok || name == "" || tok == "":
			return st, nil, fmt.Errorf("%s:%d: want name:token", path, n)
		case !tokenName.MatchString(name):
			return st, nil, fmt.Errorf("%s:%d: name %q: give letters, digits and . _ @ + - (up to 64)", path, n, name)
		case len(tok) < MinTokenBytes:
			return st, nil, fmt.Errorf("%s:%d: the token of %s is shorter than %d bytes", path, n, name, MinTokenBytes)
		case names[name]:
			return st, nil, fmt.Errorf("%s:%d: name %s given twice", path, n, name)
		case sums[sum]:
			return st, nil, fmt.Errorf("%s:%d: the token of %s is another name's too", path, n, name)
		}
		names[name], sums[sum] = true, true
		out = append(out, namedToken{name: name, sum: sum})
	}
	return st, out, sc.Err()
}
