package kubestore

import (
	"context"
	"encoding/base64"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/flexplane/flexplane/pkg/catalog"
)

// secretsGVR is the core API's Secrets.
var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// managedBy labels the Secrets the store writes.
const managedBy = "flexplane"

var _ catalog.SecretStore = (*Store)(nil)

// GetSecret implements catalog.SecretStore: the Secret of that name in the
// store's Config.SecretNamespace, read from the API server (secrets are not cached).
func (s *Store) GetSecret(ctx context.Context, name string) (map[string][]byte, error) {
	u, err := s.client.Resource(secretsGVR).Namespace(s.secretNS).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("kubestore: get secret: %w", &catalog.NotFoundError{Kind: catalog.KindSecret, Name: name})
	}
	if err != nil {
		return nil, fmt.Errorf("kubestore: get secret: %w", err)
	}
	raw, _, _ := unstructured.NestedStringMap(u.Object, "data")
	out := make(map[string][]byte, len(raw))
	for k, v := range raw {
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("kubestore: get secret %s: key %s: %w", name, k, err)
		}
		out[k] = b
	}
	return out, nil
}

// PutSecret implements catalog.SecretStore: an Opaque Secret labelled
// app.kubernetes.io/managed-by=flexplane, created or replaced.
func (s *Store) PutSecret(ctx context.Context, name string, data map[string][]byte) error {
	enc := make(map[string]any, len(data))
	for k, v := range data {
		enc[k] = base64.StdEncoding.EncodeToString(v)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "data": enc,
		"metadata": map[string]any{"name": name, "namespace": s.secretNS,
			"labels": map[string]any{"app.kubernetes.io/managed-by": managedBy}},
	}}
	api := s.client.Resource(secretsGVR).Namespace(s.secretNS)
	_, err := api.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := api.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("kubestore: put secret: %w", gerr)
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		_, err = api.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("kubestore: put secret: %w", FromAPIError(catalog.KindSecret, name, err))
	}
	return nil
}

// DeleteSecret implements catalog.SecretStore.
func (s *Store) DeleteSecret(ctx context.Context, name string) error {
	err := s.client.Resource(secretsGVR).Namespace(s.secretNS).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubestore: delete secret: %w", err)
	}
	return nil
}
