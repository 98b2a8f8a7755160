package doctest

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..", "..")

// maxReadmeLines is the most lines README.md may have: it says what
// flexplane is, shows the picture and the two commands, and links into
// docs/ for everything else.
const maxReadmeLines = 200

// processText matches text about the work on the project rather than the
// product: issue numbers, the people and work sessions of a run, dated run
// logs. The documentation describes the product only; an upstream bug is
// linked by its URL (go.dev/issue/N does not match).
var processText = regexp.MustCompile(`(?i)\bissue ?#?[0-9]|\bsessions?\b|\bthe lead\b|\bstop [0-9]|\b[0-9]{2}:[0-9]{2} UTC`)

// productTerms are the product's own phrases (or those of what it is built
// on) that hold a word processText looks for; they are blanked before
// matching, case and all.
var productTerms = []string{
	"end-session",       // OpenID Connect's end-session endpoint
	"control session",   // a mesh node's session with its control server
	"WireGuard session", // a tunnel's keys between two mesh nodes
}

// findProcessText returns the first process text in line, if any, ignoring
// the product's own terms.
func findProcessText(line string) string {
	for _, term := range productTerms {
		re := regexp.MustCompile(`(?i)` + regexp.QuoteMeta(term))
		line = re.ReplaceAllString(line, strings.Repeat(" ", len(term)))
	}
	return processText.FindString(line)
}

// anchor is the anchor of a Markdown heading's text as MkDocs and GitHub
// make it: lower case, code marks and punctuation dropped, each space a
// hyphen ("`make dev`: the whole system" is "make-dev-the-whole-system").
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// page is a Markdown file of the documentation, its path relative to the
// repository's root in slash form.
type page struct {
	path     string
	lines    []string // outside fenced code blocks; "" for lines inside one
	headings []string // anchors of its headings
	links    []link
}

// link is a relative link of a page.
type link struct {
	line   int
	target string // the file, relative to the repository's root
	anchor string // without '#', "" for none
}

// inlineLink is a Markdown inline link or image: [text](target).
var inlineLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// readPage reads the page at rel (slash form, relative to the root).
func readPage(t *testing.T, rel string) page {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	p := page{path: rel}
	fence := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fence = !fence
			p.lines = append(p.lines, "")
			continue
		}
		if fence {
			p.lines = append(p.lines, "")
			continue
		}
		p.lines = append(p.lines, line)
		if h, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " "); ok && strings.HasPrefix(line, "#") {
			p.headings = append(p.headings, anchor(h))
		}
		for _, m := range inlineLink.FindAllStringSubmatch(stripCode(line), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			if file == "" {
				file = rel
			} else {
				file = path.Join(path.Dir(rel), file)
			}
			p.links = append(p.links, link{line: n, target: file, anchor: frag})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return p
}

// codeSpan is inline code, whose brackets are no link.
var codeSpan = regexp.MustCompile("`[^`]*`")

// stripCode removes a line's inline code.
func stripCode(line string) string { return codeSpan.ReplaceAllString(line, "``") }

// docPages lists README.md and every Markdown page under docs/.
func docPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// TestReadmeIsShort: the README is the front door, at most maxReadmeLines
// lines; the manual is under docs/.
func TestReadmeIsShort(t *testing.T) {
	t.Parallel()
	p := readPage(t, "README.md")
	if n := len(p.lines); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail into a page under docs/ and link it", n, maxReadmeLines)
	}
}

// TestIndexLinksEveryPage: docs/index.md exists and links, relatively,
// every other page under docs/, so every page is found from it.
func TestIndexLinksEveryPage(t *testing.T) {
	t.Parallel()
	index := readPage(t, "docs/index.md")
	var linked []string
	for _, l := range index.links {
		linked = append(linked, l.target)
	}
	pages := docPages(t)
	if len(pages) < 13 {
		t.Errorf("docs/ has %d pages besides its index, want at least 12", len(pages)-2)
	}
	for _, p := range pages {
		if p == "README.md" || p == "docs/index.md" {
			continue
		}
		if !slices.Contains(linked, p) {
			t.Errorf("docs/index.md does not link %s", p)
		}
	}
}

// TestLinksResolve: every relative link of README.md and docs/ names a file
// that exists, and its #anchor a heading of that file.
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	headings := map[string][]string{}
	var pages []page
	for _, rel := range docPages(t) {
		p := readPage(t, rel)
		pages = append(pages, p)
		headings[rel] = p.headings
	}
	for _, p := range pages {
		for _, l := range p.links {
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(l.target))); err != nil {
				t.Errorf("%s:%d: link to %s: no such file", p.path, l.line, l.target)
				continue
			}
			if l.anchor == "" {
				continue
			}
			hs, ok := headings[l.target]
			if !ok {
				t.Errorf("%s:%d: link to %s#%s: an anchor into a file that is not a page of the documentation", p.path, l.line, l.target, l.anchor)
				continue
			}
			if !slices.Contains(hs, l.anchor) {
				t.Errorf("%s:%d: link to %s#%s: %s has no such heading", p.path, l.line, l.target, l.anchor, l.target)
			}
		}
	}
}

