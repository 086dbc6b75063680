package native

import (
	"errors"
	"fmt"
	"slices"
)

// This file is the module rewriter that NewRuntime runs on every plugin before wazero
// compiles it. See host/RATIONALE.md, "Why does the host rewrite every module before
// wazero compiles it?", for why each part exists.
//
// What it does to a module that it accepts:
//
//   - Every function body starts by counting its code down from a countdown global, and
//     every loop header counts down its loop's code / tailBytes. When the countdown runs
//     out, the guest runs the check (appendCheck) and winds the countdown back to
//     checkEvery. The check is an exit to Go (a memory.grow of 0 pages, where the Go
//     runtime may stop the goroutine for its garbage collector and scheduler: compiled
//     guest code is never preempted), a test of the stop global, which the host sets when
//     the call's context ends (stopFlag), trapping when it is set, and an empty loop,
//     where a runtime with WithCloseOnContextDone checks for a closed module (the
//     fuzz and rewrite tests' runtimes).
//   - Each body that contains a call (call, call_indirect: the only call forms of
//     wazero's default CoreFeaturesV2) also spends an estimate of its frame's bytes from a
//     budget global at entry and gives it back on every exit; a call that finds too
//     little budget sets the global to stackExhausted and traps. The budget is exported as
//     stackGlobal, so that the host can tell this trap from any other (callError).
//   - The table's maximum is clamped to maxTableElements.
//
// Why this stops every guest near its deadline: every loop header counts down, and
// between two loop headers, control in one activation only goes forward (br, br_if and
// br_table to a block or if label jump past its end; only a branch to a loop label goes
// back, and it runs the loop header), so an activation runs each instruction at most
// once, at most len(code) of them. The code run between two checks is that of the
// activations entered and the loop iterations begun since the last one, each counted
// down, so at most tailBytes*checkEvery plus one body; plus the tails of the activations
// that were on the stack, which the frame estimate bounds (tailBytes). A loop iteration
// counts only its loop's code / tailBytes because in a Go guest every taken jump is one
// (see guest-sdk/RATIONALE.md): charging a 30 KB function's loop 30 KB a jump would
// run the check every 35 jumps. Checking only at the entry of bodies with
// calls would not do: a body that calls a long body with no call a million times runs
// every copy of it without a check.
//
// Anything the rewriter does not understand is refused, with an error naming it: an
// unknown section, opcode, type form or import kind. The opcodes it knows are exactly
// those of CoreFeaturesV2 (MVP, mutable globals, sign extension, non-trapping
// conversions, multi-value, bulk memory, reference types and SIMD), which is what the
// host's runtimes enable; tail calls and exception handling, which would leave a frame
// without giving its budget back, are not in them and are refused by opcode.

const (
	// stackBudget is the estimated bytes of call stack that one instance's nested guest
	// frames may use; past it, the call traps with a stack-limit death. Measured with a
	// low-water mark on the budget: the host's and the end-to-end tests of the Go example
	// plugins peak at 18 KiB, _initialize of a Go guest at 9 KiB, and a Go guest's
	// json.Unmarshal and json.Marshal of a document nested 64 deep (abi's limit for
	// payloads) at 44 KiB and 800 deep at 600 KiB. An overflow costs the host 0.7-1.4 MiB
	// of allocation (wazero grows a call stack by doubling, and the estimate is above the
	// real frames), where one without the budget cost 143-176 MiB.
	stackBudget = 1 << 20

	// frameOverhead and slotBytes make a frame's estimate: frameOverhead plus slotBytes for
	// each value it can hold at once (params, the locals it refers to, its deepest operand
	// stack). wazevo measures about 28 bytes a frame and 9-11 per value held across a call.
	frameOverhead = 64
	slotBytes     = 16

	// checkEvery is how many bytes of code the guest may count down between two checks
	// for its deadline: about a millisecond of straight-line code, and one check in about
	// a thousand calls of a Go guest's functions (1.1 KB of code on average) or about
	// 15,000 of their taken jumps.
	checkEvery = 1 << 20

	// prologueLen is what each body and each loop iteration counts down for the code the
	// rewriter adds to it.
	prologueLen = 64

	// tailBytes is how many bytes of a body's code count as one byte of its frame
	// estimate: the code that the frames on the stack have left to run when their callees
	// return is then at most tailBytes*stackBudget (16 MiB) bytes.
	tailBytes = 16

	// stackExhausted is the value the budget global holds once a call found too little
	// budget. The global holds [0, stackBudget] otherwise, so a guest cannot fake it.
	stackExhausted = -1

	// stackGlobal is the export name of the budget global. A module that exports the name
	// itself is refused.
	stackGlobal = "fleet:stack_budget"

	// stopGlobal is the export name of the stop global, which the host sets to 1 to stop
	// the call that runs at its next check. A module that exports the name itself is
	// refused.
	stopGlobal = "fleet:stop"

	// StartExport is the export name of a module's start function once Rewrite has moved
	// it out of the start section, which runs inside instantiation, where no stop global
	// reaches it: the host calls it after instantiation, under the stop, as it calls
	// _initialize. A module that exports the name itself is refused.
	StartExport = "fleet:start"

	// maxTableElements caps the table's size, in elements (8 bytes each in wazero: 2 MiB).
	// The Go toolchain emits one funcref table of 4096 + its function count with no
	// maximum (6951 for plugins/examples/counter). A larger minimum is refused; a larger
	// or absent maximum becomes this, so table.grow past it returns -1, as a failed grow
	// does. wazero counts no table against the memory limit.
	maxTableElements = 1 << 18

	// maxLocals caps the locals a function declares: wazero allocates them at compile
	// time, and the Go toolchain declares a few dozen.
	maxLocals = 1 << 16
)

