//go:build !wasip1

package fleet

import "embed"

// Source is this module's own source: its Go files, go.mod and go.sum, the internal and
// fleettest packages, the C SDK (c/fleet.h, c/fleet.c) and the AssemblyScript one
// (assemblyscript/index.ts and its package.json). `fleet-host new` writes it beside a new
// plugin project, so that the project builds against the SDK of the
// binary's own version with no network. A plugin has no use for it: the file is left
// out of a wasm build (GOOS=wasip1), so that no guest carries the bytes.
//
//go:embed *.go go.mod go.sum internal fleettest c/fleet.h c/fleet.c assemblyscript/index.ts assemblyscript/package.json
var Source embed.FS
