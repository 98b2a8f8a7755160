package flexctl

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// app is one run of flexctl: its environment and global flags.
type app struct {
	env Env
	// ran is set when a command's own code starts: an error before it is
	// cobra's (an unknown command or flag, wrong arguments): ExitUsage.
	ran bool

	flags  Overrides
	output string
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "flexctl",
		Short: "flexctl drives a flexplane cloud: VMs, networks, images, load balancers, Kubernetes",
		Long: `flexctl drives a flexplane cloud through its GraphQL API.

Where to call, in which VDC and with which token come from the flags, else
the FLEXPLANE_ENDPOINT, FLEXPLANE_VDC and FLEXPLANE_TOKEN variables, else the
current context of the configuration file (flexctl config). flexctl login
signs in and keeps the token in the context.

Exit codes: 0 done, 1 refused by the API (its message and code are printed)
or failed, 2 bad usage.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			switch a.output {
			case OutputTable, OutputJSON, OutputYAML:
				return nil
			}
			return usageErrorf("unknown output format %q: use table, json or yaml", a.output)
		},
	}
	pf := root.PersistentFlags()
	pf.StringVar(&a.flags.Endpoint, "endpoint", "", "the API's base URL, e.g. https://cloud.example.com (env "+EnvEndpoint+")")
	pf.StringVar(&a.flags.VDC, "vdc", "", "the VDC to act in (env "+EnvVDC+")")
	pf.StringVar(&a.flags.Token, "token", "", "a bearer token: a service account's or a user's access token (env "+EnvToken+")")
	pf.StringVar(&a.flags.Context, "context", "", "the context of the configuration file to use (default: its current context)")
	pf.StringVarP(&a.output, "output", "o", OutputTable, "output format: table, json or yaml")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{OutputTable, OutputJSON, OutputYAML}, cobra.ShellCompDirectiveNoFileComp))
	_ = root.RegisterFlagCompletionFunc("context", a.completeContexts)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{msg: err.Error()} })
	root.CompletionOptions.DisableDefaultCmd = true

	root.AddCommand(a.loginCommand(), a.configCommand(), a.vmCommand(), a.networkCommand(),
		a.imageCommand(), a.backupCommand(), a.diskCommand(), a.lbCommand(), a.kubernetesCommand(), a.completionCommand(root))
	return root
}

// completionCommand prints the completion script of a shell.
func (a *app) completionCommand(root *cobra.Command) *cobra.Command {
	shells := []string{"bash", "zsh", "fish"}
	return &cobra.Command{
		Use:       "completion bash|zsh|fish",
		Short:     "Print the shell completion script (e.g. source <(flexctl completion bash))",
		ValidArgs: shells,
		Args:      args(1, "a shell: bash, zsh or fish"),
		RunE: a.run(func(cmd *cobra.Command, argv []string) error {
			out := cmd.OutOrStdout()
			switch argv[0] {
			case "bash":
				return root.GenBashCompletionV2(out, true)
			case "zsh":
				return root.GenZshCompletion(out)
			case "fish":
				return root.GenFishCompletion(out, true)
			}
			return usageErrorf("no completion for shell %q: use bash, zsh or fish", argv[0])
		}),
	}
}

// run wraps a command's own code: from there on an error is the API's or
// the command's, not a usage error (unless it says so).
func (a *app) run(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.ran = true
		return fn(cmd, args)
	}
}

// commandPath is the path of the command that ran last (for the usage
// hint), or root's.
func (a *app) commandPath(root *cobra.Command) string {
	cmd, _, err := root.Find(a.env.Args)
	if err != nil || cmd == nil {
		return root.CommandPath()
	}
	return cmd.CommandPath()
}

// group is a command that only holds subcommands: run alone, or with an
// unknown subcommand, it is a usage error.
func group(use, short string, aliases ...string) *cobra.Command {
	return &cobra.Command{
		Use:     use,
		Short:   short,
		Aliases: aliases,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("%s needs a subcommand: %s", cmd.CommandPath(), subcommands(cmd))
		},
	}
}

func subcommands(cmd *cobra.Command) string {
	s := ""
	for i, c := range cmd.Commands() {
		if i > 0 {
			s += ", "
		}
		s += c.Name()
	}
	return s
}

// args checks the number of arguments as cobra.ExactArgs does, as a usage
// error.
func args(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %s", cmd.CommandPath(), names)
		}
		return nil
	}
}

// required marks flags as required.
func required(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := cobra.MarkFlagRequired(fs, n); err != nil {
			panic(fmt.Sprintf("flexctl: flag %s: %v", n, err))
		}
	}
}

// settings resolves the global flags against the environment and the
// configuration file.
func (a *app) settings() (Settings, error) {
	f, _, err := a.loadFile()
	if err != nil {
		return Settings{}, err
	}
	return Resolve(f, a.flags, a.env.Getenv)
}

// loadFile reads the configuration file and returns it with its path.
func (a *app) loadFile() (*File, string, error) {
	path, err := ConfigPath(a.env.Getenv)
	if err != nil {
		return nil, "", err
	}
	f, err := LoadFile(path)
	if err != nil {
		return nil, "", err
	}
	return f, path, nil
}

func (a *app) completeContexts(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	f, _, err := a.loadFile()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	var names []string
	for _, c := range f.Contexts {
		names = append(names, c.Name)
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
