// Package charttest renders the fastlimit Helm chart with Helm's own Go
// packages, as `helm template` does, and decodes every object strictly
// into its Kubernetes type. It is a module of its own so that Helm and
// the Kubernetes API stay out of FastLimit's go.mod.
package charttest
