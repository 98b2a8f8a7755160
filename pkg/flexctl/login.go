package flexctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/oauth2"

	"github.com/flexplane/flexplane/pkg/portal"
)

// discovery is what login reads of the issuer's OpenID configuration.
type discovery struct {
	Issuer                      string `json:"issuer"`
	TokenEndpoint               string `json:"token_endpoint"`
	DeviceAuthorizationEndpoint string `json:"device_authorization_endpoint"`
}

func (a *app) loginCommand() *cobra.Command {
	var name string
	cmd := &cobra.Command{Use: "login", Short: "Sign in with the identity provider the API names (device authorization) and keep the token in a context",
		Long: `Sign in with the OpenID provider the API names at <endpoint>/config.json, by
the device authorization grant: flexctl prints a URL and a code, you open the
URL in any browser, enter the code and sign in. The access token (and a
refresh token, when the provider issues one) are kept in the context (the
current one, or --context; made with the endpoint and VDC in use when it does
not exist), in a file of mode 0600.`,
		Args: args(0, "no arguments"),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			s, err := a.settings()
			if err != nil {
				return err
			}
			if s.Endpoint == "" {
				return usageErrorf("no endpoint: give --endpoint, set %s, or set one in a context (flexctl config set-context)", EnvEndpoint)
			}
			name = first(a.flags.Context, s.Context, "default")
			tok, cfg, err := a.deviceLogin(cmd, s.Endpoint)
			if err != nil {
				return err
			}
			f, path, err := a.loadFile()
			if err != nil {
				return err
			}
			c := f.Upsert(name)
			c.Endpoint, c.Token, c.RefreshToken, c.Expiry = s.Endpoint, tok.AccessToken, tok.RefreshToken, tok.Expiry
			c.TokenURL, c.ClientID = cfg.Endpoint.TokenURL, cfg.ClientID
			if s.VDC != "" {
				c.VDC = s.VDC
			}
			if f.CurrentContext == "" {
				f.CurrentContext = name
			}
			if err := f.Save(path); err != nil {
				return err
			}
			cmd.PrintErrf("logged in: context %s, token valid until %s\n", name, tok.Expiry.Local().Format("2006-01-02 15:04"))
			return nil
		})}
	return cmd
}

// deviceLogin runs the device authorization grant against the issuer the
// portal configuration of endpoint names, as its command line client (the
// portal's client when it names none).
func (a *app) deviceLogin(cmd *cobra.Command, endpoint string) (*oauth2.Token, *oauth2.Config, error) {
	ctx := context.WithValue(cmd.Context(), oauth2.HTTPClient, a.env.HTTPClient)
	var doc portal.Document
	if err := a.getJSON(ctx, endpoint+portal.ConfigPath, &doc); err != nil {
		return nil, nil, fmt.Errorf("login: the API's login configuration: %w", err)
	}
	if doc.Issuer == "" || doc.ClientID == "" {
		return nil, nil, fmt.Errorf("login: %s names no issuer or client", endpoint+portal.ConfigPath)
	}
	var d discovery
	if err := a.getJSON(ctx, strings.TrimSuffix(doc.Issuer, "/")+"/.well-known/openid-configuration", &d); err != nil {
		return nil, nil, fmt.Errorf("login: discovery of %s: %w", doc.Issuer, err)
	}
	if d.DeviceAuthorizationEndpoint == "" {
		return nil, nil, fmt.Errorf("login: the identity provider %s offers no device authorization", doc.Issuer)
	}
	cfg := &oauth2.Config{
		ClientID: first(doc.CLIClientID, doc.ClientID),
		Scopes:   doc.Scopes,
		Endpoint: oauth2.Endpoint{DeviceAuthURL: d.DeviceAuthorizationEndpoint, TokenURL: d.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams},
	}
	resp, err := cfg.DeviceAuth(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("login: device authorization: %w", err)
	}
	if resp.VerificationURIComplete != "" {
		cmd.PrintErrf("To sign in, open %s\nand check that it shows the code %s.\n", resp.VerificationURIComplete, resp.UserCode)
	} else {
		cmd.PrintErrf("To sign in, open %s\nand enter the code %s.\n", resp.VerificationURI, resp.UserCode)
	}
	tok, err := cfg.DeviceAccessToken(ctx, resp)
	if err != nil {
		return nil, nil, fmt.Errorf("login: %w", err)
	}
	return tok, cfg, nil
}

func (a *app) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := a.env.HTTPClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(v); err != nil {
		return errors.Join(fmt.Errorf("GET %s", url), err)
	}
	return nil
}
