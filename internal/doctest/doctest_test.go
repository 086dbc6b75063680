package doctest

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the top of the work tree, and tracked its Markdown files (slash paths).
func repo(t *testing.T) (root string, tracked []string) {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	root = strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		if len(name) > 0 {
			tracked = append(tracked, string(name))
		}
	}
	if len(tracked) == 0 {
		t.Fatal("git ls-files '*.md' lists nothing")
	}
	return root, tracked
}

// block is a fenced code block: its info string's first word and its lines.
type block struct {
	lang  string
	line  int // of the opening fence, 1-based
	lines []string
}

// doc is a Markdown file split into prose (code blocks blanked, so that a link-like
// text in code is no link) and its fenced blocks.
type doc struct {
	prose  []string
	blocks []block
}

var fenceRE = regexp.MustCompile("^ {0,3}(```+|~~~+)\\s*([^`\\s]*)")

func parse(text string) doc {
	var d doc
	var cur *block
	fence := ""
	for i, l := range strings.Split(text, "\n") {
		if cur != nil {
			if s := strings.TrimSpace(l); strings.HasPrefix(s, fence) && strings.Trim(s, fence[:1]) == "" {
				d.blocks = append(d.blocks, *cur)
				cur = nil
			} else {
				cur.lines = append(cur.lines, l)
			}
			d.prose = append(d.prose, "")
			continue
		}
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			fence = m[1]
			cur = &block{lang: m[2], line: i + 1}
			d.prose = append(d.prose, "")
			continue
		}
		d.prose = append(d.prose, l)
	}
	if cur != nil {
		d.blocks = append(d.blocks, *cur)
	}
	return d
}

var codeSpanRE = regexp.MustCompile("`+[^`]*`+")

// headingRE is an ATX heading.
var headingRE = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)

