// Package console is the Fleet console: one page of plain HTML, CSS and JavaScript,
// embedded in the binary (no build step, no CDN: it works offline), that `fleet-host run`
// serves at / on its API listener. The page holds no data: it reads and acts through
// the HTTP API (internal/api) with the operator's token, so that everything it shows is
// also scriptable. See RATIONALE.md.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"maps"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"
)

// assetPrefix is the path under which the page's scripts and styles are served.
const assetPrefix = "/console/"

//go:embed assets
var assets embed.FS

// asset is one embedded file, with its ETag.
type asset struct {
	body  []byte
	etag  string
	ctype string
}

// files are the embedded assets by URL path: "/" is the page, the others under
// assetPrefix. Built once: the embedded files never change.
var files = func() map[string]asset {
	out := map[string]asset{}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		a := asset{body: b, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, ctype: contentType(p)}
		name := strings.TrimPrefix(p, "assets/")
		if name == "index.html" {
			out["/"] = a
		} else {
			out[assetPrefix+name] = a
		}
		return nil
	})
	if err != nil {
		panic("console: embedded assets: " + err.Error()) // the build embeds them; unreachable
	}
	return out
}()

func contentType(p string) string {
	switch path.Ext(p) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return "application/octet-stream"
}

// csp lets the page load its own scripts and styles and talk to its own origin only: no
// inline script, no other origin, no framing. A guest's text (a payload, a fail reason)
// that reached the page as markup could run nothing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Paths are the paths Handler serves, sorted: "/" and each asset's, so that a mux routes
// only those to it and answers any other path its own way.
func Paths() []string {
	return slices.Sorted(maps.Keys(files))
}

// Handler serves the page at / and its assets under assetPrefix; any other path is 404.
// Each answer carries an ETag (the asset's digest), so a browser revalidates instead of
// keeping a stale copy after an upgrade.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}
