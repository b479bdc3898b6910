// clusterctl-envsubst answers, for each template read from stdin, what clusterctl's own simple YAML
// processor (sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor, the one `clusterctl generate
// cluster` uses, with drone/envsubst) makes of it: the variables it lists with their defaults, and the
// rendered bytes or the error.
//
// Input: one JSON object per line, {"text": "...", "values": {"NAME": "value", ...}}; a variable not in
// values is unset. Output: one JSON object per line, {"variables": {"NAME": "default" or null}, "output":
// base64 of the rendered bytes, "error": "..."}, with "variables_error" when listing failed.
// `clusterctl-envsubst --version` prints the Cluster API version it was built with.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"

	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/yamlprocessor"
)

type request struct {
	Text   string            `json:"text"`
	Values map[string]string `json:"values"`
}

type answer struct {
	Variables      map[string]*string `json:"variables,omitempty"`
	VariablesError string             `json:"variables_error,omitempty"`
	Output         []byte             `json:"output,omitempty"`
	Error          string             `json:"error,omitempty"`
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "--version" {
		fmt.Println(clusterAPIVersion())
		return
	}
	processor := yamlprocessor.NewSimpleProcessor()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	encoder := json.NewEncoder(out)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintf(os.Stderr, "clusterctl-envsubst: a line is not a request: %v\n", err)
			os.Exit(2)
		}
		ans := answerFor(processor, req)
		if err := encoder.Encode(ans); err != nil {
			fmt.Fprintf(os.Stderr, "clusterctl-envsubst: %v\n", err)
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "clusterctl-envsubst: reading stdin: %v\n", err)
		os.Exit(2)
	}
}

// answerFor asks the processor; a panic (drone/envsubst slices out of range on some substrings, which
// crashes clusterctl) is reported as an error starting with "panic: ".
func answerFor(processor *yamlprocessor.SimpleProcessor, req request) (ans answer) {
	defer func() {
		if r := recover(); r != nil {
			ans.Output = nil
			ans.Error = fmt.Sprintf("panic: %v", r)
		}
	}()
	variables, err := processor.GetVariableMap([]byte(req.Text))
	if err != nil {
		ans.VariablesError = err.Error()
	} else {
		ans.Variables = variables
	}
	rendered, err := processor.Process([]byte(req.Text), func(name string) (string, error) {
		if value, ok := req.Values[name]; ok {
			return value, nil
		}
		return "", fmt.Errorf("%s is not set", name)
	})
	switch {
	case err != nil:
		ans.Error = err.Error()
	case rendered == nil:
		ans.Output = []byte{}
	default:
		ans.Output = rendered
	}
	return ans
}

func clusterAPIVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, dep := range info.Deps {
		if dep.Path == "sigs.k8s.io/cluster-api" {
			return dep.Version
		}
	}
	return "unknown"
}