// Section ids of the binary format.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
)

// sectionRank is each known section's place in the order the binary format requires.
var sectionRank = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secGlobal: 6,
	secExport: 7, secStart: 8, secElement: 9, secDataCount: 10, secCode: 11, secData: 12,
}

var sectionNames = map[byte]string{13: "tag (exception handling)"}

type section struct {
	id      byte
	payload []byte
}

type funcType struct{ params, results []byte }

// module is what the rewriter reads of a module before it rewrites the code.
type module struct {
	sections    []section
	types       []funcType
	funcTypes   []uint32 // type index of every function, imported ones first
	importFuncs int
	globals     int        // imported and defined
	memory      bool       // the module imports or defines a memory
	moveStart   bool       // a start function is moved to StartExport (Rewrite), not refused
	start       *uint32    // the moved start function's index
	extraTypes  []funcType // () -> results types that wrapper blocks need, after types
}

var errTruncated = errors.New("unexpected end")

// refusal is the error for a module that wazero may take but the sandbox does not: past
// one of its limits (tables, locals, frame size, the reserved export name), or with a
// value type outside CoreFeaturesV2 (exnref, typed references), which wazero's decoder
// takes whatever the features and checks only where it is used. Any other error is for a
// module that wazero refuses too.
type refusal struct{ error }

// rewrite returns wasm rewritten as the file comment says, or an error that names what
// it refused. It never changes wasm.
func rewrite(wasm []byte) ([]byte, error) { return (&module{}).rewrite(wasm) }

// rewriteMovingStart is rewrite for a transport that calls StartExport itself after
// instantiation: it moves a start function there.
func rewriteMovingStart(wasm []byte) ([]byte, error) {
	return (&module{moveStart: true}).rewrite(wasm)
}

func (m *module) rewrite(wasm []byte) ([]byte, error) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" || string(wasm[4:8]) != "\x01\x00\x00\x00" {
		return nil, fmt.Errorf("native: not a WebAssembly 1.0 binary module")
	}
	r := &reader{b: wasm, pos: 8}
	last := 0
	// Each section is read entry by entry as it comes, as wazero decodes it, so that a
	// module wazero would stop at is refused at the same section or before: wazero
	// allocates by a declared count before it reads the entries (a 30-byte module that
	// declared 10^8 exports made it allocate 6.5 GB).
	for r.pos < len(r.b) {
		id := r.byte()
		n := r.u32()
		payload := r.bytes(int(n))
		if r.err != nil {
			return nil, fmt.Errorf("native: section at byte %#x: %w", r.pos, r.err)
		}
		if id != secCustom {
			rank, ok := sectionRank[id]
			if !ok {
				name := sectionNames[id]
				if name == "" {
					name = "unknown"
				}
				return nil, fmt.Errorf("native: section %d (%s) is not supported", id, name)
			}
			if rank <= last {
				return nil, fmt.Errorf("native: section %d is out of order or repeated", id)
			}
			last = rank
		}
		var err error
		if payload, err = m.read(id, payload); err != nil {
			return nil, err
		}
		if payload != nil {
			m.sections = append(m.sections, section{id, payload})
		}
	}
	return m.write(), nil
}

// read reads one section's payload p and returns it as it goes into the rewritten
// module (nil to drop it).
func (m *module) read(id byte, p []byte) ([]byte, error) {
	switch id {
	case secType:
		return p, m.readTypes(p)
	case secImport:
		return p, m.readImports(p)
	case secFunction:
		return p, m.readFunctions(p)
	case secTable:
		return clampTables(p)
	case secMemory:
		return p, readVector(p, "memory section", func(r *reader) { r.limits(); m.memory = true })
	case secStart:
		// The start function runs inside wazero's instantiation, before the host has the
		// instance's stop global to arm. A reactor (Go's c-shared, wasi-libc's reactor)
		// has none: its initializer is the _initialize export.
		if !m.moveStart {
			return nil, refusal{errors.New("native: the module has a start function, which the host cannot bound; initialize in the _initialize export instead")}
		}
		r := &reader{b: p}
		start := r.u32()
		if err := r.done("start section"); err != nil {
			return nil, err
		}
		m.start = &start
		return nil, nil // moved to StartExport
	case secGlobal:
		return p, readVector(p, "global section", func(r *reader) {
			r.byte()
			r.byte()
			r.constExpr()
			m.globals++
		})
	case secExport:
		return p, readExports(p)
	case secElement:
		return p, readVector(p, "element section", readElement)
	case secCode:
		return m.rewriteCode(p)
	case secData:
		return p, readVector(p, "data section", readData)
	case secCustom:
		keep, err := readCustom(p)
		if !keep {
			// wazero sizes its name maps by the counts the section declares, so a name
			// section that lies about them is dropped: it only names functions in stack
			// traces.
			return nil, err
		}
		return p, err
	}
	return p, nil // start, data count: one index
}

