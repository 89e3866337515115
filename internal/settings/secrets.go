package settings

import (
	"strings"

	"github.com/fastlimit/fastlimit/pkg/store"
)

// Masked stands for a secret wherever FastLimit prints settings.
const Masked = "xxxxx"

// secretFlags are the flags whose values are secrets: the passwords, and
// --xds-headers, whose values may be bearer tokens. A username is not.
var secretFlags = map[string]bool{"redis-password": true, "redis-sentinel-password": true, "redis-auth": true, "xds-headers": true}

// MaskArgs returns a copy of args, a command line, with the value of every
// secret flag (-flag=v, --flag=v or --flag v, under any of its names)
// replaced by Masked, and the credentials that any other argument holds
// hidden as MaskCredentials hides them.
func MaskArgs(args []string) []string {
	out := make([]string, len(args))
	valueNext := false // args[i] is a secret flag's value
	for i, a := range args {
		name, value, hasValue := splitFlag(a)
		secret := name != "" && secretFlags[canonical(name)]
		switch {
		case valueNext:
			out[i], valueNext = mask(a), false
		case secret && !hasValue:
			out[i], valueNext = a, true
		case secret:
			out[i] = strings.TrimSuffix(a, value) + mask(value)
		default:
			out[i] = strings.TrimSuffix(a, value) + MaskCredentials(value)
		}
	}
	return out
}

// mask is Masked, or "" for an empty v: no secret was given.
func mask(v string) string {
	if v == "" {
		return ""
	}
	return Masked
}

// splitFlag splits a, "-name" or "--name" with or without "=value"; name
// is "" and value is a when a is no flag.
func splitFlag(a string) (name, value string, hasValue bool) {
	rest, ok := strings.CutPrefix(a, "-")
	if rest, _ = strings.CutPrefix(rest, "-"); !ok || rest == "" {
		return "", a, false
	}
	name, value, hasValue = strings.Cut(rest, "=")
	return name, value, hasValue
}

// MaskCredentials hides the credentials in v as store.RedactAddr does: of
// v as a whole when it holds a URL, else of each address of a
// comma-separated list that holds a '@'. v without a '@' is returned as is.
func MaskCredentials(v string) string {
	if !strings.Contains(v, "@") {
		return v
	}
	if strings.Contains(v, "://") {
		return store.RedactAddr(v)
	}
	parts := strings.Split(v, ",")
	for i, p := range parts {
		if strings.Contains(p, "@") {
			parts[i] = store.RedactAddr(p)
		}
	}
	return strings.Join(parts, ",")
}
