package extism

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// kernel is Extism's kernel for one instance: the memory blocks that a PDK moves its
// input, output, error and host calls' requests and replies through, kept in a Go arena
// that only the functions of EnvModule reach (RATIONALE.md, "Why is Extism's kernel the
// host's own?"). An offset is an index into the arena; 0 is no block. The guest reads and
// writes any byte below top, the end of the highest block since the call began; the
// bookkeeping (which offsets are blocks, of what length) is Go's, out of its reach.
//
// It is owned by its instance's goroutine, as the instance is.
type kernel struct {
	mem   []byte   // the arena; grows, up to limit bytes, as top does
	meta  []uint32 // per granule of mem: 1 + the length of the block that starts there, 0 if none does
	top   uint64   // the end of the highest block since the last reset: the guest reaches [0, top)
	limit uint64   // the bytes the arena may hold: the plugin's memory limit
	free  []span   // freed blocks below top, most recent last, that alloc reuses

	input, output span
	errorAt       uint64 // the block error_set named, 0 for none

	// refused is set when an alloc did not fit under limit since the call began: a call
	// that dies after it is dead of its memory (death.go).
	refused bool

	config map[string]string // Extism's config (configMap); immutable
	log    io.Writer         // the guest's log, for Extism's log_* functions
}

// span is a range of the arena.
type span struct{ at, n uint64 }

// granule is the unit of the arena's blocks: every block begins at a multiple of it and
// takes a whole number of them, so that a block's bookkeeping costs 4 bytes per 16 of
// memory (meta), whatever the guest allocates.
const granule = 16

// maxFree bounds the freed blocks the kernel remembers for reuse (alloc looks at the
// most recent few): a guest that frees more leaves them unused until the call ends.
const maxFree, freeScan = 1024, 16

func newKernel(limit uint64, config map[string]string, log io.Writer) *kernel {
	k := &kernel{limit: limit, config: config, log: log}
	k.reset()
	k.grow()
	return k
}

// reset forgets every block, the input, output and error: a call begins with a reset,
// as it does in Extism's SDK, and so does the kernel's reset export.
func (k *kernel) reset() {
	clear(k.meta[:min(uint64(len(k.meta)), k.top/granule)])
	k.top = granule // offset 0 is no block: the first begins a granule in
	k.free = k.free[:0]
	k.input, k.output, k.errorAt, k.refused = span{}, span{}, 0, false
}

// begin resets the kernel for a call and makes input its input block. It reports false
// when input does not fit under the limit.
func (k *kernel) begin(input []byte) bool {
	k.reset()
	if len(input) == 0 {
		return true
	}
	at := k.alloc(uint64(len(input)))
	if at == 0 {
		return false
	}
	copy(k.mem[at:], input)
	k.input = span{at, uint64(len(input))}
	return true
}

// alloc returns the offset of a new zeroed block of n bytes, or 0 when n is 0 or the
// block does not fit under the limit (refused then records it). It reuses a freed
// block of the same size when one of the most recent is.
func (k *kernel) alloc(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	if n > k.limit {
		k.refused = true
		return 0
	}
	size := (n + granule - 1) / granule * granule
	for i := len(k.free) - 1; i >= max(0, len(k.free)-freeScan); i-- {
		if f := k.free[i]; f.n == size {
			k.free = append(k.free[:i], k.free[i+1:]...)
			return k.place(f.at, n, size)
		}
	}
	if size > k.limit-k.top {
		k.refused = true
		return 0
	}
	at := k.top
	k.top += size
	if k.top > uint64(len(k.mem)) {
		k.grow()
	}
	return k.place(at, n, size)
}

// place records a block of n bytes (size with its rounding) at at and zeroes it.
func (k *kernel) place(at, n, size uint64) uint64 {
	clear(k.mem[at : at+size])
	k.meta[at/granule] = uint32(n + 1) // n < limit <= 4 GiB, the most a wasm memory limit allows
	return at
}

// grow makes the arena hold top bytes, doubling it (at most to limit) so that a call's
// allocations copy it a logarithmic number of times.
func (k *kernel) grow() {
	n := min(max(k.top, 2*uint64(len(k.mem)), 64<<10), k.limit)
	mem := make([]byte, n)
	copy(mem, k.mem)
	meta := make([]uint32, n/granule)
	copy(meta, k.meta)
	k.mem, k.meta = mem, meta
}