// write emits the module with the rewriter's globals and the budget's export added, and
// the types that wrapper blocks need.
func (m *module) write() []byte {
	global := m.budgetGlobal()
	out := append([]byte(nil), "\x00asm\x01\x00\x00\x00"...)
	added := map[byte]bool{}
	emit := func(id byte, payload []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(payload)))
		out = append(out, payload...)
	}
	// addMissing emits the sections that the module lacks and the rewrite needs, before
	// the first section that must follow them.
	addMissing := func(rank int) {
		if rank > sectionRank[secType] && len(m.extraTypes) > 0 && !added[secType] {
			added[secType] = true
			emit(secType, appendTypes(appendU32(nil, uint32(len(m.extraTypes))), m.extraTypes))
		}
		if rank > sectionRank[secGlobal] && !added[secGlobal] {
			added[secGlobal] = true
			emit(secGlobal, appendGlobals(appendU32(nil, rewriterGlobals)))
		}
		if rank > sectionRank[secExport] && !added[secExport] {
			added[secExport] = true
			emit(secExport, m.appendExports(appendU32(nil, uint32(m.rewriterExports())), global))
		}
	}
	for _, s := range m.sections {
		if s.id != secCustom {
			addMissing(sectionRank[s.id])
		}
		switch s.id {
		case secType:
			added[secType] = true
			emit(s.id, appendTypes(withCount(s.payload, len(m.extraTypes)), m.extraTypes))
		case secGlobal:
			added[secGlobal] = true
			emit(s.id, appendGlobals(withCount(s.payload, rewriterGlobals)))
		case secExport:
			added[secExport] = true
			emit(s.id, m.appendExports(withCount(s.payload, m.rewriterExports()), global))
		default:
			emit(s.id, s.payload)
		}
	}
	addMissing(len(sectionRank) + 1)
	return out
}

// budgetGlobal is the index of the budget global, after every global of the module;
// the countdown and the stop global come next.
func (m *module) budgetGlobal() uint32 { return uint32(m.globals) }

// rewriterGlobals are the rewriter's globals, in the order appendGlobals writes them,
// after the module's own: budget, countdown, stop.
const rewriterGlobals = 3

// rewriterExports counts the rewriter's exports (appendExports): stackGlobal,
// stopGlobal, and StartExport when the start function moved.
func (m *module) rewriterExports() int {
	if m.start != nil {
		return 3
	}
	return 2
}

// withCount returns a vector's payload with its count raised by extra.
func withCount(payload []byte, extra int) []byte {
	r := &reader{b: payload}
	n := r.u32() // read before: the section's reader checked it
	return append(appendU32(nil, n+uint32(extra)), payload[r.pos:]...)
}

func appendTypes(b []byte, types []funcType) []byte {
	for _, t := range types {
		b = append(b, 0x60)
		b = appendU32(b, uint32(len(t.params)))
		b = append(b, t.params...)
		b = appendU32(b, uint32(len(t.results)))
		b = append(b, t.results...)
	}
	return b
}

// appendGlobals appends the rewriter's globals: the stack budget,
// (global (mut i32) (i32.const stackBudget)), the check countdown,
// (global (mut i32) (i32.const checkEvery)), and the stop global, (global (mut i32)
// (i32.const 0)).
func appendGlobals(b []byte) []byte {
	for _, v := range []int64{stackBudget, checkEvery, 0} {
		b = append(b, 0x7f, 0x01, 0x41)
		b = appendS64(b, v)
		b = append(b, 0x0b)
	}
	return b
}

// appendExports appends the exports of the budget global (index global), of the stop
// global (global+2) and of a moved start function.
func (m *module) appendExports(b []byte, global uint32) []byte {
	type export struct {
		name  string
		kind  byte
		index uint32
	}
	exports := []export{{stackGlobal, 0x03, global}, {stopGlobal, 0x03, global + 2}}
	if m.start != nil {
		exports = append(exports, export{StartExport, 0x00, *m.start})
	}
	for _, e := range exports {
		b = appendU32(b, uint32(len(e.name)))
		b = append(b, e.name...)
		b = append(b, e.kind)
		b = appendU32(b, e.index)
	}
	return b
}

func (m *module) readTypes(p []byte) error {
	r := &reader{b: p}
	n := r.count()
	for i := uint32(0); i < n && r.err == nil; i++ {
		if form := r.byte(); form != 0x60 && r.err == nil {
			return fmt.Errorf("native: type %d: form %#x is not supported (only func types)", i, form)
		}
		var t funcType
		for _, list := range []*[]byte{&t.params, &t.results} {
			k := r.count()
			for j := uint32(0); j < k && r.err == nil; j++ {
				vt := r.byte()
				if !isValType(vt) && r.err == nil {
					return refusal{fmt.Errorf("native: type %d: value type %#x is not supported", i, vt)}
				}
				*list = append(*list, vt)
			}
		}
		m.types = append(m.types, t)
	}
	return r.done("type section")
}

func (m *module) readImports(p []byte) error {
	r := &reader{b: p}
	n := r.count()
	for i := uint32(0); i < n && r.err == nil; i++ {
		mod, name := r.name(), r.name()
		switch kind := r.byte(); kind {
		case 0x00:
			m.funcTypes = append(m.funcTypes, r.u32())
			m.importFuncs++
		case 0x02: // memory: resolved or refused at instantiation (only WASI and fleet exist)
			r.limits()
			m.memory = true
		case 0x03:
			r.byte()
			r.byte()
			m.globals++
		default:
			if r.err != nil {
				break
			}
			what := map[byte]string{0x01: "a table", 0x04: "a tag"}[kind]
			if what == "" {
				what = fmt.Sprintf("kind %#x", kind)
			}
			return refusal{fmt.Errorf("native: import %s.%s is %s; a guest may import only functions", mod, name, what)}
		}
	}
	return r.done("import section")
}

func (m *module) readFunctions(p []byte) error {
	r := &reader{b: p}
	n := r.count()
	for i := uint32(0); i < n && r.err == nil; i++ {
		m.funcTypes = append(m.funcTypes, r.u32())
	}
	return r.done("function section")
}

// readVector reads a vector of entries, each by entry, and checks that they fill p.
func readVector(p []byte, what string, entry func(*reader)) error {
	r := &reader{b: p}
	n := r.count()
	for i := uint32(0); i < n && r.err == nil; i++ {
		entry(r)
	}
	return r.done(what)
}

