// Package abi is the wire contract between fleet-host and its WebAssembly guests: the host
// module and function names, how bytes cross the boundary, the JSON request and reply
// types of every operation, the error kinds, the ABI version and the describe document.
// REFERENCE.md beside it is the same contract for authors in any language, with every
// operation's JSON; its tests hold it to this package.
//
// It imports only the standard library and builds for the host and for GOOS=wasip1, so
// that both halves import one definition instead of copying it.
//
// # How a host call crosses
//
// Every operation is one function of the host module [HostModule], named by its Op
// constant, with the signature
//
//	(req_ptr, req_len, reply_ptr, reply_cap i32) -> i32
//
// The guest writes a JSON request into its own memory and passes a reply buffer that it
// owns:
//
//	guest memory:  ... [req_ptr .. req_ptr+req_len) request JSON ...
//	               ... [reply_ptr .. reply_ptr+reply_cap) reply buffer ...
//
// The result r is:
//
//	0 <= r <= reply_cap   the reply Envelope is r bytes at reply_ptr
//	r > reply_cap         the reply is r bytes and did not fit: nothing was written; the host
//	                      keeps it, and the guest fetches it once with OpReplyFetch and a
//	                      buffer of at least r bytes (then grows its buffer for next time)
//	r == ResultFault      the request or reply range lies outside the guest's memory; no
//	                      operation was performed
//
// Every other failure — malformed JSON, a value the schema refuses, a permission the
// guest was not granted, a backend that is down — is a reply Envelope with an Error, never
// a trap and never a bit hidden in a length.
//
// # How the host calls the guest
//
// A guest is a WASI reactor (GOOS=wasip1 -buildmode=c-shared; the host runs _initialize,
// when exported, once per instance; a command, exporting _start instead, is refused) with
// these exports:
//
//	fleet_abi_version() -> i32          the ABI version it was built for
//	fleet_input(size i32) -> i32        a pointer to a guest-owned buffer of >= size bytes,
//	                                    valid until the next call of any export
//	fleet_describe() -> i64             the Describe document, as Packed(ptr, len)
//	fleet_handle(len i32) -> i64        handle the HandleInput of len bytes that the host
//	                                    wrote at fleet_input's buffer; returns a HandleResult
//	                                    as Packed(ptr, len) in guest memory
//	fleet_tick(len i32) -> i64          the same for loop plugins, with a TickInput
//
// No host function calls back into the guest, so a guest is never re-entered during an
// import.
package abi

// Version is the ABI version this package describes. A guest built with it reports it
// from fleet_abi_version.
const Version = 1

// MinVersion is the oldest guest ABI version the host still speaks.
const MinVersion = 1

// HostModule is the wasm import module of every host function.
const HostModule = "fleet"

// The guest's exports.
const (
	ExportABIVersion = "fleet_abi_version"
	ExportInput      = "fleet_input"
	ExportDescribe   = "fleet_describe"
	ExportHandle     = "fleet_handle"
	ExportTick       = "fleet_tick"
	// ExportInitialize is the WASI reactor's start function, run once per instance.
	ExportInitialize = "_initialize"
	// ExportStart is a WASI command's start function. A module that exports it and not
	// ExportInitialize was built as a command (a Go build without -buildmode=c-shared),
	// whose exports fail until _start has run main, and which exits when main returns;
	// the host refuses it at load.
	ExportStart = "_start"
)

// ResultFault is a host function's result when the request or reply range is outside the
// guest's memory (like EFAULT).
const ResultFault int32 = -1

// MaxRequest is the largest request, in bytes, a host function reads from a guest.
const MaxRequest = 4 << 20

// Packed packs a guest pointer and length into the i64 that fleet_describe,
// fleet_handle and fleet_tick return.
func Packed(ptr, length uint32) uint64 { return uint64(ptr)<<32 | uint64(length) }

// Unpack splits an i64 made by Packed.
func Unpack(v uint64) (ptr, length uint32) { return uint32(v >> 32), uint32(v) }
