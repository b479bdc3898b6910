// sim-kubelet is the one kubelet endpoint a simulated node needs besides what the simulator does itself:
// port-forwarding. kube-apiserver proxies `pods/portforward` to https://<node address>:10250/portForward/
// <namespace>/<pod>: as SPDY/3.1 (protocol portforward.k8s.io) for SPDY clients and for WebSocket ones
// tunnelling SPDY, as a WebSocket upgrade for the others. This server answers both with the kubelet's own
// implementation and forwards each stream to a port on --target, inside the node's network namespace,
// where the static pods listen.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/version"
	"k8s.io/kubelet/pkg/cri/streaming/portforward"
)

// forwarder copies a port-forward stream to and from a TCP port of the node.
type forwarder struct {
	target string
}

func (f forwarder) PortForward(ctx context.Context, pod string, _ types.UID, port int32, stream io.ReadWriteCloser) error {
	defer stream.Close()
	address := net.JoinHostPort(f.target, fmt.Sprint(port))
	conn, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", address)
	if err != nil {
		return fmt.Errorf("pod %s: %w", pod, err)
	}
	defer conn.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(conn, stream); done <- struct{}{} }()
	go func() { _, _ = io.Copy(stream, conn); done <- struct{}{} }()
	<-done
	return nil
}

func main() {
	listen := flag.String("listen", ":10250", "address to serve HTTPS on")
	certFile := flag.String("tls-cert-file", "", "serving certificate (PEM)")
	keyFile := flag.String("tls-private-key-file", "", "key of the serving certificate (PEM)")
	target := flag.String("target", "127.0.0.1", "address the forwarded ports are opened on")
	showVersion := flag.Bool("version", false, "print the Kubernetes version this was built from and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(version.Get().GitVersion)
		return
	}
	if *certFile == "" || *keyFile == "" {
		fmt.Fprintln(os.Stderr, "sim-kubelet: --tls-cert-file and --tls-private-key-file are required")
		os.Exit(2)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/portForward/", func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/portForward/"), "/")
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
			http.Error(w, "expected /portForward/{namespace}/{pod}", http.StatusNotFound)
			return
		}
		// WebSocket clients name their ports in the query (SPDY ones per stream), as the kubelet reads them.
		options, err := portforward.NewV4Options(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		portforward.ServePortForward(w, r, forwarder{target: *target}, parts[1], "", options,
			4*time.Hour, 30*time.Second, portforward.SupportedProtocols)
	})
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "sim-kubelet: serving port-forward on %s, forwarding to %s\n", *listen, *target)
	if err := server.ListenAndServeTLS(*certFile, *keyFile); err != nil {
		fmt.Fprintf(os.Stderr, "sim-kubelet: %v\n", err)
		os.Exit(1)
	}
}
