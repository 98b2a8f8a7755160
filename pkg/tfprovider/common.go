package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/Khan/genqlient/graphql"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/flexplane/flexplane/pkg/flexctl"
	"github.com/flexplane/flexplane/pkg/flexctl/api"
)

// base is what every resource shares: the API client and import by id.
type base struct {
	c graphql.Client
}

func (b *base) Configure(_ context.Context, req resource.ConfigureRequest, _ *resource.ConfigureResponse) {
	if c := clientOf(req.ProviderData); c != nil {
		b.c = c
	}
}

func (b *base) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// addAPIError reports err of op: on the attribute the API names
// (extensions.field input.nics[0].address is nics[0].address) when it
// names one of the input, else on the resource. The diagnostic is placed
// on the top-level attribute and its index (nics[0]): OpenTofu finds the
// configuration's lines of that, and not of an attribute nested in it.
// The detail names the whole attribute.
func addAPIError(diags *diag.Diagnostics, op string, err error) {
	err = flexctl.AsAPIError(op, err)
	var ae *flexctl.APIError
	if !errors.As(err, &ae) {
		diags.AddError(op, err.Error())
		return
	}
	summary := op + ": " + ae.Code
	p, ok := fieldPath(ae.Field)
	if !ok {
		detail := ae.Message
		if ae.Field != "" {
			detail += " (" + ae.Field + ")"
		}
		diags.AddError(summary, detail)
		return
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(ae.Field, "input."), ".")
	top, _ := fieldPath("input." + first)
	diags.AddAttributeError(top, summary, ae.Message+" (attribute "+p.String()+")")
}

// isNotFound reports whether err is the API's NOT_FOUND.
func isNotFound(err error) bool {
	var ae *flexctl.APIError
	return errors.As(flexctl.AsAPIError("", err), &ae) && ae.Code == "NOT_FOUND"
}

// fieldPath is the attribute path of a GraphQL error's field under the
// mutation's input (input.nics[0].address: nics[0].address), its names
// in snake_case.
func fieldPath(field string) (path.Path, bool) {
	rest, ok := strings.CutPrefix(field, "input.")
	if !ok || rest == "" {
		return path.Empty(), false
	}
	var p path.Path
	for i, seg := range strings.Split(rest, ".") {
		name, idx, _ := strings.Cut(seg, "[")
		if name == "" {
			return path.Empty(), false
		}
		if i == 0 {
			p = path.Root(snake(name))
		} else {
			p = p.AtName(snake(name))
		}
		for idx != "" {
			n, tail, ok := strings.Cut(idx, "]")
			k, err := strconv.Atoi(n)
			if !ok || err != nil {
				return path.Empty(), false
			}
			p = p.AtListIndex(k)
			idx = strings.TrimPrefix(tail, "[")
		}
	}
	return p, true
}

// snake is an input field's name in snake_case: diskGiB is disk_gib,
// peerCidr peer_cidr, readMBps read_mbps.
func snake(name string) string {
	for _, unit := range [][2]string{{"GiB", "Gib"}, {"MiB", "Mib"}, {"MBps", "Mbps"}} {
		name = strings.ReplaceAll(name, unit[0], unit[1])
	}
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// pollInterval is how often an operation is asked for while it runs.
const pollInterval = 200 * time.Millisecond

// waitFor asks done every interval until it reports true or fails, or
// ctx ends (an error naming what was awaited).
func waitFor(ctx context.Context, interval time.Duration, what string, done func(context.Context) (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := done(ctx)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// waitOperation follows operation id until it ends, or ctx does; a FAILED
// operation is an error with its reason. It returns the VM the operation
// worked on (empty when none).
func waitOperation(ctx context.Context, c graphql.Client, id string) (vm string, err error) {
	var last api.OperationFields
	err = waitFor(ctx, pollInterval, "operation "+id, func(ctx context.Context) (bool, error) {
		resp, err := api.GetOperation(ctx, c, id)
		if err != nil {
			return false, flexctl.AsAPIError("follow operation "+id, err)
		}
		last = resp.Operation.OperationFields
		if last.VmId != nil {
			vm = *last.VmId
		}
		switch last.State {
		case api.OperationStateSucceeded:
			return true, nil
		case api.OperationStateFailed:
			reason := "no reason given"
			if last.Error != nil {
				reason = *last.Error
			}
			return false, fmt.Errorf("operation %s failed at step %s: %s", id, last.Step, reason)
		}
		return false, nil
	})
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("operation %s still %s at step %s: %w", id, last.State, last.Step, err)
	}
	return vm, err
}

// optString is v as an optional input (nil when null or unknown).
func optString(v types.String) *string {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	s := v.ValueString()
	return &s
}

// optInt is v as an optional input (nil when null or unknown).
func optInt(v types.Int64) *int {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	n := int(v.ValueInt64())
	return &n
}

// stringOf is an optional answer as a value (null for nil).
func stringOf(s *string) types.String {
	if s == nil {
		return types.StringNull()
	}
	return types.StringValue(*s)
}

// intOf is an optional answer as a value (null for nil).
func intOf(n *int) types.Int64 {
	if n == nil {
		return types.Int64Null()
	}
	return types.Int64Value(int64(*n))
}

// stringsOf is v as a list of strings (nil when null or unknown).
func stringsOf(ctx context.Context, v types.List, diags *diag.Diagnostics) []string {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	out := []string{}
	diags.Append(v.ElementsAs(ctx, &out, false)...)
	return out
}

// listOf is ss as a list value.
func listOf(ss []string) types.List {
	vals := make([]attr.Value, 0, len(ss))
	for _, s := range ss {
		vals = append(vals, types.StringValue(s))
	}
	l, _ := types.ListValue(types.StringType, vals)
	return l
}

// replaceOnly is the Update of a resource whose every attribute replaces
// it: the API changes none of it in place, so no update is ever planned.
type replaceOnly struct{}

func (replaceOnly) Update(_ context.Context, _ resource.UpdateRequest, resp *resource.UpdateResponse) {
	resp.Diagnostics.AddError("update", "this resource cannot be changed in place: every change replaces it")
}

// readInto refreshes the resource's state with lookup, which fills the
// model from the API and reports whether the object still exists. One
// that is gone (or NOT_FOUND) is dropped from the state, so that the next
// plan creates it again.
func readInto[M any](ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse, op string, lookup func(context.Context, *M) (bool, error)) {
	var m M
	resp.Diagnostics.Append(req.State.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	found, err := lookup(ctx, &m)
	if isNotFound(err) {
		found, err = false, nil
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, op, err)
		return
	}
	if !found {
		resp.State.RemoveResource(ctx)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// deleteByID deletes the object of the state's id with the API call del
// (whose answer is not needed); NOT_FOUND (deleted outside already) counts
// as done.
func deleteByID[R any](ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse, op string,
	c graphql.Client, del func(context.Context, graphql.Client, string) (R, error)) {
	var id types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("id"), &id)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if _, err := del(ctx, c, id.ValueString()); err != nil && !isNotFound(err) {
		addAPIError(&resp.Diagnostics, op, err)
	}
}

// createWith creates the resource of the plan with create, which calls
// the API and fills the model from its answer.
func createWith[M any](ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse, op string, create func(context.Context, *M) error) {
	var m M
	resp.Diagnostics.Append(req.Plan.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if err := create(ctx, &m); err != nil {
		addAPIError(&resp.Diagnostics, op, err)
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}