// readElement reads an element segment of any of the eight forms.
func readElement(r *reader) {
	flags := r.u32()
	if flags > 7 {
		r.fail(fmt.Errorf("element segment flags %d are not supported", flags))
		return
	}
	if flags&0b010 != 0 && flags&0b001 == 0 { // an explicit table index
		r.u32()
	}
	if flags&0b001 == 0 { // active: an offset
		r.constExpr()
	}
	if flags&0b011 != 0 { // an element kind or a reference type
		r.byte()
	}
	n := r.count()
	for i := uint32(0); i < n && r.err == nil; i++ {
		if flags&0b100 != 0 {
			r.constExpr()
		} else {
			r.u32()
		}
	}
}

// readData reads a data segment: active (0), passive (1) or active with a memory (2).
func readData(r *reader) {
	switch flags := r.u32(); flags {
	case 2:
		r.u32()
		fallthrough
	case 0:
		r.constExpr()
	case 1:
	default:
		r.fail(fmt.Errorf("data segment flags %d are not supported", flags))
	}
	r.bytes(int(r.u32()))
}

// readCustom reads a custom section's name, and reports whether to keep the section:
// all but a "name" section whose names do not fill it as declared.
func readCustom(p []byte) (keep bool, err error) {
	r := &reader{b: p}
	if name := r.name(); r.err != nil {
		return false, fmt.Errorf("native: custom section: %w", r.err)
	} else if name != "name" {
		return true, nil
	}
	names := func(r *reader) {
		for n := r.count(); n > 0 && r.err == nil; n-- {
			r.u32()
			r.name()
		}
	}
	for r.pos < len(p) && r.err == nil {
		id := r.byte()
		sub := &reader{b: r.bytes(int(r.u32()))}
		switch id {
		case 0:
			sub.name()
		case 1:
			names(sub)
		case 2:
			for n := sub.count(); n > 0 && sub.err == nil; n-- {
				sub.u32()
				names(sub)
			}
		default:
			continue
		}
		if sub.err != nil || sub.pos != len(sub.b) {
			return false, nil
		}
	}
	return r.err == nil, nil
}

// FuncExports is the names of the functions wasm exports, read from its export section
// alone, so that a transport refuses a module by its exports before it compiles it (a
// module of megabytes takes seconds). ok is false for a module it cannot read, which
// the rewriter or the compile refuses in its own words.
func FuncExports(wasm []byte) (names map[string]bool, ok bool) {
	r, ok := sectionOf(wasm, secExport)
	names = map[string]bool{}
	if r == nil {
		return names, ok
	}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		name, kind := r.name(), r.byte()
		r.u32()
		if kind == 0 { // a function
			names[name] = true
		}
	}
	return names, r.err == nil
}

// ImportModules is the modules wasm imports from, read from its import section alone,
// whatever it imports from them; ok is false for a module it cannot read.
func ImportModules(wasm []byte) (modules map[string]bool, ok bool) {
	r, ok := sectionOf(wasm, secImport)
	modules = map[string]bool{}
	if r == nil {
		return modules, ok
	}
	for n := r.count(); n > 0 && r.err == nil; n-- {
		mod, _ := r.name(), r.name()
		switch r.byte() {
		case 0x00: // a function: its type
			r.u32()
		case 0x01: // a table: its element type and limits
			r.byte()
			r.limits()
		case 0x02: // a memory
			r.limits()
		case 0x03: // a global: its type and mutability
			r.byte()
			r.byte()
		case 0x04: // a tag: its attribute and type
			r.byte()
			r.u32()
		default:
			r.fail(errors.New("an import of an unknown kind"))
		}
		if r.err == nil {
			modules[mod] = true
		}
	}
	return modules, r.err == nil
}

// sectionOf is a reader of wasm's section id, found by the sections' sizes alone; nil
// when the module has none. ok is false for a module whose sections cannot be read up to
// it.
func sectionOf(wasm []byte, id byte) (*reader, bool) {
	if len(wasm) < 8 || string(wasm[:4]) != "\x00asm" {
		return nil, false
	}
	r := &reader{b: wasm, pos: 8}
	for r.pos < len(r.b) && r.err == nil {
		sid, payload := r.byte(), r.bytes(int(r.u32()))
		if sid == id && r.err == nil {
			return &reader{b: payload}, true
		}
	}
	return nil, r.err == nil
}

func readExports(p []byte) error {
	r := &reader{b: p}
	n := r.count()
	for i := uint32(0); i < n && r.err == nil; i++ {
		if name := r.name(); name == stackGlobal || name == stopGlobal || name == StartExport {
			return refusal{fmt.Errorf("native: the module exports %q, a name the host reserves", name)}
		}
		r.byte()
		r.u32()
	}
	return r.done("export section")
}

// clampTables returns the table section with its one table's maximum at most
// maxTableElements, or refuses a second table or a larger minimum.
func clampTables(p []byte) ([]byte, error) {
	r := &reader{b: p}
	n := r.count()
	if n > 1 {
		return nil, refusal{fmt.Errorf("native: the module defines %d tables; a guest may define at most 1", n)}
	}
	out := appendU32(nil, n)
	if n == 1 {
		rt := r.byte()
		flag := r.byte()
		min := r.u32()
		max := uint32(maxTableElements)
		switch {
		case r.err != nil:
		case rt != 0x70 && rt != 0x6f:
			return nil, fmt.Errorf("native: table type %#x is not supported", rt)
		case flag == 0x01:
			max = min32(r.u32(), maxTableElements)
		case flag != 0x00:
			return nil, fmt.Errorf("native: table limits flag %#x is not supported", flag)
		}
		if min > maxTableElements {
			return nil, refusal{fmt.Errorf("native: the table starts with %d elements; the limit is %d", min, maxTableElements)}
		}
		out = append(out, rt, 0x01)
		out = appendU32(appendU32(out, min), max)
	}
	if err := r.done("table section"); err != nil {
		return nil, err
	}
	return out, nil
}

