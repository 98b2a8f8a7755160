package tfprovider

import (
	"context"
	"fmt"
	"time"

	"github.com/Khan/genqlient/graphql"
	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// Default timeouts of managed Kubernetes (the timeouts attribute overrides
// them), and how often a cluster or pool is asked for while it changes.
const (
	kubeCreateTimeout = 30 * time.Minute
	kubeUpdateTimeout = 60 * time.Minute
	kubeDeleteTimeout = 30 * time.Minute
	kubePollInterval  = 2 * time.Second
)

// kubernetesClusterResource is flexplane_kubernetes_cluster:
// createKubernetesCluster, followed until its control plane is ready. Its
// version changes in place (upgradeKubernetesCluster, followed until the
// control plane runs it); anything else replaces it.
type kubernetesClusterResource struct{ base }

type kubernetesClusterModel struct {
	ID                types.String   `tfsdk:"id"`
	Name              types.String   `tfsdk:"name"`
	Zone              types.String   `tfsdk:"zone"`
	Version           types.String   `tfsdk:"version"`
	Network           types.String   `tfsdk:"network"`
	ServiceCIDR       types.String   `tfsdk:"service_cidr"`
	PodCIDR           types.String   `tfsdk:"pod_cidr"`
	RunningVersion    types.String   `tfsdk:"running_version"`
	Endpoint          types.String   `tfsdk:"endpoint"`
	Phase             types.String   `tfsdk:"phase"`
	ControlPlaneReady types.Bool     `tfsdk:"control_plane_ready"`
	Timeouts          timeouts.Value `tfsdk:"timeouts"`
}

func (r *kubernetesClusterResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_kubernetes_cluster"
}

func (r *kubernetesClusterResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A managed Kubernetes cluster of the VDC (createKubernetesCluster), followed until its hosted control plane is ready. Its version changes in place (upgradeKubernetesCluster).",
		Attributes: map[string]schema.Attribute{
			"id":                  idAttribute(),
			"name":                replacing("The cluster's name in its VDC."),
			"zone":                replacing("The zone its workers run in."),
			"version":             schema.StringAttribute{Required: true, Description: "One of kubernetesVersions; a newer one upgrades the cluster in place."},
			"network":             replacing("The id of the VDC's network in the zone the workers are on."),
			"service_cidr":        computedDefault("The Service range; unset: 10.96.0.0/12."),
			"pod_cidr":            computedDefault("The Pod range; unset: 10.244.0.0/16."),
			"running_version":     readOnly("The version the control plane's API server runs."),
			"endpoint":            readOnly("host:port of the cluster's API server for its workers."),
			"phase":               readOnly("Where the cluster is in its life."),
			"control_plane_ready": schema.BoolAttribute{Computed: true, Description: "Whether every component of the hosted control plane is ready."},
			"timeouts":            timeouts.Attributes(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
		},
	}
}

func setCluster(m *kubernetesClusterModel, c *api.KubernetesClusterResourceFields) {
	m.ID, m.Name, m.Zone, m.Network = types.StringValue(c.Id), types.StringValue(c.Name), types.StringValue(c.Zone.Name), types.StringValue(c.NetworkId)
	m.Version, m.RunningVersion, m.Endpoint = types.StringValue(c.Version), stringOf(c.RunningVersion), stringOf(c.Endpoint)
	m.ServiceCIDR, m.PodCIDR = types.StringValue(c.ServiceCidr), types.StringValue(c.PodCidr)
	m.Phase, m.ControlPlaneReady = types.StringValue(string(c.Phase)), types.BoolValue(c.ControlPlaneReady)
}

// readCluster fills m from the API; false when the cluster is gone.
func (r *kubernetesClusterResource) readCluster(ctx context.Context, m *kubernetesClusterModel) (bool, error) {
	out, err := api.GetKubernetesClusterResource(ctx, r.c, m.ID.ValueString())
	if err != nil {
		return false, err
	}
	setCluster(m, &out.KubernetesCluster.KubernetesClusterResourceFields)
	return true, nil
}

// waitCluster follows the cluster of m until ready says so (a FAILED
// phase is an error), leaving its last reading in m.
func (r *kubernetesClusterResource) waitCluster(ctx context.Context, m *kubernetesClusterModel, what string, ready func(*kubernetesClusterModel) bool) error {
	return waitFor(ctx, kubePollInterval, what, func(ctx context.Context) (bool, error) {
		found, err := r.readCluster(ctx, m)
		switch {
		case err != nil:
			return false, err
		case !found:
			return false, fmt.Errorf("the cluster %s is gone", m.ID.ValueString())
		case m.Phase.ValueString() == string(api.KubernetesClusterPhaseFailed):
			return false, fmt.Errorf("the cluster %s failed", m.ID.ValueString())
		}
		return ready(m), nil
	})
}

// clusterReady: the control plane ready at the asked version, and the
// cluster PROVISIONED (its control plane serves), so that what the state
// records after an apply is what a later read finds.
func clusterReady(m *kubernetesClusterModel) bool {
	return m.ControlPlaneReady.ValueBool() && m.RunningVersion.ValueString() == m.Version.ValueString() &&
		m.Phase.ValueString() == string(api.KubernetesClusterPhaseProvisioned)
}

func (r *kubernetesClusterResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m kubernetesClusterModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := m.Timeouts.Create(ctx, kubeCreateTimeout)
	resp.Diagnostics.Append(d...)
	applyAndWait(ctx, &m, &resp.State, &resp.Diagnostics, "create Kubernetes cluster", timeout, func(ctx context.Context) error {
		out, err := api.CreateKubernetesClusterResource(ctx, r.c, api.CreateKubernetesClusterInput{Name: m.Name.ValueString(),
			Zone: m.Zone.ValueString(), Version: m.Version.ValueString(), Network: m.Network.ValueString(),
			ServiceCidr: optString(m.ServiceCIDR), PodCidr: optString(m.PodCIDR)})
		if err == nil {
			setCluster(&m, &out.CreateKubernetesCluster.KubernetesClusterResourceFields)
		}
		return err
	}, func(ctx context.Context) error {
		return r.waitCluster(ctx, &m, "the control plane ready", clusterReady)
	})
}

func (r *kubernetesClusterResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read Kubernetes cluster", r.readCluster)
}

func (r *kubernetesClusterResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	updateAndWait(ctx, req, resp, "upgrade Kubernetes cluster", func(m *kubernetesClusterModel) timeouts.Value { return m.Timeouts },
		func(ctx context.Context, m, state *kubernetesClusterModel) error {
			out, err := api.UpgradeKubernetesCluster(ctx, r.c, state.ID.ValueString(), m.Version.ValueString())
			if err == nil {
				setCluster(m, &out.UpgradeKubernetesCluster.KubernetesClusterResourceFields)
			}
			return err
		}, func(ctx context.Context, m *kubernetesClusterModel) error {
			return r.waitCluster(ctx, m, "the control plane at version "+m.Version.ValueString(), clusterReady)
		})
}

func (r *kubernetesClusterResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m kubernetesClusterModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := m.Timeouts.Delete(ctx, kubeDeleteTimeout)
	resp.Diagnostics.Append(d...)
	deleteAndWait(ctx, req, resp, timeout, "delete Kubernetes cluster", "the cluster gone", r.c, api.DeleteKubernetesCluster,
		func(ctx context.Context) (bool, error) { return r.readCluster(ctx, &m) })
}

// nodePoolResource is flexplane_node_pool: createNodePool, followed until
// its workers are ready. Its size changes in place (scaleNodePool);
// anything else replaces it.
type nodePoolResource struct{ base }

type nodePoolModel struct {
	ID             types.String   `tfsdk:"id"`
	Cluster        types.String   `tfsdk:"cluster"`
	Name           types.String   `tfsdk:"name"`
	ComputeProfile types.String   `tfsdk:"compute_profile"`
	StorageProfile types.String   `tfsdk:"storage_profile"`
	Size           types.Int64    `tfsdk:"size"`
	Labels         []labelModel   `tfsdk:"labels"`
	Taints         []taintModel   `tfsdk:"taints"`
	Workers        types.Int64    `tfsdk:"workers"`
	ReadyWorkers   types.Int64    `tfsdk:"ready_workers"`
	Version        types.String   `tfsdk:"version"`
	Timeouts       timeouts.Value `tfsdk:"timeouts"`
}

type labelModel struct {
	Key   types.String `tfsdk:"key"`
	Value types.String `tfsdk:"value"`
}

type taintModel struct {
	Key    types.String `tfsdk:"key"`
	Value  types.String `tfsdk:"value"`
	Effect types.String `tfsdk:"effect"`
}

func (r *nodePoolResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_node_pool"
}

func (r *nodePoolResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.List{listplanmodifier.RequiresReplace()}
	str := func(desc string) schema.StringAttribute {
		return schema.StringAttribute{Required: true, Description: desc}
	}
	resp.Schema = schema.Schema{
		Description: "A node pool of a managed Kubernetes cluster (createNodePool), followed until its workers are ready. Its size changes in place (scaleNodePool).",
		Attributes: map[string]schema.Attribute{
			"id":              idAttribute(),
			"cluster":         replacing("The id of the cluster."),
			"name":            replacing("The pool's name in its cluster."),
			"compute_profile": replacing("The compute profile of the workers."),
			"storage_profile": replacing("The storage profile of the workers' disks."),
			"size":            schema.Int64Attribute{Required: true, Description: "The number of workers (0 to 10); changed in place."},
			"labels": schema.ListNestedAttribute{Optional: true, Description: "Node labels of the workers.", PlanModifiers: replace,
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"key": str("The label's key."), "value": str("The label's value."),
				}}},
			"taints": schema.ListNestedAttribute{Optional: true, Description: "Node taints of the workers.", PlanModifiers: replace,
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"key": str("The taint's key."), "value": schema.StringAttribute{Optional: true, Description: "The taint's value."},
					"effect": str("NoSchedule, PreferNoSchedule or NoExecute."),
				}}},
			"workers":       schema.Int64Attribute{Computed: true, Description: "How many workers exist."},
			"ready_workers": schema.Int64Attribute{Computed: true, Description: "How many workers run."},
			"version":       readOnly("The Kubernetes version the workers run, or are being moved to."),
			"timeouts":      timeouts.Attributes(ctx, timeouts.Opts{Create: true, Update: true, Delete: true}),
		},
	}
}

