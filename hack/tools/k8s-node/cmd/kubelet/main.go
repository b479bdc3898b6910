// kubelet of k8s.io/kubernetes (the version pinned in ../../go.mod): the node agent of real nodes, run
// by systemd.
package main

import (
	"context"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // --logging-format=json
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	"k8s.io/kubernetes/cmd/kubelet/app"
	"os"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