func min32(a, b uint32) uint32 {
	if a < b {
		return a
	}
	return b
}

// rewriteCode rewrites the code section's bodies.
func (m *module) rewriteCode(p []byte) ([]byte, error) {
	r := &reader{b: p}
	n := r.count()
	if r.err != nil {
		return nil, fmt.Errorf("native: code section: %w", r.err)
	}
	if int(n) != len(m.funcTypes)-m.importFuncs {
		return nil, fmt.Errorf("native: code section has %d bodies for %d functions", n, len(m.funcTypes)-m.importFuncs)
	}
	out := appendU32(nil, n)
	for i := 0; i < int(n); i++ {
		size := r.u32()
		body := r.bytes(int(size))
		if r.err != nil {
			return nil, fmt.Errorf("native: code section: %w", r.err)
		}
		fn := uint32(m.importFuncs + i)
		b, err := m.rewriteBody(fn, body)
		if err != nil {
			return nil, fmt.Errorf("native: function %d: %w", fn, err)
		}
		out = appendU32(out, uint32(len(b)))
		out = append(out, b...)
	}
	if err := r.done("code section"); err != nil {
		return nil, err
	}
	return out, nil
}

func (m *module) typeOf(fn uint32) (funcType, error) {
	if int(fn) >= len(m.funcTypes) {
		return funcType{}, fmt.Errorf("function index %d out of range", fn)
	}
	return m.typeAt(m.funcTypes[fn])
}

func (m *module) typeAt(idx uint32) (funcType, error) {
	if int(idx) >= len(m.types) {
		return funcType{}, fmt.Errorf("type index %d out of range", idx)
	}
	return m.types[idx], nil
}

// blockTypeIndex returns the index of a type () -> results, appending one to
// m.extraTypes if neither the module nor extraTypes has it.
func (m *module) blockTypeIndex(results []byte) uint32 {
	extra := &m.extraTypes
	for i, t := range m.types {
		if len(t.params) == 0 && slices.Equal(t.results, results) {
			return uint32(i)
		}
	}
	for i, t := range *extra {
		if slices.Equal(t.results, results) {
			return uint32(len(m.types) + i)
		}
	}
	*extra = append(*extra, funcType{results: results})
	return uint32(len(m.types) + len(*extra) - 1)
}

// rewriteBody returns body (locals and code of function fn) as it runs in the sandbox:
// counted down, and when it has a call, also spending the stack budget, as the file
// comment says. Its code is unchanged but for each return, which becomes a br.
func (m *module) rewriteBody(fn uint32, body []byte) ([]byte, error) {
	global := m.budgetGlobal()
	sig, err := m.typeOf(fn)
	if err != nil {
		return nil, err
	}
	r := &reader{b: body}
	groups := r.count()
	countEnd := r.pos
	var locals uint64
	for g := uint32(0); g < groups && r.err == nil; g++ {
		locals += uint64(r.u32())
		if vt := r.byte(); !isValType(vt) && r.err == nil {
			return nil, refusal{fmt.Errorf("local type %#x is not supported", vt)}
		}
		if locals > maxLocals {
			return nil, refusal{fmt.Errorf("declares more than %d locals", maxLocals)}
		}
	}
	if r.err != nil {
		return nil, fmt.Errorf("locals: %w", r.err)
	}
	code := r.pos
	s, err := m.scan(body[code:])
	if err != nil {
		return nil, err
	}
	// Two more locals, $t and $saved, after every other, so that no index moves.
	t := uint32(len(sig.params)) + uint32(locals)
	saved := t + 1
	out := appendU32(nil, groups+1)
	out = append(out, body[countEnd:code]...)
	out = append(out, 0x02, 0x7f)
	// The countdown, for the body's code and the rewriter's: see appendCountdown.
	out = m.appendCountdown(out, int64(len(body)-code)+prologueLen, t)
	if !s.calls {
		return m.appendCode(out, body[code:], s.loops, nil, t), nil
	}
	// The frame's estimate also charges its code, so that the tails that the frames on
	// the stack run when their callees return are bounded too: see tailBytes.
	slots := uint64(len(sig.params)) + min(locals, s.localRefs) + 2 + s.maxHeight
	frame := frameOverhead + slotBytes*slots + uint64(len(body)-code)/tailBytes
	if frame > stackBudget {
		return nil, refusal{fmt.Errorf("needs an estimated %d-byte frame; the stack limit is %d bytes", frame, stackBudget)}
	}
	cost := int64(frame)
	// if ($saved = budget) < cost { budget = stackExhausted; unreachable }
	out = appendGlobalGet(out, global)
	out = appendLocal(out, 0x22, saved)
	out = appendI32Const(out, cost)
	out = append(out, 0x49, 0x04, 0x40) // i32.lt_u if
	out = appendI32Const(out, stackExhausted)
	out = appendGlobalSet(out, global)
	out = append(out, 0x00, 0x0b) // unreachable end
	// budget = $saved - cost
	out = appendLocal(out, 0x20, saved)
	out = appendI32Const(out, cost)
	out = append(out, 0x6b) // i32.sub
	out = appendGlobalSet(out, global)
	// block (result ...): a br to the function's label now ends this block instead,
	// and each return becomes such a br.
	out = append(out, 0x02)
	switch len(sig.results) {
	case 0:
		out = append(out, 0x40)
	case 1:
		out = append(out, sig.results[0])
	default:
		out = appendS64(out, int64(m.blockTypeIndex(sig.results)))
	}
	out = m.appendCode(out, body[code:], s.loops, s.returns, t) // ends with the end that now closes the block
	out = appendLocal(out, 0x20, saved)                         // budget = $saved
	out = appendGlobalSet(out, global)
	return append(out, 0x0b), nil
}

