package flexctl

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Output formats of -o.
const (
	OutputTable = "table"
	OutputJSON  = "json"
	OutputYAML  = "yaml"
)

// Table is the table form of a command's answer.
type Table struct {
	Header []string
	Rows   [][]string
}

// Write prints the answer v to w as format: table (the columns of t), json
// (v as the API's JSON, indented) or yaml (the same as YAML).
func Write(w io.Writer, format string, v any, t func() Table) error {
	switch format {
	case OutputJSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Errorf("write json: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case OutputYAML:
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("write yaml: %w", err)
		}
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return fmt.Errorf("write yaml: %w", err)
		}
		_, err = w.Write(y)
		return err
	case OutputTable, "":
		tab := t()
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, strings.Join(tab.Header, "\t"))
		for _, r := range tab.Rows {
			fmt.Fprintln(tw, strings.Join(r, "\t"))
		}
		return tw.Flush()
	default:
		return usageErrorf("unknown output format %q: use table, json or yaml", format)
	}
}

// str is *p, or "" for nil.
func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