// length is the length of the block at offset, 0 if no block begins there.
func (k *kernel) length(offset uint64) uint64 {
	if offset%granule != 0 || offset >= k.top {
		return 0
	}
	if m := k.meta[offset/granule]; m != 0 {
		return uint64(m - 1)
	}
	return 0
}

// block is the bytes of the block at offset, and whether one begins there.
func (k *kernel) block(offset uint64) ([]byte, bool) {
	n := k.length(offset)
	if n == 0 {
		return nil, false
	}
	return k.mem[offset : offset+n], true
}

// allocBytes is a new block holding b, 0 when it does not fit (or b is empty).
func (k *kernel) allocBytes(b []byte) uint64 {
	at := k.alloc(uint64(len(b)))
	if at != 0 {
		copy(k.mem[at:], b)
	}
	return at
}

// release frees the block at offset: the top block lowers top, any other is kept for
// reuse. An offset that is no block is ignored, as Extism's kernel ignores it.
func (k *kernel) release(offset uint64) {
	n := k.length(offset)
	if n == 0 {
		return
	}
	k.meta[offset/granule] = 0
	size := (n + granule - 1) / granule * granule
	if offset+size == k.top {
		k.top = offset
		return
	}
	if len(k.free) < maxFree {
		k.free = append(k.free, span{offset, size})
	}
}

// bytes is the range [at, at+n) of the arena, if it lies below top.
func (k *kernel) bytes(at, n uint64) ([]byte, bool) {
	if at > k.top || n > k.top-at {
		return nil, false
	}
	return k.mem[at : at+n], true
}

// access is the n bytes at offset for a load or store by the guest; outside them it
// traps, as a load past a wasm memory does.
func (k *kernel) access(fn string, offset, n uint64) []byte {
	b, ok := k.bytes(offset, n)
	if !ok {
		panic(fmt.Errorf("extism: %s at offset %d: outside the kernel's memory in use (%d bytes)", fn, offset, k.top))
	}
	return b
}

// errorMessage is the message the guest set with error_set, and whether it set one that
// is a block.
func (k *kernel) errorMessage() (string, bool) {
	b, ok := k.block(k.errorAt)
	return string(b), ok
}

// outputBytes is a copy of the output the guest set: over abi.MaxRequest bytes, or
// outside the kernel's memory, it is an error that names export.
func (k *kernel) outputBytes(export string, max uint64) ([]byte, error) {
	if k.output.n > max {
		return nil, fmt.Errorf("extism: %s returned %d bytes, limit %d", export, k.output.n, max)
	}
	b, ok := k.bytes(k.output.at, k.output.n)
	if !ok {
		return nil, fmt.Errorf("extism: %s set its output to [%d, +%d), outside the kernel's memory in use (%d bytes)",
			export, k.output.at, k.output.n, k.top)
	}
	return append([]byte(nil), b...), nil
}

// kernelKey is the context key of the *kernel of the instance whose call the context
// runs: the functions of EnvModule and UserModule, shared by every instance of the
// runtime, find their instance's kernel by it.
type kernelKey struct{}

func withKernel(ctx context.Context, k *kernel) context.Context {
	return context.WithValue(ctx, kernelKey{}, k)
}

func kernelOf(ctx context.Context) *kernel { return ctx.Value(kernelKey{}).(*kernel) }

// Extism's log levels, as its PDKs number them (get_log_level): the host takes info and
// above.
const (
	logTrace int32 = iota
	logDebug
	logInfo
	logWarn
	logError
)

var logLevelNames = [...]string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR"}

// errVarsOff and errHTTPOff are the traps of Extism's var_set and http_request, which
// this host keeps off (RATIONALE.md, "What do Extism's config and vars map to?").
var (
	errVarsOff = errors.New("extism: var_set: Vars are disabled by this host; state that outlives a call goes in KV")
	errHTTPOff = errors.New("extism: http_request is not allowed: Extism's own HTTP is off on this host; use fleet's http operation")
)

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// kernelFunc is one function of EnvModule: its name and signature, as Extism's PDKs
// import it, and what it does to the calling instance's kernel.
type kernelFunc struct {
	name            string
	params, results []api.ValueType
	fn              func(k *kernel, stack []uint64)
}

