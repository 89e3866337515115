package admin

import (
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Bounds of every admin request, so that no client, authorized or not,
// makes an answer or its work grow without bound: a body's bytes, and
// the descriptors of a request and the entries of each (lower when
// --max-descriptors or --max-entries say so; docs/security.md, "Bounds",
// has the largest answer).
const (
	maxBody        = 64 << 10
	maxDescriptors = 64
	maxEntries     = 32
)

// errTooLarge answers a body past maxBody.
var errTooLarge = fmt.Errorf("the body is larger than %d KiB, the most an admin request takes", maxBody>>10)

// readBody reads an admin POST's body, answering 413 or 400 itself.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		http.Error(w, errTooLarge.Error(), http.StatusRequestEntityTooLarge)
		return nil, false
	}
	if err != nil {
		http.Error(w, "cannot read body: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return body, true
}

// bounds are the most descriptors of an admin request and entries of
// each.
func (a *API) bounds() (descs, entries int) {
	descs, entries = maxDescriptors, maxEntries
	if m := a.o.Settings.Limits.MaxDescriptors; m > 0 {
		descs = min(descs, m)
	}
	if m := a.o.Settings.Limits.MaxEntries; m > 0 {
		entries = min(entries, m)
	}
	return descs, entries
}

// checkSize says why a request of n descriptors, descriptor i of which
// has entries(i) entries, is too large; nil when it is not.
func (a *API) checkSize(n int, entries func(i int) int) error {
	maxD, maxE := a.bounds()
	if n > maxD {
		return fmt.Errorf("%d descriptors: an admin request takes at most %d", n, maxD)
	}
	for i := range n {
		if e := entries(i); e > maxE {
			return fmt.Errorf("descriptor %d has %d entries: an admin request takes at most %d a descriptor", i, e, maxE)
		}
	}
	return nil
}