// appendCode appends code with the countdown of each loop (at the pcs in loops, after
// the loop's block type) and, for each return in returns, a br to the block that wraps
// the body. Both lists are in the order of their pcs. t is the body's scratch local.
func (m *module) appendCode(out, code []byte, loops []loopAt, returns []returnAt, t uint32) []byte {
	prev := 0
	for len(loops) > 0 || len(returns) > 0 {
		if len(returns) == 0 || (len(loops) > 0 && loops[0].pc < returns[0].pc) {
			out = append(out, code[prev:loops[0].pc]...)
			out = m.appendCountdown(out, int64(loops[0].len/tailBytes)+prologueLen, t)
			prev, loops = loops[0].pc, loops[1:]
			continue
		}
		out = append(out, code[prev:returns[0].pc]...)
		out = append(out, 0x0c) // br
		out = appendU32(out, returns[0].depth)
		prev, returns = returns[0].pc+1, returns[1:]
	}
	return append(out, code[prev:]...)
}

// appendCountdown appends countdown -= cost; if countdown < 0 { the check }, with t, the
// body's scratch local, holding the new countdown.
func (m *module) appendCountdown(out []byte, cost int64, t uint32) []byte {
	countdown := m.budgetGlobal() + 1
	out = appendGlobalGet(out, countdown)
	out = appendI32Const(out, cost)
	out = append(out, 0x6b) // i32.sub
	out = appendLocal(out, 0x22, t)
	out = appendGlobalSet(out, countdown)
	out = appendLocal(out, 0x20, t)
	out = append(out, 0x41, 0x00, 0x48, 0x04, 0x40) // i32.const 0 i32.lt_s if
	out = m.appendCheck(out)
	return append(out, 0x0b) // end
}

// appendCheck appends the check that the countdown runs: an exit to Go (memory.grow 0,
// when the module has a memory), then global.get stop; if; unreachable; end, then an
// empty loop (wazero's close check, when the runtime has WithCloseOnContextDone), and
// countdown = checkEvery.
func (m *module) appendCheck(out []byte) []byte {
	if m.memory {
		out = append(out, 0x41, 0x00, 0x40, 0x00, 0x1a) // i32.const 0 memory.grow 0 drop
	}
	out = appendGlobalGet(out, m.budgetGlobal()+2)
	out = append(out, 0x04, 0x40, 0x00, 0x0b) // if unreachable end
	out = append(out, 0x03, 0x40, 0x0b)       // loop end
	out = appendI32Const(out, checkEvery)
	return appendGlobalSet(out, m.budgetGlobal()+1)
}

func appendGlobalGet(b []byte, g uint32) []byte      { return appendU32(append(b, 0x23), g) }
func appendLocal(b []byte, op byte, l uint32) []byte { return appendU32(append(b, op), l) }
func appendGlobalSet(b []byte, g uint32) []byte      { return appendU32(append(b, 0x24), g) }
func appendI32Const(b []byte, v int64) []byte        { return appendS64(append(b, 0x41), v) }

// scanResult is what rewriteBody needs to know of a function's code.
type scanResult struct {
	calls     bool
	loops     []loopAt // in the order of their pcs
	returns   []returnAt
	localRefs uint64 // local.get, local.set and local.tee instructions
	maxHeight uint64 // an upper bound of the operand stack's height
}

// loopAt is a loop whose body starts at pc, after its block type, and is len bytes up
// to its end.
type loopAt struct{ pc, len int }

// returnAt is a return instruction at pc, inside depth blocks of the function's code.
type returnAt struct {
	pc    int
	depth uint32
}

// control is an open block while scanning: the operand stack's height below it and
// the counts of its params and results.
type control struct {
	base, params, results uint64
	loop                  int // for a loop, its index in scanResult.loops; -1 otherwise
}