// kernelFuncs are the functions of Extism's kernel (the extism:host/env of the Extism Go
// SDK v1.7.1, which the PDKs import), every one of them the host's own.
var kernelFuncs = []kernelFunc{
	{"alloc", []api.ValueType{i64}, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = k.alloc(s[0]) }},
	{"free", []api.ValueType{i64}, nil, func(k *kernel, s []uint64) { k.release(s[0]) }},
	{"length", []api.ValueType{i64}, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = k.length(s[0]) }},
	{"length_unsafe", []api.ValueType{i64}, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = k.length(s[0]) }},
	{"load_u8", []api.ValueType{i64}, []api.ValueType{i32}, func(k *kernel, s []uint64) {
		s[0] = uint64(k.access("load_u8", s[0], 1)[0])
	}},
	{"load_u64", []api.ValueType{i64}, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = binary.LittleEndian.Uint64(k.access("load_u64", s[0], 8)) }},
	{"store_u8", []api.ValueType{i64, i32}, nil, func(k *kernel, s []uint64) { k.access("store_u8", s[0], 1)[0] = byte(s[1]) }},
	{"store_u64", []api.ValueType{i64, i64}, nil, func(k *kernel, s []uint64) { binary.LittleEndian.PutUint64(k.access("store_u64", s[0], 8), s[1]) }},
	{"input_length", nil, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = k.input.n }},
	{"input_offset", nil, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = k.input.at }},
	{"input_load_u8", []api.ValueType{i64}, []api.ValueType{i32}, func(k *kernel, s []uint64) {
		s[0] = uint64(k.access("input_load_u8", k.input.at+min(s[0], math.MaxUint64-k.input.at), 1)[0])
	}},
	{"input_load_u64", []api.ValueType{i64}, []api.ValueType{i64}, func(k *kernel, s []uint64) {
		s[0] = binary.LittleEndian.Uint64(k.access("input_load_u64", k.input.at+min(s[0], math.MaxUint64-k.input.at), 8))
	}},
	{"input_set", []api.ValueType{i64, i64}, nil, func(k *kernel, s []uint64) { k.input = span{s[0], s[1]} }},
	{"output_set", []api.ValueType{i64, i64}, nil, func(k *kernel, s []uint64) { k.output = span{s[0], s[1]} }},
	{"output_length", nil, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = k.output.n }},
	{"output_offset", nil, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = k.output.at }},
	{"error_set", []api.ValueType{i64}, nil, func(k *kernel, s []uint64) { k.errorAt = s[0] }},
	{"error_get", nil, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = k.errorAt }},
	{"reset", nil, nil, func(k *kernel, _ []uint64) { k.reset() }},
	{"memory_bytes", nil, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = k.top }},
	{"config_get", []api.ValueType{i64}, []api.ValueType{i64}, func(k *kernel, s []uint64) {
		key, _ := k.block(s[0])
		v, ok := k.config[string(key)]
		s[0] = 0
		if ok {
			s[0] = k.allocBytes([]byte(v))
		}
	}},
	{"var_get", []api.ValueType{i64}, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = 0 }},
	{"var_set", []api.ValueType{i64, i64}, nil, func(*kernel, []uint64) { panic(errVarsOff) }},
	{"http_request", []api.ValueType{i64, i64}, []api.ValueType{i64}, func(*kernel, []uint64) { panic(errHTTPOff) }},
	{"http_status_code", nil, []api.ValueType{i32}, func(k *kernel, s []uint64) { s[0] = 0 }},
	{"http_headers", nil, []api.ValueType{i64}, func(k *kernel, s []uint64) { s[0] = 0 }},
	{"get_log_level", nil, []api.ValueType{i32}, func(k *kernel, s []uint64) { s[0] = api.EncodeI32(logInfo) }},
	logFunc("log_trace", logTrace),
	logFunc("log_debug", logDebug),
	logFunc("log_info", logInfo),
	logFunc("log_warn", logWarn),
	logFunc("log_error", logError),
}

// logFunc is Extism's log function of level: a message at info or above is a line of
// the guest's log; every one frees its block.
func logFunc(name string, level int32) kernelFunc {
	return kernelFunc{name, []api.ValueType{i64}, nil, func(k *kernel, s []uint64) {
		if msg, ok := k.block(s[0]); ok && level >= logInfo {
			fmt.Fprintf(k.log, "extism %s: %s\n", logLevelNames[level], msg)
		}
		k.release(s[0])
	}}
}

// instantiateKernel defines EnvModule in r: every function finds the kernel of the
// instance it serves in its call's context (withKernel).
func instantiateKernel(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(EnvModule)
	for _, f := range kernelFuncs {
		fn := f.fn
		b.NewFunctionBuilder().WithGoFunction(api.GoFunc(func(ctx context.Context, stack []uint64) {
			fn(kernelOf(ctx), stack)
		}), f.params, f.results).Export(f.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}
