// coredns (github.com/coredns/coredns, the version pinned in ../../go.mod) with every plugin of that
// release, as its own binary: the DNS add-on of real nodes.
package main

import (
	_ "github.com/coredns/coredns/core/plugin" // registers the release's plugins
	"github.com/coredns/coredns/coremain"
)

func main() {
	coremain.Run()
}
