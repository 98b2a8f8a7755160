package flexctl

import (
	"context"
	"strconv"

	"github.com/Khan/genqlient/graphql"
	"github.com/spf13/cobra"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

func imageTable(images []api.ImageFields) func() Table {
	return func() Table {
		t := Table{Header: []string{"NAME", "VERSION", "CLOUD-INIT", "DESCRIPTION"}}
		for _, i := range images {
			t.Rows = append(t.Rows, []string{i.Name, i.Version, strconv.FormatBool(i.CloudInit), i.Description})
		}
		return t
	}
}

func (a *app) imageCommand() *cobra.Command {
	image := group("image", "The image catalog: list, get")
	list := listCommand(a, "List the catalog's images", "list images",
		func(ctx context.Context, c graphql.Client, _ *string) ([]api.ImageFields, pageInfo, error) {
			r, err := api.ListImages(ctx, c)
			if err != nil {
				return nil, nil, err
			}
			var out []api.ImageFields
			for _, i := range r.Images {
				out = append(out, i.ImageFields)
			}
			return out, nil, nil
		}, imageTable)
	get := getCommand(a, "Show an image", "NAME", func(ctx context.Context, c graphql.Client, name string) (api.ImageFields, error) {
		r, err := api.GetImage(ctx, c, name)
		if err != nil {
			return api.ImageFields{}, AsAPIError("get image", err)
		}
		if r.Image == nil {
			return api.ImageFields{}, &APIError{Message: "no image " + name, Code: "NOT_FOUND"}
		}
		return r.Image.ImageFields, nil
	}, imageTable)
	image.AddCommand(list, get)
	return image
}
