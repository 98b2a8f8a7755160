// Package edgev1 is the agent's edge gateway gRPC API, generated from edge.proto
// (make generate: buf with pinned protoc-gen-go and protoc-gen-go-grpc): the
// orchestrator sends each VDC's edge gateway state to the agent that runs it. Only
// this file is written by hand.
package edgev1
