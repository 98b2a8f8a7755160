// Package doctest keeps flexplane's documentation honest with tests: the
// README stays the short front door (at most 200 lines); the manual under
// docs/ has an index that links every page; every relative link in
// README.md and docs/ resolves to a file, and its #anchor to a heading of
// that file; mkdocs.yml's nav names every page and only pages that exist;
// the documentation holds no text about the work that made it (issue
// numbers, work sessions, dated run logs); and comments in code, the
// Makefile and the charts name pages under docs/, not README sections.
// Its tests apply these rules to the repository; the package has no code
// of its own.
package doctest
