package tenantkube

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// validSize checks a pool's size.
func validSize(n int) error {
	if n < 0 || n > MaxPoolSize {
		return badInput("size", "size must be 0 to %d, not %d", MaxPoolSize, n)
	}
	return nil
}

// maxLabels bounds a pool's labels and taints.
const maxLabels = 32

// validLabels checks node labels as Kubernetes does; flexplane's own
// prefixes and the kubelet's are refused.
func validLabels(ls map[string]string) error {
	if len(ls) > maxLabels {
		return badInput("labels", "at most %d labels", maxLabels)
	}
	for k, v := range ls {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return badInput("labels", "label %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return badInput("labels", "label %s value %q: %s", k, v, strings.Join(errs, "; "))
		}
		if strings.Contains(k, "flexplane.io/") || strings.Contains(k, "kubernetes.io/") || strings.Contains(k, "k8s.io/") {
			return badInput("labels", "label %q uses a reserved prefix", k)
		}
	}
	return nil
}

// validTaints checks node taints.
func validTaints(ts []Taint) error {
	if len(ts) > maxLabels {
		return badInput("taints", "at most %d taints", maxLabels)
	}
	for _, t := range ts {
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			return badInput("taints", "taint key %q: %s", t.Key, strings.Join(errs, "; "))
		}
		if t.Value != "" {
			if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
				return badInput("taints", "taint %s value %q: %s", t.Key, t.Value, strings.Join(errs, "; "))
			}
		}
		if !slices.Contains([]TaintEffect{NoSchedule, PreferNoSchedule, NoExecute}, t.Effect) {
			return badInput("taints", "taint %s effect must be NoSchedule, PreferNoSchedule or NoExecute", t.Key)
		}
	}
	return nil
}

// formatLabels renders labels as the autoscaler's annotation wants them
// (k=v,k=v, sorted).
func formatLabels(ls map[string]string) string {
	var parts []string
	for k, v := range ls {
		parts = append(parts, k+"="+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for p := range strings.SplitSeq(s, ",") {
		if k, v, ok := strings.Cut(p, "="); ok {
			out[k] = v
		}
	}
	return out
}

// formatTaints renders taints as the autoscaler's annotation wants them
// (key=value:Effect,...).
func formatTaints(ts []Taint) string {
	var parts []string
	for _, t := range ts {
		parts = append(parts, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	return strings.Join(parts, ",")
}

func parseTaints(s string) []Taint {
	var out []Taint
	for p := range strings.SplitSeq(s, ",") {
		kv, eff, ok := strings.Cut(p, ":")
		if !ok {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, Taint{Key: k, Value: v, Effect: TaintEffect(eff)})
	}
	return out
}
