// Command terraform-provider-flexplane is flexplane's Terraform (and
// OpenTofu) provider, source address flexplane/flexplane (package
// pkg/tfprovider; docs/use/terraform.md).
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/flexplane/flexplane/pkg/tfprovider"
)

// version is set at link time (-X main.version=...).
var version = "dev"

func main() {
	debug := flag.Bool("debug", false, "run for a debugger: print the TF_REATTACH_PROVIDERS value to set")
	flag.Parse()
	err := providerserver.Serve(context.Background(), tfprovider.New(tfprovider.Config{Version: version}),
		providerserver.ServeOpts{Address: tfprovider.Address, Debug: *debug})
	if err != nil {
		log.Fatal(err)
	}
}
