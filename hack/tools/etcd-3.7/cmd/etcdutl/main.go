// etcdutl (go.etcd.io/etcd/etcdutl/v3, the version pinned in ../../go.mod), for the e2e tests.
// Upstream's root command lives in its main package, which cannot be imported; this one assembles the
// same subcommands from the exported go.etcd.io/etcd/etcdutl/v3/etcdutl package.
package main

import (
	"github.com/spf13/cobra"

	"go.etcd.io/etcd/etcdutl/v3/etcdutl"
	"go.etcd.io/etcd/pkg/v3/cobrautl"
)

func main() {
	cobra.EnablePrefixMatching = true
	root := &cobra.Command{
		Use:   "etcdutl",
		Short: "An administrative command line tool for etcd3.",
	}
	root.PersistentFlags().StringVarP(&etcdutl.OutputFormat, "write-out", "w", "simple",
		"set the output format (fields, json, protobuf, simple, table)")
	root.AddCommand(
		etcdutl.NewDefragCommand(),
		etcdutl.NewSnapshotCommand(),
		etcdutl.NewHashKVCommand(),
		etcdutl.NewVersionCommand(),
		etcdutl.NewCompletionCommand(),
		etcdutl.NewMigrateCommand(),
	)
	root.SetHelpTemplate(`{{.UsageString}}`)
	if err := root.Execute(); err != nil {
		cobrautl.ExitWithError(cobrautl.ExitError, err)
	}
}
