package graph

import (
	"github.com/flexplane/flexplane/graph/server/apierr"
	"github.com/flexplane/flexplane/pkg/tenantkube"
)

// The managed Kubernetes fields (graph/kubernetes.graphqls) over
// Resolver.Kubernetes; a nil one answers UNAVAILABLE (tenantkube's nil
// Service does).

// kubeErr maps an error of tenantkube; the fields of inputs are under
// input.
func kubeErr(err error) error {
	if err == nil {
		return nil
	}
	return apierr.From(err, "input")
}

// kubeArgErr is kubeErr for a mutation whose bad field is an argument
// (scaleNodePool's size, upgradeKubernetesCluster's version), not a field
// of an input object.
func kubeArgErr(err error) error {
	if ae := apierr.From(err, ""); ae.Code == apierr.BadUserInput {
		return ae
	}
	return kubeErr(err)
}

// taints are the inputs' taints.
func taints(in []*tenantkube.Taint) []tenantkube.Taint {
	var out []tenantkube.Taint
	for _, t := range in {
		out = append(out, *t)
	}
	return out
}
