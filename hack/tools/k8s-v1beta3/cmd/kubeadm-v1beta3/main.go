// kubeadm of k8s.io/kubernetes (the version pinned in ../../go.mod), for validating v1beta3 configurations.
package main

import (
	"k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmutil "k8s.io/kubernetes/cmd/kubeadm/app/util"
)

func main() {
	kubeadmutil.CheckErr(app.Run())
}
