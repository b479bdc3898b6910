// Command go-template is a test helper for the render tests of this repository. It renders a file's
// contents with Go's own text/template, the way Cluster API v1.14's kubeadm bootstrap provider renders
// `files[].contentFormat: Template`, so our tests can compare our renderer with Go's:
//
//	go-template [--control-plane-version v1.35.0] < template > rendered
//
// The data is a map {"controlPlane": {"version": V}}, or an empty map without the flag (Cluster API leaves
// the key out when the control plane's version is unknown).
//
// Exit status: 0 rendered; 1 the template does not parse (stderr starts "parse: ") or does not execute
// (stderr starts "execute: "); 2 on a usage error.
// Built and cached by hack/install-testenv.sh; found by testenv::binaries::go_template().
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"text/template"
)

func main() {
	version := flag.String("control-plane-version", "", "the control plane's version; empty leaves .controlPlane out")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: go-template [--control-plane-version V] < template")
		os.Exit(2)
	}
	src, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading stdin:", err)
		os.Exit(2)
	}
	data := map[string]interface{}{}
	if *version != "" {
		data["controlPlane"] = map[string]interface{}{"version": *version}
	}
	tpl, err := template.New("file").Parse(string(src))
	if err != nil {
		fmt.Fprintln(os.Stderr, "parse:", err)
		os.Exit(1)
	}
	var out bytes.Buffer
	if err := tpl.Execute(&out, data); err != nil {
		fmt.Fprintln(os.Stderr, "execute:", err)
		os.Exit(1)
	}
	os.Stdout.Write(out.Bytes())
}
