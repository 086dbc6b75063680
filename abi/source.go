//go:build !wasip1

package abi

import "embed"

// Source is this module's own source, its Go files and go.mod: `fleet-host new` writes
// it beside a new plugin project, with guest-sdk's, so that the project builds against
// the abi of the binary's own version with no network. It is left out of a wasm build
// (GOOS=wasip1), so that no guest carries the bytes.
//
//go:embed *.go go.mod
var Source embed.FS