func setNodePool(m *nodePoolModel, p *api.NodePoolFields) {
	m.ID, m.Cluster, m.Name = types.StringValue(p.Id), types.StringValue(p.ClusterId), types.StringValue(p.Name)
	m.ComputeProfile, m.StorageProfile = types.StringValue(p.ComputeProfile), types.StringValue(p.StorageProfile)
	m.Size, m.Workers, m.ReadyWorkers = types.Int64Value(int64(p.Size)), types.Int64Value(int64(p.Workers)), types.Int64Value(int64(p.ReadyWorkers))
	m.Version = types.StringValue(p.Version)
	// Unset lists stay unset when the pool has none.
	if len(p.Labels) > 0 || m.Labels != nil {
		m.Labels = []labelModel{}
		for _, l := range p.Labels {
			m.Labels = append(m.Labels, labelModel{Key: types.StringValue(l.Key), Value: types.StringValue(l.Value)})
		}
	}
	if len(p.Taints) > 0 || m.Taints != nil {
		m.Taints = []taintModel{}
		for _, t := range p.Taints {
			v := types.StringValue(t.Value)
			if t.Value == "" {
				v = types.StringNull()
			}
			m.Taints = append(m.Taints, taintModel{Key: types.StringValue(t.Key), Value: v, Effect: types.StringValue(string(t.Effect))})
		}
	}
}

