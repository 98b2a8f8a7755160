// Package layout holds the tests that keep the repository's layout what the
// README says it is: the package map lists exactly the module's packages,
// and product code never imports the dev tools and test harnesses under
// pkg/dev. It has no code of its own.
package layout
