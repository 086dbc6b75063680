// Package doctest holds tests of the repository's Markdown, not code: every relative link
// of a tracked .md file resolves (the file, and a #heading in a Markdown file), no link
// leaves the repository except to a public https:// site, and the commands the README's
// shell blocks name (each `make X`, each `fleet-host SUBCOMMAND`) are ones the Makefile
// and the command's table have, so that the front door cannot rot. The tests read files
// and `git ls-files` only: they build nothing.
package doctest