func (r *nodePoolResource) readPool(ctx context.Context, m *nodePoolModel) (bool, error) {
	out, err := api.GetNodePool(ctx, r.c, m.ID.ValueString())
	if err != nil {
		return false, err
	}
	setNodePool(m, &out.NodePool.NodePoolFields)
	return true, nil
}

// waitPool follows the pool of m until as many workers as its size run
// and no more exist, leaving its last reading in m.
func (r *nodePoolResource) waitPool(ctx context.Context, m *nodePoolModel) error {
	return waitFor(ctx, kubePollInterval, "the pool's workers ready", func(ctx context.Context) (bool, error) {
		found, err := r.readPool(ctx, m)
		if err == nil && !found {
			err = fmt.Errorf("the node pool %s is gone", m.ID.ValueString())
		}
		return err == nil && m.ReadyWorkers.Equal(m.Size) && m.Workers.Equal(m.Size), err
	})
}

func (r *nodePoolResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var m nodePoolModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := m.Timeouts.Create(ctx, kubeCreateTimeout)
	resp.Diagnostics.Append(d...)
	in := api.CreateNodePoolInput{Cluster: m.Cluster.ValueString(), Name: m.Name.ValueString(), ComputeProfile: m.ComputeProfile.ValueString(),
		StorageProfile: m.StorageProfile.ValueString(), Size: int(m.Size.ValueInt64())}
	for _, l := range m.Labels {
		in.Labels = append(in.Labels, api.NodeLabelInput{Key: l.Key.ValueString(), Value: l.Value.ValueString()})
	}
	for _, t := range m.Taints {
		in.Taints = append(in.Taints, api.NodeTaintInput{Key: t.Key.ValueString(), Value: optString(t.Value), Effect: api.TaintEffect(t.Effect.ValueString())})
	}
	applyAndWait(ctx, &m, &resp.State, &resp.Diagnostics, "create node pool", timeout, func(ctx context.Context) error {
		out, err := api.CreateNodePool(ctx, r.c, in)
		if err == nil {
			setNodePool(&m, &out.CreateNodePool.NodePoolFields)
		}
		return err
	}, func(ctx context.Context) error { return r.waitPool(ctx, &m) })
}

