package controlplane

import (
	"fmt"
	"strings"

	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

// derivedKeys are the top-level chart values the Manager derives from
// each cluster's Spec (and pki, from its certificates): a site's values
// may not set them.
var derivedKeys = []string{"cluster", "version", "serviceCIDR", "podCIDR", "endpoint", "pki"}

// SiteValues reads chart values of the flexkube chart, YAML or JSON, that
// a site gives every hosted control plane (its registry and pull policy,
// storage class and size, resources, replicas) and returns them as
// Config.Values. It refuses, with ErrInvalid, a document that is not a
// mapping, one that sets a value the Manager derives from each cluster
// (cluster, version, serviceCIDR, podCIDR, endpoint, pki), and one the
// chart's values.schema.json refuses once merged over the chart's
// defaults and a cluster's values, so a bad file stops the orchestrator
// at its start rather than failing each cluster's install. The function
// returns a new copy on each call (the Manager merges into it).
func SiteValues(data []byte) (func(Spec) map[string]any, error) {
	parse := func() (map[string]any, error) {
		var v map[string]any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, invalid("chart values: want a YAML mapping: %v", err)
		}
		return v, nil
	}
	v, err := parse()
	if err != nil {
		return nil, err
	}
	var set []string
	for _, k := range derivedKeys {
		if _, ok := v[k]; ok {
			set = append(set, k)
		}
	}
	if len(set) > 0 {
		return nil, invalid("chart values: %s derived from each cluster, not set by the site", strings.Join(set, ", "))
	}
	c, err := embeddedChart()
	if err != nil {
		return nil, fmt.Errorf("chart values: %w", err)
	}
	m := &Manager{cfg: Config{Chart: c, ServiceType: "ClusterIP", Values: func(Spec) map[string]any { return v }}}
	sample := Spec{Cluster: "sample", Version: "v1.37.2", ServiceCIDR: "10.96.0.0/12", PodCIDR: "10.244.0.0/16", Endpoint: "10.1.0.1:6443"}
	vals, err := chartutil.CoalesceValues(c, m.values(sample, ""))
	if err != nil {
		return nil, invalid("chart values: %v", err)
	}
	if err := chartutil.ValidateAgainstSchema(c, vals); err != nil {
		return nil, invalid("chart values: %s", strings.TrimSpace(err.Error()))
	}
	return func(Spec) map[string]any {
		fresh, err := parse()
		if err != nil { // parsed once already: cannot happen
			return nil
		}
		return fresh
	}, nil
}
