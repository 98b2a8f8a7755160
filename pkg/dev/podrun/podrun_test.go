package podrun

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestRewritePaths: mount paths become their directories as a path, as a
// path's prefix and after a flag's "=", the longest mount first; other
// paths stay.
func TestRewritePaths(t *testing.T) {
	t.Parallel()
	mounts := []mount{{"/etc/kubernetes/pki/etcd", "/tmp/d/etcd"}, {"/etc/kubernetes/pki", "/tmp/d/pki"},
		{"/var/lib/etcd", "/tmp/d/data"}, {"/tmp", "/tmp/d/tmp"}}
	for in, want := range map[string]string{
		"--tls-cert-file=/etc/kubernetes/pki/apiserver.crt": "--tls-cert-file=/tmp/d/pki/apiserver.crt",
		"--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt":     "--etcd-cafile=/tmp/d/etcd/ca.crt",
		"--data-dir=/var/lib/etcd":                          "--data-dir=/tmp/d/data",
		"/var/lib/etcd":                                     "/tmp/d/data",
		"--data-dir=/var/lib/etcdx":                         "--data-dir=/var/lib/etcdx",
		"certificate-authority: /etc/kubernetes/pki/ca.crt": "certificate-authority: /tmp/d/pki/ca.crt",
		"--cert-dir=/tmp/certs":                             "--cert-dir=/tmp/d/tmp/certs",
		"--v=2":                                             "--v=2",
	} {
		if got := rewritePaths(in, mounts); got != want {
			t.Errorf("rewritePaths(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestExpand: $(VAR) as the kubelet expands it.
func TestExpand(t *testing.T) {
	t.Parallel()
	env := map[string]string{"POD_NAME": "etcd-0", "POD_IP": "127.0.0.1"}
	for in, want := range map[string]string{
		"--name=$(POD_NAME)":                      "--name=etcd-0",
		"--initial-cluster=$(POD_NAME)=$(POD_IP)": "--initial-cluster=etcd-0=127.0.0.1",
		"$(UNKNOWN)":                              "$(UNKNOWN)",
		"$$(POD_NAME)":                            "$(POD_NAME)",
	} {
		if got := expand(in, env); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestWriteItems: items map keys to paths (no escaping the directory); no
// items writes every key; a missing key is an error.
func TestWriteItems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := map[string][]byte{"tls.crt": []byte("crt"), "tls.key": []byte("key")}
	if err := writeItems(dir, "secret s", data, []corev1.KeyToPath{{Key: "tls.crt", Path: "../../ca.crt"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "ca.crt")); err != nil || string(got) != "crt" {
		t.Errorf("ca.crt: %q, %v", got, err)
	}
	if err := writeItems(dir, "secret s", data, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "tls.key")); err != nil || string(got) != "key" {
		t.Errorf("tls.key: %q, %v", got, err)
	}
	if err := writeItems(dir, "secret s", data, []corev1.KeyToPath{{Key: "nope", Path: "x"}}); err == nil {
		t.Error("a missing key is no error")
	}
}