func (r *nodePoolResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	readInto(ctx, req, resp, "read node pool", r.readPool)
}

func (r *nodePoolResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	updateAndWait(ctx, req, resp, "scale node pool", func(m *nodePoolModel) timeouts.Value { return m.Timeouts },
		func(ctx context.Context, m, state *nodePoolModel) error {
			out, err := api.ScaleNodePool(ctx, r.c, state.ID.ValueString(), int(m.Size.ValueInt64()))
			if err == nil {
				setNodePool(m, &out.ScaleNodePool.NodePoolFields)
			}
			return err
		}, r.waitPool)
}

func (r *nodePoolResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var m nodePoolModel
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := m.Timeouts.Delete(ctx, kubeDeleteTimeout)
	resp.Diagnostics.Append(d...)
	deleteAndWait(ctx, req, resp, timeout, "delete node pool", "the pool gone", r.c, api.DeleteNodePool,
		func(ctx context.Context) (bool, error) { return r.readPool(ctx, &m) })
}

// deleteAndWait deletes the object of the state's id with the API call del, then waits
// within timeout until read no longer finds it (NOT_FOUND counts as gone),
// as a cluster or pool is removed in the background.
func deleteAndWait[R any](ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse, timeout time.Duration, op, what string,
	c graphql.Client, del func(context.Context, graphql.Client, string) (R, error), read func(context.Context) (bool, error)) {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deleteByID(wctx, req, resp, op, c, func(ctx context.Context, c graphql.Client, id string) (R, error) {
		answer, err := del(ctx, c, id)
		if err != nil {
			return answer, err
		}
		return answer, waitFor(ctx, kubePollInterval, what, func(ctx context.Context) (bool, error) {
			found, err := read(ctx)
			if isNotFound(err) {
				return true, nil
			}
			return !found, err
		})
	})
}

// applyAndWait runs call (a create or change that fills m from the API's
// answer), then wait within timeout. Once call succeeded, m is saved in
// the state even when wait fails, so that a failed object is tainted
// rather than forgotten.
func applyAndWait[M any](ctx context.Context, m *M, state *tfsdk.State, diags *diag.Diagnostics, op string, timeout time.Duration,
	call func(context.Context) error, wait func(context.Context) error) {
	if err := call(ctx); err != nil {
		addAPIError(diags, op, err)
		return
	}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	werr := wait(wctx)
	diags.Append(state.Set(ctx, m)...)
	if werr != nil {
		diags.AddError(op, werr.Error())
	}
}

// updateAndWait is the Update of a Kubernetes resource changed in place:
// it reads the plan and the prior state, then runs call (the change, which
// fills the plan's model from the API's answer) and wait as applyAndWait
// does, within the plan's update timeout (of timeoutsOf, kubeUpdateTimeout
// by default).
func updateAndWait[M any](ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse, op string,
	timeoutsOf func(*M) timeouts.Value, call func(ctx context.Context, plan, state *M) error, wait func(context.Context, *M) error) {
	var m, state M
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, d := timeoutsOf(&m).Update(ctx, kubeUpdateTimeout)
	resp.Diagnostics.Append(d...)
	applyAndWait(ctx, &m, &resp.State, &resp.Diagnostics, op, timeout,
		func(ctx context.Context) error { return call(ctx, &m, &state) },
		func(ctx context.Context) error { return wait(ctx, &m) })
}
