package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// handleUsage answers GET /v1/usage?domain=D&descriptor=k=v,k2=v2 with
// the state of one descriptor (parseQuery), consuming nothing: the
// request carries 0 hits, which the stores treat as a peek.
func (a *API) handleUsage(w http.ResponseWriter, r *http.Request) {
	domain, entries, err := parseQuery(r.URL.RawQuery, "descriptor")
	if err == nil {
		err = a.checkSize(1, func(int) int { return len(entries) })
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := limiter.Request[descriptors.Entry]{
		Domain:      domain,
		Descriptors: []limiter.Descriptor[descriptors.Entry]{{Entries: entries, HasHits: true}},
	}
	ctx := r.Context()
	if a.o.Settings.StoreTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.o.Settings.StoreTimeout)
		defer cancel()
	}
	res, err := limiter.Check(ctx, a.o.Limiter, &req)
	switch {
	case errors.Is(err, limiter.ErrInvalid):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		http.Error(w, "rate-limit store unavailable", http.StatusServiceUnavailable)
		return
	}
	writeJSON(w, toUsage(domain, entries, &res.Statuses[0]))
}

// handleRLQSUsage answers GET /v1/quota?domain=D&bucket=k=v,k2=v2 with
// how the bucket's limit is divided on this replica (rlqs.Service.Usage),
// changing nothing; 404 without --rlqs, or with --rlqs-process.
func (a *API) handleRLQSUsage(w http.ResponseWriter, r *http.Request) {
	if a.o.RLQS == nil {
		a.rlqsNotHere(w)
		return
	}
	domain, entries, err := parseQuery(r.URL.RawQuery, "bucket")
	if err == nil {
		err = a.checkSize(1, func(int) int { return len(entries) })
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := make(map[string]string, len(entries))
	for _, e := range entries {
		id[e.Key] = e.Value
	}
	writeJSON(w, a.o.RLQS.Usage(domain, id))
}

func toUsage(domain string, entries []descriptors.Entry, st *limiter.Status) Usage {
	u := Usage{Domain: domain, Descriptor: toEntries(entries)}
	lim := st.Limit
	if lim == nil {
		return u
	}
	u.Matched, u.UsageLimit = true, toUsageLimit(st)
	u.ShadowMode, u.QuotaMode = lim.ShadowMode, lim.QuotaMode
	for i := range st.Parts {
		u.Limits = append(u.Limits, toUsageLimit(&st.Parts[i]))
	}
	return u
}

// toUsageLimit is the state of st's limit; its rule is the limit's Label.
func toUsageLimit(st *limiter.Status) UsageLimit {
	lim := st.Limit
	u := UsageLimit{Rule: lim.Label(), Name: lim.Name}
	if lim.Unlimited {
		u.Unlimited = true
		return u
	}
	u.Algorithm, u.Unit = lim.Algorithm.String(), lim.Unit.String()
	u.Limit = &lim.RequestsPerUnit
	remaining := st.Remaining
	if lim.Algorithm == descriptors.TokenBucket {
		burst := float64(lim.Burst) / descriptors.Milli
		u.Tokens, u.Burst, u.FullInMs = &remaining, &burst, &st.ResetMillis
		return u
	}
	u.Remaining, u.ResetMs = &remaining, &st.ResetMillis
	return u
}

// parseQuery reads the domain and the entries of a raw query: list, the
// entries' parameter, is comma-separated key=value pairs, each part
// percent-decoded after splitting, so that keys and values can hold ','
// and '='. Both are required, each once.
func parseQuery(rawQuery, list string) (domain string, entries []descriptors.Entry, err error) {
	var raw string
	var seenDomain, seenList bool
	for _, p := range strings.Split(rawQuery, "&") {
		k, v, _ := strings.Cut(p, "=")
		switch {
		case k == list && seenList, k == "domain" && seenDomain:
			return "", nil, fmt.Errorf("give one %s", k)
		case k == list:
			raw, seenList = v, true
		case k == "domain":
			if domain, err = url.QueryUnescape(v); err != nil {
				return "", nil, fmt.Errorf("domain %q: %w", v, err)
			}
			seenDomain = true
		}
	}
	if raw == "" {
		return "", nil, fmt.Errorf("%s is required: key=value[,key2=value2...]", list)
	}
	for _, part := range strings.Split(raw, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return "", nil, fmt.Errorf("%s entry %q is not key=value", list, part)
		}
		key, err := url.QueryUnescape(k)
		if err != nil {
			return "", nil, fmt.Errorf("%s key %q: %w", list, k, err)
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return "", nil, fmt.Errorf("%s value %q: %w", list, v, err)
		}
		entries = append(entries, descriptors.Entry{Key: key, Value: value})
	}
	if domain == "" {
		return "", nil, errors.New("domain is required")
	}
	return domain, entries, nil
}

// rlqsNotHere answers 404 to a question about RLQS's buckets in a process
// that holds none: RLQS is off, or served by --rlqs-process's child.
func (a *API) rlqsNotHere(w http.ResponseWriter) {
	msg := "the rate limit quota service is off (--rlqs=false)"
	if s := a.o.Settings; s != nil && s.RLQS.Enabled && s.RLQS.Process {
		msg = "the rate limit quota service runs in a process of its own (--rlqs-process), whose buckets this admin listener does not see"
	}
	http.Error(w, msg, http.StatusNotFound)
}
