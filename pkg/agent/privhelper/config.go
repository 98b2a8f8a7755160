package privhelper

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/user"
	"strconv"
	"strings"
)

// LoadConfig builds a Config from the helper's command-line flags (`agent
// helper -h` lists them). -agent-user is required: a user name or uid,
// whose primary group is the agent's group unless -agent-group names
// another. Logger is left for the caller; the log level is returned.
func LoadConfig(args []string) (Config, slog.Level, error) {
	fs := flag.NewFlagSet("helper", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg Config
	var level slog.Level
	var snippets, volumes, uploads []string
	fs.StringVar(&cfg.Socket, "socket", DefaultSocket, "the unix socket to serve the agent on")
	agentUser := fs.String("agent-user", "", "the agent's user (name or uid): the only peer served")
	agentGroup := fs.String("agent-group", "", "the agent's group (name or gid; default the user's primary group)")
	fs.Func("snippet-dir", "a directory snippet files may be written in; repeat it for each storage (default "+strings.Join(DefaultSnippetDirs, ", ")+")", func(v string) error {
		snippets = append(snippets, v)
		return nil
	})
	fs.Func("volume-dir", "a directory guests' volumes may be opened in, writable by root only; repeat it (default "+strings.Join(DefaultVolumeDirs, ", ")+")", func(v string) error {
		volumes = append(volumes, v)
		return nil
	})
	fs.Func("upload-dir", "a directory tenants' uploaded images may be written in (a file storage's import or template/iso directory); repeat it for each (default "+strings.Join(DefaultUploadDirs, ", ")+")", func(v string) error {
		uploads = append(uploads, v)
		return nil
	})
	fs.StringVar(&cfg.GuestConfigDir, "guest-config-dir", DefaultGuestConfigDir, "this node's guest configs (<vmid>.conf)")
	fs.StringVar(&cfg.EdgeBridgeNamespace, "edge-bridge-netns", "", "named network namespace holding the node's bridges (default the helper's own)")
	fs.StringVar(&cfg.EdgeNamespacePrefix, "edge-netns-prefix", "", "prefix of the edge gateways' namespace names (default fp)")
	fs.TextVar(&level, "log-level", slog.LevelInfo, "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		return Config{}, 0, fmt.Errorf("helper: %w\nflags:\n%s", err, b.String())
	}
	if fs.NArg() > 0 {
		return Config{}, 0, fmt.Errorf("helper: unexpected arguments %q", fs.Args())
	}
	cfg.SnippetDirs, cfg.VolumeDirs, cfg.UploadDirs = snippets, volumes, uploads
	if *agentUser == "" {
		return Config{}, 0, fmt.Errorf("helper: -agent-user is required")
	}
	u, err := lookupUser(*agentUser)
	if err != nil {
		return Config{}, 0, fmt.Errorf("helper: agent user: %w", err)
	}
	if cfg.AgentUID, err = strconv.Atoi(u.Uid); err == nil {
		cfg.AgentGID, err = strconv.Atoi(u.Gid)
	}
	if err != nil {
		return Config{}, 0, fmt.Errorf("helper: agent user %s: %w", *agentUser, err)
	}
	if *agentGroup != "" {
		g, err := user.LookupGroup(*agentGroup)
		if err != nil {
			g, err = user.LookupGroupId(*agentGroup)
		}
		if err != nil {
			return Config{}, 0, fmt.Errorf("helper: agent group: %w", err)
		}
		if cfg.AgentGID, err = strconv.Atoi(g.Gid); err != nil {
			return Config{}, 0, fmt.Errorf("helper: agent group %s: %w", *agentGroup, err)
		}
	}
	return cfg, level, nil
}

// lookupUser finds a user by name, else by uid.
func lookupUser(s string) (*user.User, error) {
	u, err := user.Lookup(s)
	if err != nil {
		if _, nerr := strconv.Atoi(s); nerr == nil {
			return user.LookupId(s)
		}
	}
	return u, err
}
