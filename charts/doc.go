// Package charts holds flexplane's Helm charts (flexplane: the orchestrator;
// identity: Zitadel and the flexplane project in it; flexkube: one hosted
// tenant Kubernetes control plane, embedded for pkg/tenantkube/controlplane,
// see FlexKube). Its tests, with the Helm Go SDK, lint the charts, render a
// matrix of values against golden files (go test ./charts -update rewrites
// them) and install, upgrade and uninstall them on a real Kubernetes API
// server.
package charts
