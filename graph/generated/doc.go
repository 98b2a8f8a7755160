// Package generated is the GraphQL executor gqlgen generates from
// graph/*.graphqls (make generate; one file per schema file): parsing,
// validation and the dispatch of each field to the resolvers of package
// graph. Only this file is written by hand.
package generated
