// Command deplist writes the checked-in dependency list of a binary (see
// package deptest): deplist -out cmd/agent/deps.txt ./cmd/agent.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/flexplane/flexplane/pkg/dev/deptest"
)

func main() {
	out := flag.String("out", "", "file to write the list to")
	flag.Parse()
	if *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: deplist -out FILE PACKAGE")
		os.Exit(2)
	}
	if err := deptest.WriteList(flag.Arg(0), *out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
