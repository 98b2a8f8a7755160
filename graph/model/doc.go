// Package model holds the GraphQL types gqlgen generates from
// graph/*.graphqls (make generate) that bind to no Go type of their own:
// inputs, payloads, enums and the objects package graph builds. Only this
// file is written by hand.
package model
