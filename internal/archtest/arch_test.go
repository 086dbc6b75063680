// Package archtest checks the dependency arrows of DESIGN.md: nothing points back.
package archtest

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/fleethost/fleet"

// rules: for each of our packages (by prefix), the module packages and third-party
// modules it may depend on. The standard library is always allowed.
var rules = []struct {
	pkg   string
	allow []string
}{
	// abi imports only the standard library; its conformance suite (abi/abitest) imports
	// abi.
	{"abi", []string{"abi"}},
	// reporter/ as a whole imports only the standard library: reporter itself may import
	// its wire types (reporter/wire), which the plane decodes too.
	{"reporter", []string{"reporter/wire"}},
	// The slot vocabulary and its one event are a leaf that host, its slots and every
	// view of a slot (metrics, the slot table, the API, the fleet tally) share: it knows
	// the plane's words and nothing else.
	{"host/slotstate", []string{"reporter"}},
	// The fleet's record of its contracts stands below the host: the host's root, the API
	// and the client read it, and it reads none of them, nor the dispatch core or wazero;
	// it checks schemas with the host's validator and compatibility rules, and keeps the
	// record through primitives.
	{"host/contracts", []string{"abi", "primitives", "host/internal/validate", "host/internal/compat", "github.com/santhosh-tekuri/jsonschema/", "golang.org/x/text/"}},
	// The slot table is a view of the slot events: it reads the vocabulary and nothing of
	// the host, so that the API, the metrics and the client read it without the engine.
	{"internal/slots", []string{"host/slotstate", "internal/safetext", "reporter"}},
	// The worker's confinement is the kernel's: what the daemon and the worker both
	// link, and the worker runs before it reads a byte, stands on the seccomp and
	// landlock libraries and nothing of the host's.
	{"internal/confine", []string{"github.com/elastic/go-seccomp-bpf", "github.com/landlock-lsm/go-landlock/", "kernel.org/pub/linux/libs/security/libcap/psx", "golang.org/x/sys/", "golang.org/x/net/bpf"}},
	{"primitives", []string{"primitives", "github.com/redis/go-redis/", "github.com/cespare/xxhash/", "github.com/dgryski/go-rendezvous", "go.uber.org/atomic", "golang.org/x/sys/"}},
	// guest-sdk: abi, the schema generator and what it needs, and one JSON codec for the
	// plugin's own values (segmentio/encoding and what it needs).
	{"guest-sdk", []string{"abi", "guest-sdk", "github.com/invopop/jsonschema", "github.com/bahlo/generic-list-go", "github.com/buger/jsonparser", "github.com/pb33f/ordered-map/", "github.com/wk8/go-ordered-map/", "go.yaml.in/yaml/", "gopkg.in/yaml",
		"github.com/segmentio/encoding/", "github.com/segmentio/asm/", "golang.org/x/sys/cpu"}},
}

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Standard   bool
}

// modules are the folders of this repository's modules, from internal/archtest: the root's
// ./... does not reach into abi and guest-sdk, which are modules of their own.
var modules = []string{"../..", "../../abi", "../../guest-sdk"}

func TestDependencyArrows(t *testing.T) {
	std := map[string]bool{}
	var pkgs []listed
	for _, dir := range modules {
		cmd := exec.Command("go", "list", "-deps", "-json", "./...")
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps in %s: %v", dir, err)
		}
		dec := json.NewDecoder(strings.NewReader(string(out)))
		for dec.More() {
			var p listed
			if err := dec.Decode(&p); err != nil {
				t.Fatalf("decode go list output: %v", err)
			}
			if p.Standard {
				std[p.ImportPath] = true
			}
			pkgs = append(pkgs, p)
		}
	}
	for _, p := range pkgs {
		rel, ok := strings.CutPrefix(p.ImportPath, module+"/")
		if !ok {
			continue
		}
		for _, r := range rules {
			if rel != r.pkg && !strings.HasPrefix(rel, r.pkg+"/") {
				continue
			}
			for _, d := range p.Deps {
				if std[d] || allowed(d, r.allow) {
					continue
				}
				t.Errorf("%s imports %s, which DESIGN.md does not allow for %s/", p.ImportPath, d, r.pkg)
			}
		}
		// The host's side never runs guest code: guest-sdk enters the binary only through
		// internal/scaffold, which embeds its source (guest-sdk's Source) for fleet-host
		// new, and which only cmd/ imports. Test guests (testdata) and the example plugins
		// are guests.
		if guestSDKForbidden(rel) {
			deps := p.Deps
			if strings.HasPrefix(rel, "cmd/") {
				deps = p.Imports // cmd reaches guest-sdk through internal/scaffold
			}
			for _, d := range deps {
				if d == module+"/guest-sdk" || strings.HasPrefix(d, module+"/guest-sdk/") {
					t.Errorf("%s imports %s; only internal/scaffold (for fleet-host new's sources) may", p.ImportPath, d)
				}
			}
		}
		// Nothing imports host or cmd, except host's own packages and cmd.
		for _, d := range p.Deps {
			dr, ok := strings.CutPrefix(d, module+"/")
			if !ok {
				continue
			}
			if (dr == "host" || strings.HasPrefix(dr, "host/")) && !strings.HasPrefix(rel, "host") && !strings.HasPrefix(rel, "cmd/") && !strings.HasPrefix(rel, "tests") && !strings.HasPrefix(rel, "internal/") {
				t.Errorf("%s imports %s; only cmd/ and tests may import host", p.ImportPath, d)
			}
			if strings.HasPrefix(dr, "cmd/") {
				t.Errorf("%s imports %s; nothing imports cmd/", p.ImportPath, d)
			}
		}
	}
}

// guestSDKForbidden says whether the module package rel (module-relative) is of the
// host's side, which must not depend on guest-sdk.
func guestSDKForbidden(rel string) bool {
	if rel == "internal/scaffold" || strings.Contains("/"+rel+"/", "/testdata/") {
		return false
	}
	for _, side := range []string{"host", "primitives", "reporter", "internal", "cmd"} {
		if rel == side || strings.HasPrefix(rel, side+"/") {
			return true
		}
	}
	return false
}

func allowed(dep string, allow []string) bool {
	rel, ours := strings.CutPrefix(dep, module+"/")
	for _, a := range allow {
		if ours && (rel == a || strings.HasPrefix(rel, a+"/")) {
			return true
		}
		if !ours && strings.HasPrefix(dep, a) {
			return true
		}
	}
	// Internal packages of golang.org/x used by the standard library vendor tree.
	return strings.HasPrefix(dep, "vendor/") || strings.HasPrefix(dep, "internal/")
}
