package pveschema

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// indexCounts gives, for each "[n]" parameter family, how many indexed parameters Proxmox
// VE 9 defines (net[n] is net0..net31). The api-viewer collapses them into one entry, so
// the counts come from Proxmox's limits (MAX_NETS, MAX_SCSI_DISKS, ...); where the
// description states "(n is 0 to N)" the two must agree or Load fails.
func indexCounts() map[string]int {
	return map[string]int{
		"net":      32,
		"ipconfig": 32,
		"scsi":     31,
		"virtio":   16,
		"sata":     6,
		"ide":      4,
		"unused":   256,
		"usb":      14,
		"serial":   4,
		"parallel": 3,
		"hostpci":  16,
		"numa":     8,
		"virtiofs": 10,
		"link":     8,
	}
}

var descRangeRE = regexp.MustCompile(`\(n is 0 to (\d+)\)`)

// prepare compiles patterns, resolves "[n]" families and checks that every format used by
// the endpoint is known, so that validation never meets an undefined format.
func (e *Endpoint) prepare() error {
	params := e.params
	counts := indexCounts()
	var ide *prop
	for name, p := range params.Properties {
		base, ok := strings.CutSuffix(name, "[n]")
		if !ok {
			continue
		}
		n, known := counts[base]
		if m := descRangeRE.FindStringSubmatch(p.Description); m != nil {
			last, _ := strconv.Atoi(m[1])
			if known && last+1 != n {
				return fmt.Errorf("%s: description says 0 to %d, limit table says %d", name, last, n)
			}
			n, known = last+1, true
		}
		if !known {
			return fmt.Errorf("%s: unknown index range", name)
		}
		if params.indexed == nil {
			params.indexed = map[string]indexedProp{}
		}
		params.indexed[base] = indexedProp{count: n, prop: p}
		if base == "ide" {
			ide = p
		}
	}
	for name, p := range params.Properties {
		if p.Format == "pve-qm-ide" {
			if ide == nil || ide.FormatProps == nil {
				return fmt.Errorf("%s: format pve-qm-ide without an ide[n] format", name)
			}
			p.FormatProps = ide.FormatProps
		}
	}
	if err := e.formats.prepareProp(params, "parameters"); err != nil {
		return err
	}
	if e.returns != nil {
		if err := e.formats.compileOnly(e.returns, "returns"); err != nil {
			return err
		}
	}
	return nil
}

// perlToGo rewrites the Perl regular-expression syntax found in Proxmox's schema into RE2:
// stringified qr// flag groups "(?^:" and "(?^i:", "{,n}" quantifiers (Perl >= 5.34) and
// atomic groups "(?>", which become plain groups (the same language for anchored matches of
// the patterns in the schema). Go's regexp allows at most 1000 repetitions: a larger upper
// bound ("{0,4096}", the TFA keys of /access/users) is left open ("{0,}"), a superset.
func perlToGo(p string) string {
	p = strings.ReplaceAll(p, "(?>", "(?:")
	p = strings.ReplaceAll(p, "(?^:", "(?:")
	p = strings.ReplaceAll(p, "(?^i:", "(?i:")
	p = strings.ReplaceAll(p, "{,", "{0,")
	return bigRepeatRE.ReplaceAllStringFunc(p, func(m string) string {
		sub := bigRepeatRE.FindStringSubmatch(m)
		if n, err := strconv.Atoi(sub[2]); err == nil && n <= 1000 {
			return m
		}
		return "{" + sub[1] + ",}"
	})
}

var bigRepeatRE = regexp.MustCompile(`\{(\d+),(\d{4,})\}`)

// compilePattern anchors a schema pattern as Proxmox does (m/^$pattern$/).
func compilePattern(p string) (*regexp.Regexp, error) {
	return regexp.Compile("^" + perlToGo(p) + "$")
}

// compile compiles p's pattern once.
func (p *prop) compile(where string) error {
	if p.Pattern == "" || p.re != nil {
		return nil
	}
	re, err := compilePattern(p.Pattern)
	if err != nil {
		return fmt.Errorf("%s: pattern: %w", where, err)
	}
	p.re = re
	return nil
}

func (fs *formatSet) prepareProp(p *prop, where string) error {
	if err := p.compile(where); err != nil {
		return err
	}
	if p.Format != "" && p.FormatProps == nil {
		if !fs.known(p.Format) {
			return fmt.Errorf("%s: undefined format '%s'", where, p.Format)
		}
	}
	for k, sub := range p.FormatProps {
		if sub.Alias != "" {
			if p.FormatProps[sub.Alias] == nil {
				return fmt.Errorf("%s.%s: alias of undefined key %s", where, k, sub.Alias)
			}
			continue
		}
		if err := fs.prepareProp(sub, where+"."+k); err != nil {
			return err
		}
	}
	for k, sub := range p.Properties {
		if err := fs.prepareProp(sub, where+"."+k); err != nil {
			return err
		}
	}
	if p.Items != nil {
		if err := fs.prepareProp(p.Items, where+"[]"); err != nil {
			return err
		}
	}
	return nil
}

// compileOnly compiles patterns of a returns schema; formats there are informational.
func (fs *formatSet) compileOnly(p *prop, where string) error {
	if err := p.compile(where); err != nil {
		return err
	}
	for k, sub := range p.Properties {
		if err := fs.compileOnly(sub, where+"."+k); err != nil {
			return err
		}
	}
	if p.Items != nil {
		return fs.compileOnly(p.Items, where+"[]")
	}
	return nil
}
