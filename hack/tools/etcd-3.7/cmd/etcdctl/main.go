// etcdctl (go.etcd.io/etcd/etcdctl/v3, the version pinned in ../../go.mod), for the e2e tests.
package main

import "go.etcd.io/etcd/etcdctl/v3/ctlv3"

func main() {
	ctlv3.MustStart()
}
