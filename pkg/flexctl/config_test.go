package flexctl_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flexplane/flexplane/pkg/flexctl"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestResolvePrecedence: each setting comes from its flag, else its
// variable, else the context (--context's, else the current one).
func TestResolvePrecedence(t *testing.T) {
	t.Parallel()
	f := &flexctl.File{CurrentContext: "dev", Contexts: []flexctl.Context{
		{Name: "dev", Endpoint: "http://dev", VDC: "red", Token: "dev-token"},
		{Name: "prod", Endpoint: "https://prod/", VDC: "blue", Token: "prod-token"},
	}}
	env := envOf(map[string]string{flexctl.EnvEndpoint: "http://env", flexctl.EnvVDC: "env-vdc", flexctl.EnvToken: "env-token"})
	none := envOf(nil)
	for _, tc := range []struct {
		name string
		o    flexctl.Overrides
		env  func(string) string
		want flexctl.Settings
	}{
		{"context only", flexctl.Overrides{}, none,
			flexctl.Settings{Context: "dev", Endpoint: "http://dev", VDC: "red", Token: "dev-token", FromContext: true}},
		{"--context picks another, its trailing slash trimmed", flexctl.Overrides{Context: "prod"}, none,
			flexctl.Settings{Context: "prod", Endpoint: "https://prod", VDC: "blue", Token: "prod-token", FromContext: true}},
		{"env over context", flexctl.Overrides{}, env,
			flexctl.Settings{Context: "dev", Endpoint: "http://env", VDC: "env-vdc", Token: "env-token"}},
		{"flags over env", flexctl.Overrides{Endpoint: "http://flag", VDC: "flag-vdc", Token: "flag-token"}, env,
			flexctl.Settings{Context: "dev", Endpoint: "http://flag", VDC: "flag-vdc", Token: "flag-token"}},
		{"one flag, one variable, the rest from the context", flexctl.Overrides{VDC: "flag-vdc"},
			envOf(map[string]string{flexctl.EnvToken: "env-token"}),
			flexctl.Settings{Context: "dev", Endpoint: "http://dev", VDC: "flag-vdc", Token: "env-token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := flexctl.Resolve(f, tc.o, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := flexctl.Resolve(f, flexctl.Overrides{Context: "nope"}, none); err == nil {
		t.Error("an unknown --context was accepted")
	}
	got, err := flexctl.Resolve(&flexctl.File{}, flexctl.Overrides{}, none)
	if err != nil || got != (flexctl.Settings{}) {
		t.Errorf("empty configuration: %+v, %v", got, err)
	}
}

// TestConfigPath honours XDG_CONFIG_HOME, else HOME.
func TestConfigPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HOME": "/h"}, "/h/.config/flexplane/config.yaml"},
		{map[string]string{"HOME": "/h", "XDG_CONFIG_HOME": "/x"}, "/x/flexplane/config.yaml"},
		{map[string]string{"HOME": "/h", "XDG_CONFIG_HOME": "relative"}, "/h/.config/flexplane/config.yaml"},
	} {
		got, err := flexctl.ConfigPath(envOf(tc.env))
		if err != nil || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.env, got, err, tc.want)
		}
	}
	if _, err := flexctl.ConfigPath(envOf(nil)); err == nil {
		t.Error("no HOME and no XDG_CONFIG_HOME gave a path")
	}
}

// runIn runs flexctl in-process with HOME and XDG_CONFIG_HOME in dir.
func runIn(t *testing.T, dir string, extra map[string]string, args ...string) (string, string, int) {
	t.Helper()
	env := map[string]string{"HOME": dir, "XDG_CONFIG_HOME": filepath.Join(dir, "xdg")}
	for k, v := range extra {
		env[k] = v
	}
	var out, errb bytes.Buffer
	code := flexctl.Main(context.Background(), flexctl.Env{Args: args, Stdout: &out, Stderr: &errb, Getenv: envOf(env)})
	return out.String(), errb.String(), code
}