// scan decodes code (a function's instructions, up to and with its final end) exactly as
// wazero does, and tracks the operand stack's height: exactly for what the function's
// own and its callees' types fix, and from above for SIMD (each counts as pushing two
// slots and popping none).
func (m *module) scan(code []byte) (scanResult, error) {
	var s scanResult
	r := &reader{b: code}
	var height uint64
	stack := []control{{loop: -1}}
	push := func(n uint64) {
		height += n
		s.maxHeight = max(s.maxHeight, height)
	}
	pop := func(n uint64) {
		top := &stack[len(stack)-1]
		if height < top.base+n {
			height = top.base // an invalid body (wazero refuses it), or unreachable code
			return
		}
		height -= n
	}
	// unreachable drops what the current block holds: the code after an unconditional
	// branch pops from an empty, polymorphic stack.
	unreachable := func() { height = stack[len(stack)-1].base }
	blockType := func() (params, results uint64, err error) {
		start := r.pos
		// Decoded as wazero does: one s33, negative for the empty type and value types.
		v := r.s64(5)
		switch {
		case r.err != nil:
			return 0, 0, r.err
		case v == -0x40:
			return 0, 0, nil
		case v < 0 && v > -0x40 && isValType(byte(v&0x7f)):
			return 0, 1, nil
		case v < 0:
			return 0, 0, refusal{fmt.Errorf("block type at %#x is not supported", start)}
		}
		t, err := m.typeAt(uint32(v))
		return uint64(len(t.params)), uint64(len(t.results)), err
	}
	for r.pos < len(code) {
		pc := r.pos
		op := r.byte()
		switch {
		case op == 0x00: // unreachable
			unreachable()
		case op == 0x01: // nop
		case op == 0x02 || op == 0x03 || op == 0x04: // block loop if
			params, results, err := blockType()
			if err != nil {
				return s, err
			}
			loop := -1
			if op == 0x03 {
				loop = len(s.loops)
				s.loops = append(s.loops, loopAt{pc: r.pos})
			}
			if op == 0x04 {
				pop(1)
			}
			pop(params)
			stack = append(stack, control{base: height, params: params, results: results, loop: loop})
			push(params)
		case op == 0x05: // else
			if len(stack) == 1 {
				return s, fmt.Errorf("else outside a block at %#x", pc)
			}
			top := stack[len(stack)-1]
			height = top.base + top.params
		case op == 0x0b: // end
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if top.loop >= 0 {
				s.loops[top.loop].len = pc - s.loops[top.loop].pc
			}
			height = top.base
			push(top.results)
			if len(stack) == 0 {
				if r.pos != len(code) {
					return s, fmt.Errorf("code continues past the function's end at %#x", pc)
				}
				return s, nil
			}
		case op == 0x0c: // br
			r.u32()
			unreachable()
		case op == 0x0d: // br_if
			r.u32()
			pop(1)
		case op == 0x0e: // br_table
			n := r.count()
			for i := uint32(0); i <= n && r.err == nil; i++ {
				r.u32()
			}
			unreachable()
		case op == 0x0f: // return
			s.returns = append(s.returns, returnAt{pc, uint32(len(stack) - 1)})
			unreachable()
		case op == 0x10: // call
			s.calls = true
			t, err := m.typeOf(r.u32())
			if err != nil {
				return s, err
			}
			pop(uint64(len(t.params)))
			push(uint64(len(t.results)))
		case op == 0x11: // call_indirect
			s.calls = true
			t, err := m.typeAt(r.u32())
			if err != nil {
				return s, err
			}
			r.u32() // table
			pop(1 + uint64(len(t.params)))
			push(uint64(len(t.results)))
		case op == 0x1a: // drop
			pop(1)
		case op == 0x1b: // select
			pop(3)
			push(1)
		case op == 0x1c: // select t*
			n := r.count()
			for i := uint32(0); i < n && r.err == nil; i++ {
				r.byte()
			}
			pop(3)
			push(1)
		case op == 0x20: // local.get
			r.u32()
			s.localRefs++
			push(1)
		case op == 0x21: // local.set
			r.u32()
			s.localRefs++
			pop(1)
		case op == 0x22: // local.tee
			r.u32()
			s.localRefs++
		case op == 0x23 || op == 0x24: // global.get, global.set
			// The budget global comes after the module's own: an index past them, invalid
			// in the module as written, would reach it.
			if g := r.u32(); g >= uint32(m.globals) && r.err == nil {
				return s, fmt.Errorf("global index %d at %#x out of range", g, pc)
			}
			if op == 0x23 {
				push(1)
			} else {
				pop(1)
			}
		case op == 0x25: // table.get
			r.u32()
		case op == 0x26: // table.set
			r.u32()
			pop(2)
		case op >= 0x28 && op <= 0x35: // loads
			r.memarg()
		case op >= 0x36 && op <= 0x3e: // stores
			r.memarg()
			pop(2)
		case op == 0x3f: // memory.size
			r.u32()
			push(1)
		case op == 0x40: // memory.grow
			r.u32()
		case op == 0x41:
			r.s64(5)
			push(1)
		case op == 0x42:
			r.s64(10)
			push(1)
		case op == 0x43:
			r.bytes(4)
			push(1)
		case op == 0x44:
			r.bytes(8)
			push(1)
		case op == 0x45 || op == 0x50 || (op >= 0x67 && op <= 0x69) || (op >= 0x79 && op <= 0x7b) ||
			(op >= 0x8b && op <= 0x91) || (op >= 0x99 && op <= 0x9f) || (op >= 0xa7 && op <= 0xc4):
			// unary tests, counts, float unary ops, conversions, sign extensions: 1 -> 1
		case op >= 0x46 && op <= 0xa6: // comparisons and binary ops: 2 -> 1
			pop(2)
			push(1)
		case op == 0xd0: // ref.null
			r.byte()
			push(1)
		case op == 0xd1: // ref.is_null
		case op == 0xd2: // ref.func
			r.u32()
			push(1)
		case op == 0xfc:
			if err := scanMisc(r, pop, push); err != nil {
				return s, fmt.Errorf("at %#x: %w", pc, err)
			}
		case op == 0xfd:
			if err := scanSIMD(r); err != nil {
				return s, fmt.Errorf("at %#x: %w", pc, err)
			}
			push(2)
		default:
			if r.err == nil {
				return s, fmt.Errorf("opcode %#x at %#x is not supported", op, pc)
			}
		}
		if r.err != nil {
			return s, fmt.Errorf("instruction at %#x: %w", pc, r.err)
		}
	}
	return s, fmt.Errorf("code has no final end")
}

// scanMisc decodes an instruction of the 0xfc prefix.
func scanMisc(r *reader, pop, push func(uint64)) error {
	sub := r.u32()
	switch {
	case sub <= 0x07: // trunc_sat: 1 -> 1
	case sub == 0x08: // memory.init data mem
		r.u32()
		r.u32()
		pop(3)
	case sub == 0x09 || sub == 0x0d: // data.drop, elem.drop
		r.u32()
	case sub == 0x0a: // memory.copy mem mem
		r.u32()
		r.u32()
		pop(3)
	case sub == 0x0b: // memory.fill mem
		r.u32()
		pop(3)
	case sub == 0x0c || sub == 0x0e: // table.init elem table, table.copy table table
		r.u32()
		r.u32()
		pop(3)
	case sub == 0x0f: // table.grow
		r.u32()
		pop(2)
		push(1)
	case sub == 0x10: // table.size
		r.u32()
		push(1)
	case sub == 0x11: // table.fill
		r.u32()
		pop(3)
	default:
		if r.err == nil {
			return fmt.Errorf("opcode 0xfc %#x is not supported", sub)
		}
	}
	return r.err
}

