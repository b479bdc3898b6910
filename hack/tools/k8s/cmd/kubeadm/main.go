// kubeadm of k8s.io/kubernetes (the version pinned in ../../go.mod), for the e2e tests.
package main

import (
	"k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
)

func main() {
	// Prints the error and exits with kubeadm's own exit codes, as the upstream binary.
	kubeadmerrors.HandleError(app.Run())
}
