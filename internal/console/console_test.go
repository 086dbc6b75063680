package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHandler: the page and its assets are served with their types, the policy that
// allows only their own origin, and an ETag a revalidation answers 304; another path
// is 404. The page names only assets that are served.
func TestHandler(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	get := func(path string, header ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, page := get("/")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(page, "<title>Fleet console</title>") {
		t.Fatalf("GET / = %d %s %.80q", resp.StatusCode, resp.Header.Get("Content-Type"), page)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "default-src 'none'") {
		t.Errorf("Content-Security-Policy = %q; want only the page's own scripts", csp)
	}
	for _, asset := range []struct{ path, ctype string }{
		{assetPrefix + "console.js", "text/javascript; charset=utf-8"},
		{assetPrefix + "browse.js", "text/javascript; charset=utf-8"},
		{assetPrefix + "console.css", "text/css; charset=utf-8"},
	} {
		if !strings.Contains(page, `"`+asset.path+`"`) {
			t.Errorf("the page does not load %s", asset.path)
		}
		resp, body := get(asset.path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != asset.ctype || body == "" {
			t.Errorf("GET %s = %d %s, %d bytes", asset.path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
		etag := resp.Header.Get("ETag")
		if resp, _ := get(asset.path, "If-None-Match", etag); etag == "" || resp.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with If-None-Match %s = %d; want 304", asset.path, etag, resp.StatusCode)
		}
	}
	if resp, _ := get(assetPrefix + "nope.js"); resp.StatusCode != 404 {
		t.Errorf("GET %snope.js = %d; want 404", assetPrefix, resp.StatusCode)
	}
	if got, want := strings.Join(Paths(), " "), "/ /console/browse.js /console/console.css /console/console.js /console/fleetview.js"; got != want {
		t.Errorf("Paths() = %s; want %s", got, want)
	}
}
