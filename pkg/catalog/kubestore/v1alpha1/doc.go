// Package v1alpha1 is the Kubernetes API of flexplane's catalog: the
// custom resources flexplane.io/v1alpha1 (VDC, ComputeProfile,
// StorageProfile, Image, ZonePolicy, ExternalNetwork, EdgeGateway,
// LoadBalancer, SecurityGroup, UserSSHKeys, PlacementGroup)
// whose CustomResourceDefinitions controller-gen
// generates from these types and their markers (`make generate` writes
// them into charts/flexplane/crds and pkg/catalog/kubestore/crds).
//
// The types mirror the JSON of the domain types in pkg/catalog field for
// field (a test in pkg/catalog/kubestore holds them equal); the CRDs'
// OpenAPI schemas repeat the domain's validation, so a manifest applied
// with kubectl is checked as strictly as a write through the API. Times
// are RFC 3339 strings with nanoseconds, as the domain writes them.
//
// +groupName=flexplane.io
// +kubebuilder:object:generate=true
package v1alpha1
