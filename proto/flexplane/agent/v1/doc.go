// Package agentv1 is the agent's gRPC API, generated from agent.proto
// (make generate: buf with pinned protoc-gen-go and protoc-gen-go-grpc):
// the orchestrator calls it over the mesh on every Proxmox node. Only
// this file is written by hand.
package agentv1
