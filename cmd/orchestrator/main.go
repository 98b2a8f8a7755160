// Command orchestrator runs the flexplane orchestrator.
//
//	orchestrator serve [flags]                   serve (see -h)
//	orchestrator keys create [-reusable] [-ttl]  create an agent enrollment key
//	orchestrator keys list                       list enrollment keys
//	orchestrator keys revoke ID                  revoke an enrollment key
//	orchestrator catalog export [backend flags]  write the catalog as YAML manifests to stdout
//	orchestrator catalog import [backend flags]  create the manifests on stdin in the catalog
//	orchestrator releases add FILE MANIFEST SIG  publish a signed agent release
//	orchestrator releases list                   list the published releases
//	orchestrator egress-proxy [flags]            a hosted control plane's egress proxy
//	orchestrator probe [flags] URL               GET an https URL, 200 or fail (the charts' helm tests)
//
// The keys subcommands talk to the running orchestrator through the unix
// socket in its data directory (-data-dir, env FLEXPLANE_DATA_DIR).
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/flexplane/flexplane/pkg/catalog"
	"github.com/flexplane/flexplane/pkg/mesh/meshcontrol"
	"github.com/flexplane/flexplane/pkg/orchestrator"
	"github.com/flexplane/flexplane/pkg/support/httpsprobe"
	"github.com/flexplane/flexplane/pkg/tenantkube/egress"
)

const usage = `usage:
  orchestrator serve [-listen ADDR] [-public-url URL] [-data-dir DIR] [-stun-addr ADDR] [-log-level LEVEL]
                     [-oidc-issuer URL -oidc-audience ID [-oidc-roles-claim C] [-oidc-name-claim C] [-oidc-email-claim C]]
                     [-catalog dir|kubernetes] [-catalog-dir DIR] [-kubeconfig FILE] [-namespace NS] [-secret-namespace NS] [-tenant-name NAME] [-tenant-domain DOMAIN] [-zone-timeout DURATION] [-vm-recover-after DURATION] [-vm-recover-interval DURATION] [-backup-quota-interval DURATION] [-image-copy-recover-interval DURATION] [-agent-version V]
                     [-memory-limit SIZE] [-debug-addr ADDR] [-mesh-postgres URL -mesh-postgres-password-file FILE]
                     [-mutation-rate N] [-mutation-burst N] [-console-rate N] [-console-burst N]
  orchestrator keys create [-data-dir DIR] [-reusable] [-ttl DURATION]
  orchestrator keys list [-data-dir DIR]
  orchestrator keys revoke [-data-dir DIR] ID
  orchestrator nodes list [-data-dir DIR]
  orchestrator nodes delete [-data-dir DIR] ID
  orchestrator catalog export [-catalog dir|kubernetes] [-catalog-dir DIR | -data-dir DIR] [-kubeconfig FILE] [-namespace NS] > catalog.yaml
  orchestrator catalog import [-catalog ...] [-replace] < catalog.yaml
  orchestrator releases add [-data-dir DIR] [-release-dir DIR] -release-key-file FILE BINARY MANIFEST SIG
  orchestrator releases floor [-data-dir DIR] [-release-dir DIR] -release-key-file FILE FLOOR SIG
  orchestrator releases list [-data-dir DIR] [-release-dir DIR] -release-key-file FILE
  orchestrator egress-proxy [-socket PATH | -listen ADDR] [-allow CIDR,...] [-max-conns N] [-dial-timeout DURATION]
  orchestrator probe [-ca-file FILE] [-server-name NAME] [-timeout DURATION] [-status N] [-plain-http] URL`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New(usage)
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:])
	case "keys":
		if len(args) < 2 {
			return errors.New(usage)
		}
		return keys(ctx, args[1], args[2:], stdout)
	case "nodes":
		if len(args) < 2 {
			return errors.New(usage)
		}
		return nodes(ctx, args[1], args[2:], stdout)
	case "catalog":
		if len(args) < 2 {
			return errors.New(usage)
		}
		return catalogCmd(ctx, args[1], args[2:], os.Stdin, stdout)
	case "releases":
		if len(args) < 2 {
			return errors.New(usage)
		}
		return releases(args[1], args[2:], stdout)
	case "egress-proxy":
		return egress.Main(ctx, args[1:], os.Stderr)
	case "probe":
		return httpsprobe.Main(ctx, "orchestrator probe", args[1:], os.Stderr)
	default:
		return fmt.Errorf("unknown command %q\n%s", args[0], usage)
	}
}

