package descriptors

import (
	"errors"
	"fmt"
	"strconv"
)

// Label is the limit's name in metrics and stats: its Path, followed for
// one of a Joint by '#' and its Name, or its Index when it has none
// ("api.account#0", "api.account#daily").
func (l *Limit) Label() string {
	if l.label != "" {
		return l.label
	}
	return l.Path
}

// Replacing reports whether the limit, or another of its Joint, replaces
// other limits.
func (l *Limit) Replacing() bool { return len(l.Replaces) > 0 || l.jointReplaces }

// joint compiles d's several limits, placed at, into one Joint, and
// returns its first, or nil and every problem.
func (s *Set) joint(d *Descriptor, at placement) (*Limit, []error) {
	if len(d.Limits) > MaxJoint {
		return nil, []error{fmt.Errorf("rate_limits has %d limits, more than %d", len(d.Limits), MaxJoint)}
	}
	if len(d.Limits) == 1 && d.Limits[0] != nil {
		l, err := s.limit(d, d.Limits[0], at)
		if err != nil {
			return nil, []error{fmt.Errorf("rate_limits[0]: %w", err)}
		}
		s.limits = append(s.limits, l)
		return l, nil
	}
	var errs []error
	joint := make([]*Limit, len(d.Limits))
	members := make(map[string]int, len(d.Limits))
	for i, dl := range d.Limits {
		if dl == nil {
			errs = append(errs, fmt.Errorf("rate_limits[%d] is missing", i))
			continue
		}
		l, err := s.limit(d, dl, at)
		if err == nil && l.Unlimited {
			err = errors.New("unlimited cannot be one of several limits")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("rate_limits[%d]: %w", i, err))
			continue
		}
		member := l.Name
		if member == "" {
			member = strconv.Itoa(i)
		}
		if j, dup := members[member]; dup {
			errs = append(errs, fmt.Errorf("rate_limits[%d] and rate_limits[%d] both count as '%s'; give them distinct names", j, i, member))
		}
		members[member] = i
		l.Index, l.label = i, at.path+"#"+member
		joint[i] = l
	}
	replacing := false
	for i, l := range joint {
		for _, r := range limitReplaces(l) {
			replacing = true
			if j, ok := members[r]; ok && j != i && joint[j] != nil && joint[j].Name == r {
				errs = append(errs, fmt.Errorf("rate_limits[%d] replaces '%s', a limit of the same descriptor", i, r))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	for _, l := range joint {
		l.Joint, l.jointReplaces = joint, replacing
		s.limits = append(s.limits, l)
	}
	return joint[0], nil
}

func limitReplaces(l *Limit) []string {
	if l == nil {
		return nil
	}
	return l.Replaces
}
