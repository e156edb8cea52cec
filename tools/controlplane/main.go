// Command kube-apiserver is the Kubernetes API server, built from the
// k8s.io/kubernetes module so quickq-guard's cluster tests judge against a
// current release without a prebuilt binary.
package main

import (
	"os"

	_ "time/tzdata" // CronJob time zones, as the upstream binary has them

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
