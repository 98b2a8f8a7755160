package flexctl

import (
	"github.com/spf13/cobra"
)

func (a *app) configCommand() *cobra.Command {
	cfg := group("config", "Contexts of the configuration file: get-contexts, use-context, set-context")

	get := &cobra.Command{Use: "get-contexts", Short: "List the contexts (* marks the current one)", Args: args(0, "no arguments"),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			f, _, err := a.loadFile()
			if err != nil {
				return err
			}
			type row struct {
				Name     string `json:"name"`
				Current  bool   `json:"current"`
				Endpoint string `json:"endpoint"`
				VDC      string `json:"vdc"`
				LoggedIn bool   `json:"loggedIn"`
			}
			rows := []row{}
			for _, c := range f.Contexts {
				rows = append(rows, row{c.Name, c.Name == f.CurrentContext, c.Endpoint, c.VDC, c.Token != ""})
			}
			return Write(cmd.OutOrStdout(), a.output, rows, func() Table {
				t := Table{Header: []string{"CURRENT", "NAME", "ENDPOINT", "VDC", "TOKEN"}}
				for _, r := range rows {
					cur, tok := "", ""
					if r.Current {
						cur = "*"
					}
					if r.LoggedIn {
						tok = "yes"
					}
					t.Rows = append(t.Rows, []string{cur, r.Name, r.Endpoint, r.VDC, tok})
				}
				return t
			})
		})}

	use := &cobra.Command{Use: "use-context NAME", Short: "Make a context the current one", Args: args(1, "the context's name"),
		ValidArgsFunction: a.completeContexts,
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			f, path, err := a.loadFile()
			if err != nil {
				return err
			}
			if f.Context(argv[0]) == nil {
				return usageErrorf("no context %q in the configuration (flexctl config get-contexts lists them)", argv[0])
			}
			f.CurrentContext = argv[0]
			if err := f.Save(path); err != nil {
				return err
			}
			cmd.PrintErrf("current context: %s\n", argv[0])
			return nil
		})}

	var endpoint, vdc string
	set := &cobra.Command{Use: "set-context NAME [--endpoint URL] [--vdc VDC]",
		Short: "Add a context or change its endpoint and VDC (the first one made becomes current)",
		Args:  args(1, "the context's name"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			f, path, err := a.loadFile()
			if err != nil {
				return err
			}
			c := f.Upsert(argv[0])
			if endpoint != "" {
				if c.Endpoint != "" && c.Endpoint != endpoint {
					c.Token, c.RefreshToken, c.TokenURL, c.ClientID = "", "", "", "" // a login holds for its endpoint only
				}
				c.Endpoint = endpoint
			}
			if cmd.Flags().Changed("vdc") {
				c.VDC = vdc
			}
			if f.CurrentContext == "" {
				f.CurrentContext = argv[0]
			}
			if err := f.Save(path); err != nil {
				return err
			}
			cmd.PrintErrf("context %s: endpoint %s, vdc %s\n", c.Name, c.Endpoint, c.VDC)
			return nil
		})}
	// The context's own flags shadow the global ones of the same names.
	set.Flags().StringVar(&endpoint, "endpoint", "", "the API's base URL, without /graphql")
	set.Flags().StringVar(&vdc, "vdc", "", "the VDC to act in")

	cfg.AddCommand(get, use, set)
	return cfg
}
