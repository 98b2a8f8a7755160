package meshcontrol

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/flexplane/flexplane/pkg/mesh/meshnode"
	v1 "github.com/juanfont/headscale/gen/go/headscale/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Tags used on the mesh (see package meshnode).
const (
	TagOrchestrator = meshnode.TagOrchestrator
	TagAgent        = meshnode.TagAgent
)

// MaxKeyTTL bounds the lifetime of an enrollment key.
const MaxKeyTTL = 365 * 24 * time.Hour

// KeyOptions configures a new enrollment key.
type KeyOptions struct {
	// Reusable keys enroll any number of nodes until they expire or are
	// revoked; a single-use key enrolls one node.
	Reusable bool
	// TTL is how long the key can be used, counted from now. Zero means one
	// hour; it must not exceed MaxKeyTTL.
	TTL time.Duration
	// Tags the enrolled nodes carry. Empty means [TagAgent]. Every tag must be
	// TagAgent or TagOrchestrator.
	Tags []string
}

// Key is an enrollment key.
type Key struct {
	ID uint64
	// Secret is the key to give to an agent. Only CreateKey returns it;
	// listings carry a redacted prefix at most.
	Secret     string
	Reusable   bool
	Used       bool
	Tags       []string
	CreatedAt  time.Time
	Expiration time.Time
}

// Expired reports whether the key can no longer enroll nodes at now
// (revoked keys are expired).
func (k Key) Expired(now time.Time) bool { return !k.Expiration.After(now) }

// Node is a machine of the mesh as the control server knows it.
type Node struct {
	ID uint64
	// Name is the node's host name as it registered (e.g. the agent's node
	// name); GivenName is its unique name in the mesh.
	Name      string
	GivenName string
	Addrs     []netip.Addr
	// NodeKey is the node's WireGuard node key ("nodekey:<hex>"), its mesh
	// identity: what an agent's membership proof binds.
	NodeKey   string
	Tags      []string
	Online    bool
	LastSeen  time.Time
	CreatedAt time.Time
}

// HasTag reports whether the node carries tag.
func (n Node) HasTag(tag string) bool { return slices.Contains(n.Tags, tag) }

// Client talks to the headscale API of a running control server over its
// local unix socket. It is how `orchestrator keys ...` works against a
// running orchestrator.
type Client struct {
	conn *grpc.ClientConn
	api  v1.HeadscaleServiceClient
}

// Dial connects to the control server's unix socket at path.
func Dial(path string) (*Client, error) {
	c, err := DialFunc(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	})
	if err != nil {
		return nil, fmt.Errorf("meshcontrol: dial %s: %w", path, err)
	}
	return c, nil
}

// DialFunc returns a client whose connections to the headscale API are
// made by dial, called again whenever a connection breaks: a replica
// reaches the API of whichever replica runs the control server this way.
// Reconnecting waits at most a second between attempts.
func DialFunc(dial func(ctx context.Context) (net.Conn, error)) (*Client, error) {
	conn, err := grpc.NewClient("passthrough:///headscale",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("meshcontrol: dial: %w", err)
	}
	return &Client{conn: conn, api: v1.NewHeadscaleServiceClient(conn)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Ping checks that the control server answers.
func (c *Client) Ping(ctx context.Context) error {
	if _, err := c.api.Health(ctx, &v1.HealthRequest{}); err != nil {
		return fmt.Errorf("meshcontrol: ping: %w", err)
	}
	return nil
}

// CreateKey creates an enrollment key.
func (c *Client) CreateKey(ctx context.Context, opts KeyOptions) (Key, error) {
	ttl := opts.TTL
	if ttl == 0 {
		ttl = time.Hour
	}
	if ttl < 0 || ttl > MaxKeyTTL {
		return Key{}, fmt.Errorf("meshcontrol: create key: ttl %v outside (0, %v]", ttl, MaxKeyTTL)
	}
	tags := opts.Tags
	if len(tags) == 0 {
		tags = []string{TagAgent}
	}
	for _, t := range tags {
		if t != TagAgent && t != TagOrchestrator {
			return Key{}, fmt.Errorf("meshcontrol: create key: tag %q is not %s or %s", t, TagAgent, TagOrchestrator)
		}
	}
	resp, err := c.api.CreatePreAuthKey(ctx, &v1.CreatePreAuthKeyRequest{
		Reusable:   opts.Reusable,
		Expiration: timestamppb.New(time.Now().Add(ttl)),
		AclTags:    tags,
	})
	if err != nil {
		return Key{}, fmt.Errorf("meshcontrol: create key: %w", err)
	}
	return keyFromProto(resp.GetPreAuthKey()), nil
}

// ListKeys lists all enrollment keys, newest first, without their secrets.
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	resp, err := c.api.ListPreAuthKeys(ctx, &v1.ListPreAuthKeysRequest{})
	if err != nil {
		return nil, fmt.Errorf("meshcontrol: list keys: %w", err)
	}
	keys := make([]Key, 0, len(resp.GetPreAuthKeys()))
	for _, k := range resp.GetPreAuthKeys() {
		key := keyFromProto(k)
		key.Secret = redact(key.Secret)
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b Key) int { return b.CreatedAt.Compare(a.CreatedAt) })
	return keys, nil
}