// simdUndefined are the SIMD opcodes below 0x100 that wazero does not define.
var simdUndefined = map[byte]bool{
	0x9a: true, 0xa2: true, 0xa5: true, 0xa6: true, 0xaf: true, 0xb0: true, 0xb2: true,
	0xb3: true, 0xb4: true, 0xbb: true, 0xc2: true, 0xc5: true, 0xc6: true, 0xcf: true,
	0xd0: true, 0xd2: true, 0xd3: true, 0xd4: true, 0xe2: true, 0xee: true,
}

// scanSIMD decodes an instruction of the 0xfd prefix. wazero reads its sub-opcode as one
// byte (not as the spec's LEB128), and so does this, so that both see the same
// instructions.
func scanSIMD(r *reader) error {
	sub := r.byte()
	switch {
	case r.err != nil:
	case sub <= 0x0b || sub == 0x5c || sub == 0x5d: // loads, store, load_zero: memarg
		r.memarg()
	case sub == 0x0c || sub == 0x0d: // v128.const, i8x16.shuffle
		r.bytes(16)
	case sub >= 0x15 && sub <= 0x22: // extract_lane, replace_lane
		r.byte()
	case sub >= 0x54 && sub <= 0x5b: // load_lane, store_lane: memarg lane
		r.memarg()
		r.byte()
	case simdUndefined[sub]:
		return fmt.Errorf("opcode 0xfd %#x is not supported", sub)
	}
	return r.err
}

// isValType reports whether b is a value type of CoreFeaturesV2.
func isValType(b byte) bool {
	switch b {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f:
		return true
	}
	return false
}

// reader decodes the binary format. The first error sticks, and later reads return
// zeros.
type reader struct {
	b   []byte
	pos int
	err error
}

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.pos >= len(r.b) {
		r.err = errTruncated
		return 0
	}
	r.pos++
	return r.b[r.pos-1]
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.pos {
		r.err = errTruncated
		return nil
	}
	r.pos += n
	return r.b[r.pos-n : r.pos]
}

// u32 reads an unsigned LEB128 of at most 5 bytes, refusing unused high bits as wazero
// does.
func (r *reader) u32() uint32 {
	var v uint32
	for i := 0; i < 5; i++ {
		b := r.byte()
		if r.err != nil {
			return 0
		}
		v |= uint32(b&0x7f) << (7 * i)
		if b < 0x80 {
			if i == 4 && b&0xf0 != 0 {
				break
			}
			return v
		}
	}
	r.err = errors.New("malformed u32")
	return 0
}

// count reads a vector's count, which cannot be more than the bytes left: each entry
// takes one at least. wazero allocates by a count before it reads the entries, so one
// that lies must fail here, as a truncated module (errTruncated).
func (r *reader) count() uint32 {
	n := r.u32()
	if r.err == nil && int64(n) > int64(len(r.b)-r.pos) {
		r.err = errTruncated
		return 0
	}
	return n
}

// s64 skips a signed LEB128 of at most n bytes and returns its value.
func (r *reader) s64(n int) int64 {
	var v int64
	for i := 0; i < n; i++ {
		b := r.byte()
		if r.err != nil {
			return 0
		}
		v |= int64(b&0x7f) << (7 * i)
		if b < 0x80 {
			if shift := 7 * (i + 1); shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
	r.err = errors.New("malformed signed integer")
	return 0
}

// memarg reads an alignment and an offset; an alignment with bit 6 set names a memory
// index (multi-memory), which CoreFeaturesV2 does not have.
func (r *reader) memarg() {
	if align := r.u32(); align >= 1<<6 && r.err == nil {
		r.err = fmt.Errorf("alignment %#x is not supported", align)
	}
	r.u32()
}

// fail records err unless an error is already recorded.
func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// constExpr reads a constant expression of CoreFeaturesV2: one constant, ref.null,
// ref.func or global.get, then end.
func (r *reader) constExpr() {
	switch op := r.byte(); op {
	case 0x41:
		r.s64(5)
	case 0x42:
		r.s64(10)
	case 0x43:
		r.bytes(4)
	case 0x44:
		r.bytes(8)
	case 0x23, 0xd2:
		r.u32()
	case 0xd0:
		r.byte()
	case 0xfd:
		if r.byte() != 0x0c {
			r.fail(errors.New("constant expression: only v128.const of the SIMD opcodes"))
		}
		r.bytes(16)
	default:
		r.fail(fmt.Errorf("constant expression: opcode %#x is not supported", op))
	}
	if r.byte() != 0x0b {
		r.fail(errors.New("constant expression: one instruction, then end"))
	}
}

func (r *reader) name() string {
	return string(r.bytes(int(r.u32())))
}

func (r *reader) limits() {
	if flag := r.byte(); flag&1 != 0 {
		r.u32()
		r.u32()
	} else {
		r.u32()
	}
}

// done reports a read error, or bytes left over, in what.
func (r *reader) done(what string) error {
	if r.err != nil {
		return fmt.Errorf("native: %s: %w", what, r.err)
	}
	if r.pos != len(r.b) {
		return fmt.Errorf("native: %s: %d bytes past its end", what, len(r.b)-r.pos)
	}
	return nil
}

func appendU32(b []byte, v uint32) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
