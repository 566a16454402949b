// Package deploy holds the checks of Leasehold's deployment files: the
// Helm chart in helm/leasehold and the manifests it renders, committed in
// kubernetes/. It is its own module so that the main module does not
// depend on k8s.io/api.
package deploy
