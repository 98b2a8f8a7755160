package flexctl

import (
	"strconv"

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
	list := &cobra.Command{Use: "list", Short: "List the catalog's images", Args: args(0, "no arguments"),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.ListImages(cmd.Context(), c)
			if err != nil {
				return apiError("list images", err)
			}
			images := []api.ImageFields{}
			for _, i := range r.Images {
				images = append(images, i.ImageFields)
			}
			return Write(cmd.OutOrStdout(), a.output, images, imageTable(images))
		})}
	get := &cobra.Command{Use: "get NAME", Short: "Show an image", Args: args(1, "the image's name"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			r, err := api.GetImage(cmd.Context(), c, argv[0])
			if err != nil {
				return apiError("get image", err)
			}
			if r.Image == nil {
				return &APIError{Message: "no image " + argv[0], Code: "NOT_FOUND"}
			}
			return Write(cmd.OutOrStdout(), a.output, r.Image.ImageFields, imageTable([]api.ImageFields{r.Image.ImageFields}))
		})}
	image.AddCommand(list, get)
	return image
}
