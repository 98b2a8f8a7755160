// Command badagent is a broken agent release for tests: it reports its
// version like the agent (-version) and then, depending on how it was
// built (-X main.mode=crash|hang), exits at start or runs without ever
// joining the mesh.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

var (
	version = "v0.0.0"
	mode    = "crash"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-version" {
		fmt.Println(version)
		return
	}
	if mode == "crash" {
		fmt.Fprintln(os.Stderr, "panic: badagent "+version+" crashes at start")
		os.Exit(2)
	}
	fmt.Fprintln(os.Stderr, "badagent "+version+" runs but never becomes healthy")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
}
