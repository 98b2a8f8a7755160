// Command trim writes the trimmed Proxmox VE API schema that package pveschema embeds.
//
//	go run ./pkg/pvesim/pveschema/internal/trim -in pkg/pvesim/pveschema/upstream/apidata.json.gz -out pkg/pvesim/pveschema/apidata.json
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/flexplane/flexplane/pkg/pvesim/pveschema/internal/apitrim"
)

func main() {
	in := flag.String("in", "", "full api-viewer schema (apidata.json, or gzip-compressed)")
	out := flag.String("out", "", "trimmed schema to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if in == "" || out == "" {
		return fmt.Errorf("trim: -in and -out are required")
	}
	full, err := apitrim.ReadFull(in)
	if err != nil {
		return fmt.Errorf("trim: %w", err)
	}
	trimmed, err := apitrim.Trim(full)
	if err != nil {
		return fmt.Errorf("trim: %w", err)
	}
	if err := os.WriteFile(out, trimmed, 0o644); err != nil {
		return fmt.Errorf("trim: %w", err)
	}
	return nil
}
