// Package helperv1 is the agent's privileged helper gRPC API, generated from
// helper.proto (make generate: buf with pinned protoc-gen-go and
// protoc-gen-go-grpc): the agent asks the helper, over a local unix socket,
// for the node's privileged work. Only this file is written by hand.
package helperv1
