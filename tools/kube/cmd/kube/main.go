// Command kube is kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet and kube-proxy in one binary, chosen by the name it is run as
// (the Makefile's kube-bin links the five names to it). One build shares the
// packages and the link work the five have in common, which roughly
// halves a cold `make kube-bin`; each name behaves exactly as the upstream
// command of that name.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // time zones for CronJobs, as upstream's commands embed them

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	commands := map[string]func() *cobra.Command{
		"kube-apiserver":          apiserver.NewAPIServerCommand,
		"kube-controller-manager": controllermanager.NewControllerManagerCommand,
		"kube-scheduler": func() *cobra.Command {
			return scheduler.NewSchedulerCommand()
		},
		"kubelet": func() *cobra.Command {
			return kubelet.NewKubeletCommand(context.Background())
		},
		"kube-proxy": proxy.NewProxyCommand,
	}
	name := filepath.Base(os.Args[0])
	newCommand, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "kube: run as kube-apiserver, kube-controller-manager, kube-scheduler, kubelet or kube-proxy (a link to this binary), not %q\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