// linkInHeadingRE is a link or image in a heading, whose text is what GitHub slugs.
var linkInHeadingRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// slugs are the anchors GitHub gives a file's headings: the heading's text lowercased,
// each space a '-', every character that is not a letter, a digit, '-' or '_' dropped,
// and a repeated slug suffixed -1, -2, ...
func slugs(d doc) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range d.prose {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		text := linkInHeadingRE.ReplaceAllString(m[1], "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
				b.WriteRune(r)
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			out[s+"-"+strconv.Itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// inlineLinkRE is [text](target) or ![alt](target), the target up to a space (a title
// follows) or the closing parenthesis; refLinkRE a reference definition.
var (
	inlineLinkRE = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	refLinkRE    = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$`)
	schemeRE     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

type link struct {
	line   int
	target string
}

func links(d doc) []link {
	var out []link
	for i, l := range d.prose {
		l = codeSpanRE.ReplaceAllString(l, "")
		for _, m := range inlineLinkRE.FindAllStringSubmatch(l, -1) {
			out = append(out, link{i + 1, m[1]})
		}
		if m := refLinkRE.FindStringSubmatch(l); m != nil {
			out = append(out, link{i + 1, m[1]})
		}
	}
	return out
}

// TestMarkdownLinks checks every link of every tracked Markdown file: a relative one names
// a file or folder of the repository (never one outside it), and its #anchor, in a
// Markdown file, a heading of that file; any other is a public https:// address.
func TestMarkdownLinks(t *testing.T) {
	root, tracked := repo(t)
	docs := map[string]doc{}
	read := func(name string) (doc, bool) {
		if d, ok := docs[name]; ok {
			return d, true
		}
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return doc{}, false
		}
		d := parse(string(b))
		docs[name] = d
		return d, true
	}
	checked := 0
	for _, name := range tracked {
		d, ok := read(name)
		if !ok {
			continue // deleted in the work tree, not yet committed
		}
		for _, l := range links(d) {
			checked++
			where := fmt.Sprintf("%s:%d: link %q", name, l.line, l.target)
			tgt := l.target
			if tgt == "" {
				t.Errorf("%s: empty target", where)
				continue
			}
			if schemeRE.MatchString(tgt) {
				if !strings.HasPrefix(tgt, "https://") && !strings.HasPrefix(tgt, "mailto:") {
					t.Errorf("%s: leaves the repository by a scheme other than https://", where)
				}
				continue
			}
			file, anchor, _ := strings.Cut(tgt, "#")
			var resolved string
			switch {
			case file == "":
				resolved = name
			case strings.HasPrefix(file, "/"):
				t.Errorf("%s: absolute path; link relative to the file", where)
				continue
			default:
				resolved = path.Join(path.Dir(name), file)
			}
			if resolved == ".." || strings.HasPrefix(resolved, "../") {
				t.Errorf("%s: points outside the repository", where)
				continue
			}
			fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(resolved)))
			if err != nil {
				t.Errorf("%s: %s does not exist", where, resolved)
				continue
			}
			if anchor == "" || fi.IsDir() || !strings.HasSuffix(resolved, ".md") {
				continue
			}
			td, _ := read(resolved)
			if !slugs(td)[strings.ToLower(anchor)] {
				t.Errorf("%s: %s has no heading whose anchor is #%s", where, resolved, anchor)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no link found in any Markdown file: the parser is broken")
	}
}

// targetRE is a Makefile rule's targets (not a variable's := or ?= assignment).
var targetRE = regexp.MustCompile(`^([A-Za-z0-9_.%{}$()/ -]+?)\s*::?(?:[^=]|$)`)

// makeTargets are the targets a Makefile defines, and its .PHONY names.
func makeTargets(t *testing.T, file string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "#") {
			continue
		}
		m := targetRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		for _, tgt := range strings.Fields(m[1]) {
			out[tgt] = true
		}
		if strings.HasPrefix(l, ".PHONY:") {
			for _, tgt := range strings.Fields(strings.TrimPrefix(l, ".PHONY:")) {
				out[tgt] = true
			}
		}
	}
	return out
}

// subcommands are the commands of fleet-host's usage table (cmd/fleet-host/main.go's
// usage constant, the text `fleet-host help` prints), read from the source.
func subcommands(t *testing.T, root string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "cmd", "fleet-host", "main.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var usage string
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || vs.Names[0].Name != "usage" || len(vs.Values) != 1 {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
			usage, _ = strconv.Unquote(lit.Value)
		}
		return false
	})
	_, table, ok := strings.Cut(usage, "\ncommands:\n")
	if !ok {
		t.Fatal("cmd/fleet-host/main.go: no usage constant with a \"commands:\" table")
	}
	out := map[string]bool{"help": true}
	for _, l := range strings.Split(table, "\n") {
		if !strings.HasPrefix(l, "  ") {
			break
		}
		out[strings.Fields(l)[0]] = true
	}
	if len(out) < 5 {
		t.Fatalf("cmd/fleet-host/main.go: the usage table lists only %v", out)
	}
	return out
}

// shellCommands are the commands of a shell line: split at ; && || | and &, comments
// dropped, each a list of words.
func shellCommands(line string) [][]string {
	if i := strings.Index(line, " #"); i >= 0 {
		line = line[:i]
	}
	if strings.HasPrefix(strings.TrimSpace(line), "#") {
		return nil
	}
	var out [][]string
	for _, part := range regexp.MustCompile(`&&|\|\||[;|&]`).Split(line, -1) {
		if w := strings.Fields(part); len(w) > 0 {
			out = append(out, w)
		}
	}
	return out
}

// TestREADMECommands checks that the README's and docs/' shell blocks run what exists:
// each `make X` is a target of the Makefile (or, after `fleet-host new NAME` and `cd NAME`
// in the same block, of the Go project's Makefile that new writes), and each
// `fleet-host SUBCOMMAND` a command of fleet-host's usage table.
func TestREADMECommands(t *testing.T) {
	root, tracked := repo(t)
	repoTargets := makeTargets(t, filepath.Join(root, "Makefile"))
	newTargets := makeTargets(t, filepath.Join(root, "internal", "scaffold", "templates", "go", "Makefile.tmpl"))
	cmds := subcommands(t, root)
	var files []string
	for _, name := range tracked {
		if name == "README.md" || strings.HasPrefix(name, "docs/") {
			files = append(files, name)
		}
	}
	if !slices.Contains(files, "README.md") {
		t.Fatal("README.md is not tracked")
	}
	makes, fleets := 0, 0
	for _, name := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			continue
		}
		for _, bl := range parse(string(b)).blocks {
			if bl.lang != "sh" && bl.lang != "bash" && bl.lang != "shell" {
				continue
			}
			targets, project := repoTargets, ""
			for i, l := range bl.lines {
				where := fmt.Sprintf("%s:%d", name, bl.line+1+i)
				for _, w := range shellCommands(l) {
					switch base := path.Base(w[0]); {
					case base == "cd" && len(w) > 1 && project != "" && w[1] == project:
						targets = newTargets
					case base == "cd":
						targets = repoTargets
					case base == "make":
						makes++
						var named []string
						for _, a := range w[1:] {
							if !strings.HasPrefix(a, "-") && !strings.Contains(a, "=") {
								named = append(named, a)
							}
						}
						if len(named) == 0 {
							continue // the Makefile's first rule
						}
						for _, tgt := range named {
							if !targets[tgt] {
								t.Errorf("%s: `make %s` in a shell block, but the Makefile has no target %q", where, tgt, tgt)
							}
						}
					case base == "fleet-host":
						fleets++
						if len(w) < 2 || strings.HasPrefix(w[1], "-") {
							continue
						}
						if !cmds[w[1]] {
							t.Errorf("%s: `fleet-host %s` in a shell block, but fleet-host's command table has no %q", where, w[1], w[1])
						}
						if w[1] == "new" && len(w) > 2 {
							project = w[2]
						}
					}
				}
			}
		}
	}
	if makes == 0 || fleets == 0 {
		t.Errorf("the README's shell blocks name %d make and %d fleet-host commands: the quick start is gone, or the parser is broken", makes, fleets)
	}
}

// TestSlugsAndLinks pins the parser on the cases the repository's files have.
func TestSlugsAndLinks(t *testing.T) {
	d := parse("# Pools — hash tag `{pool}`\n## 0. Start a plugin module of your own\n## What does the sandbox cost?\n## Redis\n## Redis\n" +
		"See [a](b.md#c) and ![img](x/y.png \"t\") and `[not](code)`.\n```sh\n[nor](this)\n```\n[ref]: ../z.md\n")
	got := slugs(d)
	for _, want := range []string{"pools--hash-tag-pool", "0-start-a-plugin-module-of-your-own", "what-does-the-sandbox-cost", "redis", "redis-1"} {
		if !got[want] {
			t.Errorf("slugs lack %q: %v", want, got)
		}
	}
	var targets []string
	for _, l := range links(d) {
		targets = append(targets, l.target)
	}
	if want := []string{"b.md#c", "x/y.png", "../z.md"}; !slices.Equal(targets, want) {
		t.Errorf("links = %q, want %q", targets, want)
	}
}
