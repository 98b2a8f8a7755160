// Command coredns is CoreDNS (github.com/coredns/coredns, the cluster DNS
// of most Kubernetes distributions) with only the plugins that the kube node
// harness's cluster DNS (pkg/dev/kubenode) uses: bind, errors, health,
// ready, kubernetes, forward and cache. It is upstream's command with a
// smaller plugin list: its flags, Corefile and behaviour are CoreDNS's own.
// It is built from source by `make kube-bin`; nothing here is linked into
// flexplane.
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