// ErrKeyNotFound is returned when revoking a key that does not exist.
var ErrKeyNotFound = errors.New("enrollment key not found")

// RevokeKey expires the key with the given id at once; nodes already
// enrolled with it stay enrolled.
func (c *Client) RevokeKey(ctx context.Context, id uint64) error {
	keys, err := c.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("meshcontrol: revoke key %d: %w", id, err)
	}
	if !slices.ContainsFunc(keys, func(k Key) bool { return k.ID == id }) {
		return fmt.Errorf("meshcontrol: revoke key %d: %w", id, ErrKeyNotFound)
	}
	if _, err := c.api.ExpirePreAuthKey(ctx, &v1.ExpirePreAuthKeyRequest{Id: id}); err != nil {
		return fmt.Errorf("meshcontrol: revoke key %d: %w", id, err)
	}
	return nil
}

// Nodes lists the nodes of the mesh.
func (c *Client) Nodes(ctx context.Context) ([]Node, error) {
	resp, err := c.api.ListNodes(ctx, &v1.ListNodesRequest{})
	if err != nil {
		return nil, fmt.Errorf("meshcontrol: list nodes: %w", err)
	}
	nodes := make([]Node, 0, len(resp.GetNodes()))
	for _, n := range resp.GetNodes() {
		node := Node{
			ID:        n.GetId(),
			Name:      n.GetName(),
			GivenName: n.GetGivenName(),
			NodeKey:   n.GetNodeKey(),
			Tags:      slices.Clone(n.GetTags()),
			Online:    n.GetOnline(),
		}
		if n.GetLastSeen() != nil {
			node.LastSeen = n.GetLastSeen().AsTime()
		}
		if n.GetCreatedAt() != nil {
			node.CreatedAt = n.GetCreatedAt().AsTime()
		}
		for _, a := range n.GetIpAddresses() {
			if ip, err := netip.ParseAddr(a); err == nil {
				node.Addrs = append(node.Addrs, ip)
			}
		}
		nodes = append(nodes, node)
	}
	return nodes, nil
}

// ErrNodeNotFound is returned when deleting a node that is not in the mesh.
var ErrNodeNotFound = errors.New("mesh node not found")

// DeleteNode removes the node with the given id from the mesh: its key no
// longer connects, and a new node may take its place (an agent of a
// rebuilt Proxmox node; see docs/install/agents.md).
func (c *Client) DeleteNode(ctx context.Context, id uint64) error {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return fmt.Errorf("meshcontrol: delete node %d: %w", id, err)
	}
	if !slices.ContainsFunc(nodes, func(n Node) bool { return n.ID == id }) {
		return fmt.Errorf("meshcontrol: delete node %d: %w", id, ErrNodeNotFound)
	}
	if _, err := c.api.DeleteNode(ctx, &v1.DeleteNodeRequest{NodeId: id}); err != nil {
		return fmt.Errorf("meshcontrol: delete node %d: %w", id, err)
	}
	return nil
}

// SetPolicy replaces the mesh policy (headscale's HuJSON policy format).
func (c *Client) SetPolicy(ctx context.Context, policy string) error {
	if _, err := c.api.SetPolicy(ctx, &v1.SetPolicyRequest{Policy: policy}); err != nil {
		return fmt.Errorf("meshcontrol: set policy: %w", err)
	}
	return nil
}

func keyFromProto(k *v1.PreAuthKey) Key {
	key := Key{
		ID:       k.GetId(),
		Secret:   k.GetKey(),
		Reusable: k.GetReusable(),
		Used:     k.GetUsed(),
		Tags:     slices.Clone(k.GetAclTags()),
	}
	if k.GetCreatedAt() != nil {
		key.CreatedAt = k.GetCreatedAt().AsTime()
	}
	if k.GetExpiration() != nil {
		key.Expiration = k.GetExpiration().AsTime()
	}
	return key
}

// redact keeps a recognisable prefix of a key secret.
func redact(secret string) string {
	if i := strings.LastIndexByte(secret, '-'); i >= 0 && len(secret) > i+4 {
		return secret[:i+5] + "…"
	}
	if len(secret) > 8 {
		return secret[:8] + "…"
	}
	return secret
}

// Policy returns the mesh policy flexplane uses: only tag:orchestrator may
// reach agents' API, on agentPort; agents may reach each other only on
// the migration port (agentPort+1, where they read the volumes another
// agent offered them with a capability); nothing else may reach anything.
func Policy(agentPort uint16) string {
	return fmt.Sprintf(`{
  "tagOwners": {
    %q: [],
    %q: []
  },
  "acls": [
    {"action": "accept", "src": [%q], "dst": ["%s:%d"]},
    {"action": "accept", "src": [%q], "dst": ["%s:%d"]}
  ]
}`, TagOrchestrator, TagAgent, TagOrchestrator, TagAgent, agentPort, TagAgent, TagAgent, agentPort+1)
}
