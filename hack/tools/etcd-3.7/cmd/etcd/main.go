// etcd server (go.etcd.io/etcd/server/v3, the version pinned in ../../go.mod), for the e2e tests.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
