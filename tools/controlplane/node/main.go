// Command node is the kubelet, kube-controller-manager and kube-scheduler of the
// same Kubernetes release as kube-apiserver, in one binary that runs the
// component its name (argv[0]) says: quickq-guard's node tests link it under
// each name. One binary links the shared packages once, which builds faster
// than three.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	_ "time/tzdata" // CronJob time zones, as the upstream controller-manager has them

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

var commands = map[string]func() *cobra.Command{
	"kubelet": func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-controller-manager": func() *cobra.Command {
		return controllermanager.NewControllerManagerCommand()
	},
	"kube-scheduler": func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	name := filepath.Base(os.Args[0])
	command, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: run as kubelet, kube-controller-manager or kube-scheduler\n", name)
		os.Exit(2)
	}
	os.Exit(cli.Run(command()))
}