// TestConfigCommands: set-context makes the first context current and
// writes the file 0600 under XDG_CONFIG_HOME; use-context switches;
// get-contexts lists in every format; an unknown context is a usage error.
func TestConfigCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, e, code := runIn(t, dir, nil, "config", "set-context", "dev", "--endpoint", "http://127.0.0.1:8080", "--vdc", "red"); code != 0 {
		t.Fatalf("set-context: %d %s", code, e)
	}
	if _, e, code := runIn(t, dir, nil, "config", "set-context", "prod", "--endpoint", "https://cloud.example.com"); code != 0 {
		t.Fatalf("set-context: %d %s", code, e)
	}
	path := filepath.Join(dir, "xdg", "flexplane", "config.yaml")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	out, _, _ := runIn(t, dir, nil, "config", "get-contexts")
	if want := "CURRENT  NAME  ENDPOINT                   VDC  TOKEN\n*        dev   http://127.0.0.1:8080      red  \n         prod  https://cloud.example.com       \n"; out != want {
		t.Errorf("get-contexts:\n%q\nwant\n%q", out, want)
	}
	if _, e, code := runIn(t, dir, nil, "config", "use-context", "prod"); code != 0 {
		t.Fatalf("use-context: %d %s", code, e)
	}
	out, _, _ = runIn(t, dir, nil, "config", "get-contexts", "-o", "json")
	if !strings.Contains(out, `"name": "prod",`+"\n"+`    "current": true`) {
		t.Errorf("get-contexts -o json after use-context prod:\n%s", out)
	}
	out, _, _ = runIn(t, dir, nil, "config", "get-contexts", "-o", "yaml")
	if !strings.Contains(out, "- current: false\n  endpoint: http://127.0.0.1:8080\n") {
		t.Errorf("get-contexts -o yaml:\n%s", out)
	}
	if _, e, code := runIn(t, dir, nil, "config", "use-context", "nope"); code != flexctl.ExitUsage || !strings.Contains(e, `no context "nope"`) {
		t.Errorf("use-context nope: %d %s", code, e)
	}
	if _, e, code := runIn(t, dir, nil, "--context", "nope", "vm", "list"); code != flexctl.ExitUsage {
		t.Errorf("--context nope: %d %s", code, e)
	}
	f, err := flexctl.LoadFile(path)
	if err != nil || f.CurrentContext != "prod" || len(f.Contexts) != 2 {
		t.Fatalf("file: %+v %v", f, err)
	}
}

// TestWriteFormats prints one answer as a table, JSON and YAML.
func TestWriteFormats(t *testing.T) {
	t.Parallel()
	v := []struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}{{"vm-1", "web"}, {"vm-22", "database"}}
	table := func() flexctl.Table {
		return flexctl.Table{Header: []string{"ID", "NAME"}, Rows: [][]string{{"vm-1", "web"}, {"vm-22", "database"}}}
	}
	for format, want := range map[string]string{
		"table": "ID     NAME\nvm-1   web\nvm-22  database\n",
		"json":  "[\n  {\n    \"id\": \"vm-1\",\n    \"name\": \"web\"\n  },\n  {\n    \"id\": \"vm-22\",\n    \"name\": \"database\"\n  }\n]\n",
		"yaml":  "- id: vm-1\n  name: web\n- id: vm-22\n  name: database\n",
	} {
		var b bytes.Buffer
		if err := flexctl.Write(&b, format, v, table); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Errorf("%s:\n%q\nwant\n%q", format, b.String(), want)
		}
	}
	if err := flexctl.Write(&bytes.Buffer{}, "xml", v, table); err == nil {
		t.Error("xml was accepted")
	}
}

// TestUsageErrorsExit2: flags, arguments and settings that are wrong are
// exit code 2 and send nothing (there is no endpoint to send to).
func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"vm"}, {"vm", "list", "extra"}, {"vm", "frobnicate"}, {"--bogus"}, {"vm", "list"}, // the last: no endpoint
		{"network", "create", "lan", "--zone", "alpha"}, {"completion", "tcsh"},
	} {
		_, e, code := runIn(t, dir, nil, args...)
		if code != flexctl.ExitUsage || !strings.HasPrefix(e, "error: ") {
			t.Errorf("flexctl %v: exit %d, %q", args, code, e)
		}
	}
	// An endpoint nothing listens on: the request fails, exit 1.
	_, e, code := runIn(t, dir, map[string]string{flexctl.EnvEndpoint: "http://127.0.0.1:1"}, "vm", "list")
	if code != flexctl.ExitRefused {
		t.Errorf("unreachable endpoint: exit %d, %q", code, e)
	}
}

// TestCompletion prints the completion script of each shell.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, e, code := runIn(t, t.TempDir(), nil, "completion", shell)
		if code != 0 || !strings.Contains(out, "flexctl") {
			t.Errorf("completion %s: %d %s", shell, code, e)
		}
	}
}

// TestCompletionOfBackup: the shell completion (cobra's __complete, which
// the scripts call) offers the backup commands and their flags.
func TestCompletionOfBackup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, e, code := runIn(t, dir, nil, "__complete", "backup", "")
	for _, sub := range []string{"list", "create", "delete", "restore", "schedule"} {
		if code != 0 || !regexp.MustCompile(`(?m)^`+sub+`\t`).MatchString(out) {
			t.Errorf("completion of backup: no %s in %d %q %s", sub, code, out, e)
		}
	}
	out, e, code = runIn(t, dir, nil, "__complete", "backup", "restore", "--")
	if code != 0 || !strings.Contains(out, "--wait") || !strings.Contains(out, "--host") {
		t.Errorf("completion of backup restore's flags: %d %q %s", code, out, e)
	}
}
