package charts

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeZitadel answers the part of Zitadel's management API that the
// identity chart's setup script uses, keeping projects, OIDC applications
// and role keys in memory.
type fakeZitadel struct {
	url      string // where it listens
	mu       sync.Mutex
	projects map[string]string         // name -> id
	apps     map[string]map[string]any // name -> the create body, with its clientId
	roles    []string
	creates  []string // the names of the applications created, in order
}

func (z *fakeZitadel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer pat-secret" && r.URL.Path != "/debug/ready" {
		http.Error(w, "no token", http.StatusUnauthorized)
		return
	}
	var body map[string]any
	if r.Method == http.MethodPost {
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	byName := func() string {
		q, _ := body["queries"].([]any)
		if len(q) == 0 {
			return ""
		}
		nq, _ := q[0].(map[string]any)["nameQuery"].(map[string]any)
		name, _ := nq["name"].(string)
		return name
	}
	answer := func(v any) { _ = json.NewEncoder(w).Encode(v) }
	p := strings.Split(strings.TrimPrefix(r.URL.Path, "/management/v1/projects"), "/")
	switch {
	case r.URL.Path == "/debug/ready":
	case r.URL.Path == "/management/v1/projects/_search":
		if id, ok := z.projects[byName()]; ok {
			answer(map[string]any{"result": []any{map[string]any{"id": id}}})
		} else {
			answer(map[string]any{})
		}
	case r.URL.Path == "/management/v1/projects":
		name, _ := body["name"].(string)
		z.projects[name] = "project-1"
		answer(map[string]any{"id": "project-1"})
	case len(p) == 4 && p[1] == "project-1" && p[2] == "apps" && p[3] == "_search":
		if app, ok := z.apps[byName()]; ok {
			answer(map[string]any{"result": []any{map[string]any{"oidcConfig": map[string]any{"clientId": app["clientId"]}}}})
		} else {
			answer(map[string]any{})
		}
	case len(p) == 4 && p[1] == "project-1" && p[2] == "apps" && p[3] == "oidc":
		name, _ := body["name"].(string)
		body["clientId"] = "client-" + name
		z.apps[name] = body
		z.creates = append(z.creates, name)
		answer(map[string]any{"clientId": body["clientId"]})
	case len(p) == 4 && p[1] == "project-1" && p[2] == "roles" && p[3] == "_search":
		var res []any
		for _, k := range z.roles {
			res = append(res, map[string]any{"key": k})
		}
		answer(map[string]any{"result": res})
	case len(p) == 3 && p[1] == "project-1" && p[2] == "roles":
		key, _ := body["roleKey"].(string)
		z.roles = append(z.roles, key)
		answer(map[string]any{})
	default:
		http.NotFound(w, r)
	}
}

// TestIdentitySetupScript runs the identity chart's flexplane setup
// script against a fake of Zitadel's management API, with a kubectl that
// records what it is asked: the portal's application and flexctl's
// native one (device code and refresh token grants, no secret) are
// created, both client ids written to the ConfigMap; a second run creates
// nothing and writes the same; without a CLI application name, none is
// made and cliClientId is empty.
func TestIdentitySetupScript(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"sh", "curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the setup script needs %s: %v", tool, err)
		}
	}
	script, err := filepath.Abs(filepath.Join("identity", "files", "setup-flexplane.sh"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, z *fakeZitadel, cliApp string) map[string]string {
		t.Helper()
		dir := t.TempDir()
		pat := filepath.Join(dir, "pat")
		record := filepath.Join(dir, "kubectl-args")
		kubectl := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + record + "\n"
		for name, content := range map[string]string{"pat": "pat-secret", "kubectl": kubectl} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sh", script)
		cmd.Env = []string{"PATH=" + dir + ":" + os.Getenv("PATH"), "HOME=" + dir, "ISSUER=" + z.url, "PAT_FILE=" + pat,
			"PROJECT=flexplane", "APP=portal", "CLI_APP=" + cliApp, "PORTAL_URL=https://cloud.example.com/", "DEV_MODE=false",
			"ROLES=platform-admin vdc:prod:admin", "CONFIGMAP=identity-flexplane"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("setup script: %v\n%s", err, out)
		}
		args, err := os.ReadFile(record)
		if err != nil {
			t.Fatalf("kubectl not run: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(args)), "\n")
		if len(lines) != 7 || strings.Join(lines[:6], " ") != "patch configmap identity-flexplane --type merge -p" {
			t.Fatalf("kubectl %q", lines)
		}
		var patch struct{ Data map[string]string }
		if err := json.Unmarshal([]byte(lines[6]), &patch); err != nil {
			t.Fatal(err)
		}
		return patch.Data
	}
	newZitadel := func(t *testing.T) *fakeZitadel {
		z := &fakeZitadel{projects: map[string]string{}, apps: map[string]map[string]any{}}
		srv := httptest.NewServer(z)
		t.Cleanup(srv.Close)
		z.url = srv.URL
		return z
	}

	t.Run("with flexctl's application", func(t *testing.T) {
		t.Parallel()
		z := newZitadel(t)
		data := run(t, z, "flexctl")
		want := map[string]string{"clientId": "client-portal", "cliClientId": "client-flexctl", "projectId": "project-1", "issuer": z.url}
		if !maps.Equal(data, want) {
			t.Errorf("ConfigMap data %v, want %v", data, want)
		}
		if !slices.Equal(z.creates, []string{"portal", "flexctl"}) {
			t.Fatalf("applications created: %v", z.creates)
		}
		cli := z.apps["flexctl"]
		grants, _ := json.Marshal(cli["grantTypes"])
		if cli["appType"] != "OIDC_APP_TYPE_NATIVE" || cli["authMethodType"] != "OIDC_AUTH_METHOD_TYPE_NONE" ||
			string(grants) != `["OIDC_GRANT_TYPE_DEVICE_CODE","OIDC_GRANT_TYPE_REFRESH_TOKEN"]` ||
			cli["accessTokenType"] != "OIDC_TOKEN_TYPE_JWT" || cli["accessTokenRoleAssertion"] != true {
			t.Errorf("flexctl's application: %v", cli)
		}
		portal := z.apps["portal"]
		if portal["appType"] != "OIDC_APP_TYPE_USER_AGENT" || portal["redirectUris"].([]any)[0] != "https://cloud.example.com/auth/callback" {
			t.Errorf("the portal's application: %v", portal)
		}
		// Again: nothing created, the same ids written.
		again := run(t, z, "flexctl")
		if len(z.creates) != 2 || !maps.Equal(again, data) {
			t.Errorf("second run: created %v, wrote %v", z.creates, again)
		}
	})

	t.Run("without", func(t *testing.T) {
		t.Parallel()
		z := newZitadel(t)
		data := run(t, z, "")
		if c, ok := data["cliClientId"]; !ok || c != "" || data["clientId"] != "client-portal" || !slices.Equal(z.creates, []string{"portal"}) {
			t.Errorf("without a CLI application: wrote %v, created %v", data, z.creates)
		}
	})
}