func env(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// envInt is the integer in environment variable key, or 0 when it is unset.
func envInt(key string) (int, error) {
	v := os.Getenv(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not an integer", key, v)
	}
	return n, nil
}

// envFloat is the number in environment variable key, or def when it is
// unset.
func envFloat(key string, def float64) (float64, error) {
	v := os.Getenv(key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", key, v)
	}
	return n, nil
}

// parseSize parses a byte count as GOMEMLIMIT writes it: a number with an
// optional unit B, KiB, MiB, GiB or TiB.
func parseSize(s string) (int64, error) {
	num := strings.TrimRight(s, "BKMGTi")
	unit := s[len(num):]
	mult, ok := map[string]int64{"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size like 200MiB", s)
	}
	return n * mult, nil
}

// buildVersion is the module version of this build, as the agent of the
// same build reports it ("dev" for builds from a work tree).
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func keys(ctx context.Context, sub string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("keys "+sub, flag.ContinueOnError)
	reusable := fs.Bool("reusable", false, "create: the key enrolls any number of agents until it expires")
	ttl := fs.Duration("ttl", time.Hour, "create: how long the key can be used")
	return controlCommand(ctx, fs, args, func(ctx context.Context, client *meshcontrol.Client) error {
		switch sub {
		case "create":
			if fs.NArg() != 0 {
				return errors.New(usage)
			}
			k, err := client.CreateKey(ctx, meshcontrol.KeyOptions{Reusable: *reusable, TTL: *ttl})
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s\n", k.Secret)
			fmt.Fprintf(os.Stderr, "key %d: reusable=%t expires %s\n", k.ID, k.Reusable, k.Expiration.Format(time.RFC3339))
			return nil
		case "list":
			if fs.NArg() != 0 {
				return errors.New(usage)
			}
			ks, err := client.ListKeys(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKEY\tREUSABLE\tUSED\tEXPIRES\tSTATE\tTAGS")
			now := time.Now()
			for _, k := range ks {
				state := "valid"
				if k.Expired(now) {
					state = "expired"
				}
				fmt.Fprintf(tw, "%d\t%s\t%t\t%t\t%s\t%s\t%s\n", k.ID, k.Secret, k.Reusable, k.Used,
					k.Expiration.Format(time.RFC3339), state, strings.Join(k.Tags, ","))
			}
			return tw.Flush()
		case "revoke":
			return byID(fs, "key", stdout, "revoked key %d\n", func(id uint64) error { return client.RevokeKey(ctx, id) })
		default:
			return fmt.Errorf("unknown keys command %q\n%s", sub, usage)
		}
	})
}

// controlCommand adds -data-dir to fs, parses args and runs do, within 10
// seconds, with a client of the mesh control server of the orchestrator
// running with that data directory.
func controlCommand(ctx context.Context, fs *flag.FlagSet, args []string, do func(context.Context, *meshcontrol.Client) error) error {
	dataDir := fs.String("data-dir", env("FLEXPLANE_DATA_DIR", "/var/lib/flexplane"), "data directory of the running orchestrator (env FLEXPLANE_DATA_DIR)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	client, err := meshcontrol.Dial(orchestrator.SocketPath(*dataDir))
	if err != nil {
		return err
	}
	defer client.Close()
	if err := client.Ping(ctx); err != nil {
		return fmt.Errorf("is the orchestrator running with -data-dir %s? %w", *dataDir, err)
	}
	return do(ctx, client)
}

// nodes lists the nodes of the mesh, or deletes one (the old mesh node of a
// rebuilt Proxmox node, see docs/install/agents.md).
func nodes(ctx context.Context, sub string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("nodes "+sub, flag.ContinueOnError)
	return controlCommand(ctx, fs, args, func(ctx context.Context, client *meshcontrol.Client) error {
		switch sub {
		case "list":
			if fs.NArg() != 0 {
				return errors.New(usage)
			}
			ns, err := client.Nodes(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tHOST\tADDRESSES\tONLINE\tLAST SEEN\tCREATED\tTAGS")
			for _, n := range ns {
				addrs := make([]string, len(n.Addrs))
				for i, a := range n.Addrs {
					addrs[i] = a.String()
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%t\t%s\t%s\t%s\n", n.ID, n.GivenName, n.Name, strings.Join(addrs, ","), n.Online,
					n.LastSeen.Format(time.RFC3339), n.CreatedAt.Format(time.RFC3339), strings.Join(n.Tags, ","))
			}
			return tw.Flush()
		case "delete":
			return byID(fs, "node", stdout, "deleted mesh node %d\n", func(id uint64) error { return client.DeleteNode(ctx, id) })
		default:
			return fmt.Errorf("unknown nodes command %q\n%s", sub, usage)
		}
	})
}

// byID runs do with the one positional argument of fs, the id of a what,
// and prints done with it.
func byID(fs *flag.FlagSet, what string, stdout io.Writer, done string, do func(id uint64) error) error {
	if fs.NArg() != 1 {
		return errors.New(usage)
	}
	id, err := strconv.ParseUint(fs.Arg(0), 10, 64)
	if err != nil {
		return fmt.Errorf("%s id %q is not a number", what, fs.Arg(0))
	}
	if err := do(id); err != nil {
		return err
	}
	fmt.Fprintf(stdout, done, id)
	return nil
}

// backendFlags are the flags choosing the catalog's backend, shared by
// serve and the catalog subcommands.
type backendFlags struct {
	backend, dir, kubeconfig, namespace, secretNamespace *string
}

func catalogFlags(fs *flag.FlagSet) backendFlags {
	return backendFlags{
		backend:         fs.String("catalog", env("FLEXPLANE_CATALOG", orchestrator.CatalogDir), "catalog backend: dir (manifests in -catalog-dir; one host) or kubernetes (custom resources flexplane.io/v1alpha1 in -namespace; many replicas) (env FLEXPLANE_CATALOG)"),
		dir:             fs.String("catalog-dir", env("FLEXPLANE_CATALOG_DIR", ""), "catalog manifest directory of the dir backend; default DATA_DIR/catalog (env FLEXPLANE_CATALOG_DIR)"),
		kubeconfig:      fs.String("kubeconfig", env("KUBECONFIG", ""), "kubeconfig of the kubernetes backend; empty uses the pod's service account (env KUBECONFIG)"),
		namespace:       fs.String("namespace", env("FLEXPLANE_NAMESPACE", ""), "namespace of flexplane's objects in Kubernetes; default the pod's own, else default (env FLEXPLANE_NAMESPACE)"),
		secretNamespace: fs.String("secret-namespace", env("FLEXPLANE_SECRET_NAMESPACE", ""), "namespace of the kubernetes backend's Secrets (the load balancers' certificates), apart from -namespace so that the rights to them reach no other Secret; default -namespace (env FLEXPLANE_SECRET_NAMESPACE)"),
	}
}

func (b backendFlags) kube() orchestrator.KubeConfig {
	return orchestrator.KubeConfig{Kubeconfig: *b.kubeconfig, Namespace: *b.namespace, SecretNamespace: *b.secretNamespace}
}

// catalogCmd runs `orchestrator catalog export|import`: the catalog moves
// between backends (dir to kubernetes and back) as a stream of YAML
// manifests, without loss.
func catalogCmd(ctx context.Context, sub string, args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("catalog "+sub, flag.ContinueOnError)
	cat := catalogFlags(fs)
	dataDir := fs.String("data-dir", env("FLEXPLANE_DATA_DIR", "/var/lib/flexplane"), "state directory whose catalog/ the dir backend uses without -catalog-dir (env FLEXPLANE_DATA_DIR)")
	replace := fs.Bool("replace", false, "import: overwrite objects that exist with other content (else they are an error)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return errors.New(usage)
	}
	dir := cmp.Or(*cat.dir, filepath.Join(*dataDir, "catalog"))
	store, closeStore, err := orchestrator.OpenCatalog(ctx, orchestrator.CatalogConfig{Backend: *cat.backend, Dir: dir, Kube: cat.kube()})
	if err != nil {
		return err
	}
	defer closeStore()
	switch sub {
	case "export":
		n, err := catalog.Export(ctx, store, stdout)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "exported %d objects\n", n)
		return nil
	case "import":
		res, err := catalog.Import(ctx, store, stdin, catalog.ImportOptions{Replace: *replace})
		fmt.Fprintf(os.Stderr, "created %d, replaced %d, unchanged %d\n", res.Created, res.Replaced, res.Unchanged)
		return err
	default:
		return fmt.Errorf("unknown catalog command %q\n%s", sub, usage)
	}
}

// parseWorkerImages reads -kubernetes-worker-images: version=image pairs,
// comma-separated, each version once ("" is none).
func parseWorkerImages(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		v, img, ok := strings.Cut(pair, "=")
		v, img = strings.TrimSpace(v), strings.TrimSpace(img)
		if !ok || v == "" || img == "" {
			return nil, fmt.Errorf("-kubernetes-worker-images: %q is not version=image", pair)
		}
		if _, dup := out[v]; dup {
			return nil, fmt.Errorf("-kubernetes-worker-images: %s is given twice", v)
		}
		out[v] = img
	}
	return out, nil
}
