package flexctl

import (
	"context"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"
)

// pageInfo is a connection's PageInfo, as each generated query has it.
type pageInfo interface {
	GetHasNextPage() bool
	GetEndCursor() *string
}

// listCommand is a "list" command over a connection: it asks for every
// page (fetch returns one, after the cursor given) and prints the items.
func listCommand[T any](a *app, short, op string, fetch func(ctx context.Context, c graphql.Client, after *string) ([]T, pageInfo, error), table func([]T) func() Table) *cobra.Command {
	return &cobra.Command{Use: "list", Short: short, Args: args(0, "no arguments"),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			items := []T{}
			var after *string
			for {
				page, pi, err := fetch(cmd.Context(), c, after)
				if err != nil {
					return AsAPIError(op, err)
				}
				items = append(items, page...)
				if pi == nil || !pi.GetHasNextPage() || pi.GetEndCursor() == nil {
					break
				}
				after = pi.GetEndCursor()
			}
			return Write(cmd.OutOrStdout(), a.output, items, table(items))
		})}
}

// getCommand is a "get ID" command: get fetches the item.
func getCommand[T any](a *app, short, what string, get func(ctx context.Context, c graphql.Client, id string) (T, error), table func([]T) func() Table) *cobra.Command {
	return &cobra.Command{Use: "get " + what, Short: short, Args: args(1, "the "+what),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			v, err := get(cmd.Context(), c, argv[0])
			if err != nil {
				return err
			}
			return Write(cmd.OutOrStdout(), a.output, v, table([]T{v}))
		})}
}

// deleteCommand is a "delete ID" command: del deletes and returns the id.
func deleteCommand(a *app, short, op string, del func(ctx context.Context, c graphql.Client, id string) (string, error)) *cobra.Command {
	return &cobra.Command{Use: "delete ID", Short: short, Args: args(1, "the id"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			id, err := del(cmd.Context(), c, argv[0])
			if err != nil {
				return AsAPIError(op, err)
			}
			return writeDeleted(cmd, a.output, id)
		})}
}
