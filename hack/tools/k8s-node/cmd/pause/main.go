// pause: the sandbox process of every pod on real nodes, what kubeadm's pause image runs. It holds the pod's
// namespaces, reaps the children it inherits as the pod's PID 1, and exits on SIGINT or SIGTERM. `-v` prints
// its name, which the build checks.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause")
		return
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Every child that exited, not just the one the signal was for: signals coalesce.
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
