//go:build !wasip1

package abi

import "embed"

// Source is this module's own source, its Go files, go.mod and the conformance suite
// (abitest) that guest-sdk/fleettest's tests run: `fleet-host new` writes it beside a
// new plugin project, with guest-sdk's, so that the project builds against
// the abi of the binary's own version with no network. It is left out of a wasm build
// (GOOS=wasip1), so that no guest carries the bytes.
//
//go:embed *.go go.mod abitest
var Source embed.FS
