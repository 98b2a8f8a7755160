// Package v1alpha1 is the Kubernetes API of flexplane's Cluster API
// providers, infrastructure.flexplane.io/v1alpha1: FlexCluster (the
// InfraCluster: a VDC, a zone and a network), FlexMachine and
// FlexMachineTemplate (the InfraMachine: one worker VM created through
// flexplane's own createVM path) and FlexControlPlane (the control-plane
// provider object of a hosted control plane that runs as pods, not
// Machines). controller-gen generates the CustomResourceDefinitions from
// these types and markers (`make generate` writes them into
// pkg/tenantkube/capiprovider/crds); each carries the label
// cluster.x-k8s.io/v1beta2=v1alpha1 by which Cluster API's controllers
// find the version of the v1beta2 contract to use.
//
// +groupName=infrastructure.flexplane.io
// +kubebuilder:object:generate=true
package v1alpha1