// navPage is an entry of mkdocs.yml's nav: "- Title: path.md".
var navPage = regexp.MustCompile(`^\s*- (?:[^:]+: )?([^\s:]+\.md)\s*$`)

// TestNavNamesEveryPage: mkdocs.yml's nav names every page under docs/ once
// and no page that does not exist.
func TestNavNamesEveryPage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root, "mkdocs.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var nav []string
	for _, line := range strings.Split(string(b), "\n") {
		if m := navPage.FindStringSubmatch(line); m != nil {
			nav = append(nav, "docs/"+m[1])
		}
	}
	for i, p := range nav {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
			t.Errorf("mkdocs.yml's nav names %s, which does not exist", p)
		}
		if slices.Contains(nav[:i], p) {
			t.Errorf("mkdocs.yml's nav names %s twice", p)
		}
	}
	for _, p := range docPages(t) {
		if p != "README.md" && !slices.Contains(nav, p) {
			t.Errorf("mkdocs.yml's nav does not name %s", p)
		}
	}
}

// TestNoProcessText: the documentation speaks of the product only: no issue
// numbers, work sessions, people's runs or dated run logs.
func TestNoProcessText(t *testing.T) {
	t.Parallel()
	for _, rel := range docPages(t) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range strings.Split(string(b), "\n") {
			if m := findProcessText(line); m != "" {
				t.Errorf("%s:%d: %q is about the work, not the product: %s", rel, n+1, m, line)
			}
		}
	}
}

// TestProcessTextRule: the rule finds what it is for and leaves the
// product's own words alone.
func TestProcessTextRule(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"Not done yet (issue 14): the goal", "see issue #7", "the lead's runs",
		"this session's figures", "shared with other sessions", "runs between 21:38 and 22:41 UTC",
		"the work of stop 3",
	} {
		if findProcessText(s) == "" {
			t.Errorf("findProcessText(%q) found nothing", s)
		}
	}
	for _, s := range []string{
		"the mesh control leader", "its end-session endpoint", "the peer's control session",
		"dropped the WireGuard session", "the tab's `sessionStorage`", "go.dev/issue/75804",
		"`devstack.SessionTokenLifetime`", "stopping it 5 s",
	} {
		if m := findProcessText(s); m != "" {
			t.Errorf("findProcessText(%q) = %q, want nothing", s, m)
		}
	}
}

// TestAnchor: headings' anchors as MkDocs and GitHub make them.
func TestAnchor(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]string{
		"Known limits":                          "known-limits",
		"`make dev`: the whole system":          "make-dev-the-whole-system",
		"`DEV_KUBE=1 make dev`: the stack":      "dev_kube1-make-dev-the-stack",
		"Node pools through Cluster API":        "node-pools-through-cluster-api",
		"Conventions: connections, `Node`, one": "conventions-connections-node-one",
	} {
		if got := anchor(h); got != want {
			t.Errorf("anchor(%q) = %q, want %q", h, got, want)
		}
	}
}

// readmeSection matches a comment that sends the reader to a section of the
// README by its title (the README, then a comma and the section's name, or
// the README's so-and-so section): the manual is under docs/, so comments
// name the page instead (docs/develop/fuzzing.md).
var readmeSection = regexp.MustCompile(`\(README[,)]|README's [A-Za-z ]*section|the README, [A-Z]|the README \("`)

// generated is Go's mark of a generated file.
var generated = regexp.MustCompile(`(?m)^// Code generated .* DO NOT EDIT\.$`)

// TestCommentsNameDocsPages: code, Makefile, charts' values and unit files
// point at pages under docs/, not at sections of the README. Generated
// files are left out: they change with their source.
func TestCommentsNameDocsPages(t *testing.T) {
	t.Parallel()
	skipDirs := []string{".git", "node_modules", ".output", ".dev", ".bin", "testdata", "bench-results"}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if slices.Contains(skipDirs, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if name != "Makefile" && !strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, ".yaml") && !strings.HasSuffix(name, ".service") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if generated.Match(b) {
			return nil
		}
		for n, line := range strings.Split(string(b), "\n") {
			if m := readmeSection.FindString(line); m != "" {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s:%d: %q points at a README section; name the page under docs/", filepath.ToSlash(rel), n+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
