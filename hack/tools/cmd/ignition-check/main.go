// Command ignition-check is a test helper for the e2e and render tests of this repository. It runs the
// same Ignition libraries that Cluster API v1.14's kubeadm bootstrap provider uses, so our tests can check
// real Ignition output without a Go toolchain in the Rust test run:
//
//	ignition-check transpile [--strict] < config.yaml > ignition.json
//	    Reads a Container Linux Config (YAML) and converts it to an Ignition 2.3 config (compact JSON),
//	    with the Flatcar config transpiler (platform empty), like the provider does with
//	    `ignition.containerLinuxConfig.additionalConfig`: a fatal report, or with --strict a report
//	    with any entry, fails; other report entries are printed to stderr.
//
//	ignition-check validate < ignition.json
//	    Parses and validates an Ignition config with Flatcar Ignition's config/v2_3 package. Prints "ok"
//	    when the report has no error; warnings go to stderr. Only ignition.version 2.3.0 is accepted.
//
// Exit status: 0 on success, 1 when the input is rejected, 2 on a usage error.
// Built and cached by hack/install-testenv.sh; found by testenv::binaries::ignition_check().
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	clct "github.com/flatcar/container-linux-config-transpiler/config"
	ignition "github.com/flatcar/ignition/config/v2_3"
	igntypes "github.com/flatcar/ignition/config/v2_3/types"
	"github.com/flatcar/ignition/config/validate/report"
)

const usage = `usage:
  ignition-check transpile [--strict] < config.yaml   Container Linux Config -> Ignition 2.3 JSON
  ignition-check validate < ignition.json             validate an Ignition 2.3 config
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var code int
	switch os.Args[1] {
	case "transpile":
		code = transpile(os.Args[2:])
	case "validate":
		code = validate(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Fprint(os.Stdout, usage)
	default:
		fmt.Fprintf(os.Stderr, "ignition-check: unknown subcommand %q\n%s", os.Args[1], usage)
		code = 2
	}
	os.Exit(code)
}

func readStdin() ([]byte, bool) {
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ignition-check: reading stdin: %v\n", err)
		return nil, false
	}
	return data, true
}

// rejects says whether a report stops the conversion: any error entry, or with strict any entry at all.
func rejects(r report.Report, strict bool) bool {
	return r.IsFatal() || (strict && len(r.Entries) > 0)
}

// printReport writes each entry of a report to stderr, one after another, under a heading.
func printReport(heading string, r report.Report) {
	if len(r.Entries) == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "%s:\n%s\n", heading, r.String())
}

func transpile(args []string) int {
	flags := flag.NewFlagSet("transpile", flag.ContinueOnError)
	strict := flags.Bool("strict", false, "fail on any report entry (warnings included), not only on errors")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if flags.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "ignition-check transpile: unexpected arguments %q (the config is read from stdin)\n", flags.Args())
		return 2
	}
	data, ok := readStdin()
	if !ok {
		return 1
	}

	clc, ast, parseReport := clct.Parse(data)
	if rejects(parseReport, *strict) {
		printReport("parsing the Container Linux Config failed", parseReport)
		return 1
	}
	ign, convertReport := clct.Convert(clc, "", ast)
	if rejects(convertReport, *strict) {
		printReport("converting the Container Linux Config to Ignition failed", convertReport)
		return 1
	}

	out, err := json.Marshal(&ign)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ignition-check transpile: encoding the Ignition config: %v\n", err)
		return 1
	}
	printReport("parsing the Container Linux Config", parseReport)
	printReport("converting the Container Linux Config to Ignition", convertReport)
	fmt.Fprintf(os.Stdout, "%s\n", out)
	return 0
}

func validate(args []string) int {
	if len(args) != 0 {
		fmt.Fprintf(os.Stderr, "ignition-check validate: unexpected arguments %q (the config is read from stdin)\n", args)
		return 2
	}
	data, ok := readStdin()
	if !ok {
		return 1
	}

	// v2_3.Parse refuses versions above 2.3.0 but silently translates older 2.x configs; we want exactly
	// the version the transpiler emits, so look at the declared version first.
	var header struct {
		Ignition struct {
			Version string `json:"version"`
		} `json:"ignition"`
	}
	if err := json.Unmarshal(data, &header); err == nil && header.Ignition.Version != "" &&
		header.Ignition.Version != igntypes.MaxVersion.String() {
		fmt.Fprintf(os.Stderr, "ignition-check validate: ignition.version is %q, want %q\n",
			header.Ignition.Version, igntypes.MaxVersion.String())
		return 1
	}

	_, r, err := ignition.Parse(data)
	if err != nil || r.IsFatal() {
		if err == nil {
			err = fmt.Errorf("the report has errors")
		}
		fmt.Fprintf(os.Stderr, "ignition-check validate: invalid Ignition config: %v\n", err)
		printReport("report", r)
		return 1
	}
	printReport("warnings", r)
	fmt.Fprintln(os.Stdout, "ok")
	return 0
}
