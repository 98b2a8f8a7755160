// Package layout holds the tests that keep the repository's layout what the
// README says it is: the package map lists exactly the module's packages,
// product code never imports the dev tools and test harnesses under
// pkg/dev, domain packages import no transport, and every package has a
// doc comment. It has no code of its own.
package layout
