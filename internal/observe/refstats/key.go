package refstats

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/fastlimit/fastlimit/pkg/descriptors"
	"github.com/fastlimit/fastlimit/pkg/limiter"
)

// Stat names of envoyproxy/ratelimit ("the reference"), which refStats
// counts under. A rule's stats are ratelimit.service.rate_limit.KEY.STAT,
// KEY being the rule's key as the reference's config builds it (see
// appendStatKey).
const (
	statRulePrefix   = "ratelimit.service.rate_limit."
	statTotalHits    = ".total_hits"
	statOverLimit    = ".over_limit"
	statNearLimit    = ".near_limit"
	statWithinLimit  = ".within_limit"
	statShadowMode   = ".shadow_mode"
	statNegativeHits = ".total_negative_hits" // envoyproxy/ratelimit#1140
	statDomainAbsent = ".domain_not_found"

	statRedisError    = "ratelimit.service.call.should_rate_limit.redis_error"
	statServiceError  = "ratelimit.service.call.should_rate_limit.service_error"
	statLoadSuccess   = "ratelimit.service.config_load_success"
	statLoadError     = "ratelimit.service.config_load_error"
	statGlobalShadow  = "ratelimit.service.global_shadow_mode"
	statServerPrefix  = "ratelimit_server."
	statTotalRequests = ".total_requests"
	statResponseTime  = ".response_time"
)

// staticKey reports whether lim's stat key is its Path whatever the
// request: neither detailed_metric nor value_to_metric on any level.
func staticKey(lim *descriptors.Limit) bool {
	if lim.DetailedMetric {
		return false
	}
	for _, lv := range lim.Levels {
		if lv.ValueToMetric {
			return false
		}
	}
	return true
}

// appendStatKey appends the reference's stat key of a decision by lim on
// entries (before sanitizeStat):
//
//   - a limit override: the domain and every entry, "key_value" (or "key"
//     for an empty value), joined by dots;
//   - detailed_metric: the domain and every entry, "key_value", except
//     that a share_threshold level keeps its wildcard pattern;
//   - otherwise each level as configured ("key", "key_value" or
//     "key_pattern*"), except that a value_to_metric level shows the
//     request's value instead of none or its wildcard pattern (but not of
//     a share_threshold pattern).
//
// Without value_to_metric and detailed_metric that is lim.Path.
func appendStatKey(b []byte, domain string, lim *descriptors.Limit, override bool, es entries) []byte {
	b = append(b, domain...)
	n := es.len()
	switch {
	case override || len(lim.Levels) != n:
		for j := range n {
			key, value := es.at(j)
			b = appendLevel(b, key, value)
		}
	case lim.DetailedMetric:
		for j := range n {
			key, value := es.at(j)
			if lv := lim.Levels[j]; lv.ShareThreshold {
				b = appendLevel(b, key, lv.Value)
				continue
			}
			if sharedAny(lim) {
				b = appendLevel(b, key, value)
				continue
			}
			// The reference writes "key_" for an empty value here.
			b = append(b, '.')
			b = append(b, key...)
			b = append(b, '_')
			b = append(b, value...)
		}
	default:
		for j := range n {
			lv := lim.Levels[j]
			v := lv.Value
			if lv.ValueToMetric && !lv.ShareThreshold && (v == "" || descriptors.IsWildcard(v)) {
				_, v = es.at(j)
			}
			b = appendLevel(b, lv.Key, v)
		}
	}
	return b
}

// entries are the entries of one descriptor of a request.
type entries struct {
	req limiter.View // nil: none
	i   int
}

func entriesOf(req limiter.View, i int) entries { return entries{req, i} }

func (es entries) len() int {
	if es.req == nil || es.i >= es.req.Len() {
		return 0
	}
	return es.req.Entries(es.i)
}

func (es entries) at(j int) (key, value string) { return es.req.Entry(es.i, j) }

func sharedAny(lim *descriptors.Limit) bool {
	for _, lv := range lim.Levels {
		if lv.ShareThreshold {
			return true
		}
	}
	return false
}

// appendLevel appends ".key" or ".key_value".
func appendLevel(b []byte, key, value string) []byte {
	b = append(b, '.')
	b = append(b, key...)
	if value != "" {
		b = append(b, '_')
		b = append(b, value...)
	}
	return b
}

var (
	ipv4InStat   = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)
	statReplacer = strings.NewReplacer(":", "_", "|", "_")
)

// sanitizeStat cleans a stat key as the reference does: ':' and '|'
// become '_', and so do the dots of anything that looks like an IPv4
// address, so that an address stays one level of the stat name.
func sanitizeStat(key string) string {
	// Request values that are not UTF-8 (see rls.Codec) would make label
	// values Prometheus refuses.
	if !utf8.ValidString(key) {
		key = strings.ToValidUTF8(key, "\uFFFD")
	}
	key = statReplacer.Replace(key)
	return ipv4InStat.ReplaceAllStringFunc(key, func(ip string) string {
		return strings.ReplaceAll(ip, ".", "_")
	})
}
