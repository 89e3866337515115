package descriptors

import (
	"io"
	"strconv"
	"strings"
)

// String describes the limit on one line for humans: its Label, then the
// rules files' key=value settings (burst, a token bucket's alone, and cost
// in requests).
func (l *Limit) String() string {
	var b strings.Builder
	b.WriteString(l.Label())
	b.WriteString(":")
	kv := func(k, v string) {
		b.WriteByte(' ')
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(v)
	}
	if l.Name != "" {
		kv("name", l.Name)
	}
	if l.Unlimited {
		kv("unlimited", "true")
	} else {
		kv("algorithm", l.Algorithm.String())
		kv("unit", l.Unit.String())
		kv("requests_per_unit", strconv.FormatUint(uint64(l.RequestsPerUnit), 10))
		kv("unit_multiplier", strconv.FormatUint(uint64(max(l.UnitMultiplier, 1)), 10))
		if l.Algorithm == TokenBucket {
			kv("burst", milli(l.Burst))
		}
		kv("cost", milli(l.Cost))
		if l.Charge != ChargeWhenAllowed {
			kv("charge", l.Charge.String())
		}
		if l.Calendar != "" {
			kv("calendar", l.Calendar)
		}
	}
	kv("shadow_mode", strconv.FormatBool(l.ShadowMode))
	kv("quota_mode", strconv.FormatBool(l.QuotaMode))
	if len(l.Replaces) > 0 {
		kv("replaces", strings.Join(l.Replaces, ","))
	}
	return b.String()
}

// Dump writes every limit of s, one String per line, in Limits order.
func (s *Set) Dump(w io.Writer) error {
	var b strings.Builder
	for _, l := range s.Limits() {
		b.WriteString(l.String())
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// milli formats a milli-request quantity in requests: 1500 as "1.5".
func milli(v int64) string {
	s := strconv.FormatInt(v/Milli, 10)
	frac := v % Milli
	if frac < 0 {
		frac = -frac
		if v > -Milli {
			s = "-" + s
		}
	}
	if frac == 0 {
		return s
	}
	return strings.TrimRight(s+"."+strconv.FormatInt(frac+Milli, 10)[1:], "0")
}
