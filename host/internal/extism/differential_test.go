package extism

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	extism "github.com/extism/go-sdk"
	"github.com/tetratelabs/wazero"

	"github.com/fleethost/fleet/abi"
	"github.com/fleethost/fleet/host/internal/hostfn"
	"github.com/fleethost/fleet/host/internal/validate"
	"github.com/fleethost/fleet/internal/testutil"
	"github.com/fleethost/fleet/primitives/memory"
)

// The differential test: the same plugins, called the same way, through the Extism Go
// SDK (its kernel, extism-runtime.wasm) and through the host's kernel, give the same
// outcome (the return code, the error_set message or the trap) and the same output and
// log lines. The plugins are the repo's AssemblyScript ones, with fleet's operations
// served on each side by serve over a memory backend of its own, and the SDK's own
// sample plugins from its module's wasm/ folder.

// diffCall is one call of a differential case: an export, its input.
type diffCall struct{ export, input string }

// TestDifferentialAssemblyScript runs describe and a task of each AssemblyScript plugin of
// testdata/assemblyscript through both kernels. worker's pool is empty (it retries),
// pinger's URL is not granted (it fails): both sides alike.
func TestDifferentialAssemblyScript(t *testing.T) {
	task := func(payload string) string {
		return `{"task":{"id":"t-1","payload":` + payload + `,"attempts":1,"hand_backs":0,"enqueued_at_ms":1},"iteration":1}`
	}
	for name, payload := range map[string]string{
		"counter": `{}`,
		"worker":  `{"n":3}`,
		"parker":  `{"op":"park"}`,
		"pinger":  `{"url":"http://127.0.0.1:1/"}`,
	} {
		t.Run(name, func(t *testing.T) {
			wasm, err := os.ReadFile(testutil.BuildAS(t, name))
			if err != nil {
				t.Fatal(err)
			}
			differ(t, wasm, "", []diffCall{{abi.ExportDescribe, ""}, {abi.ExportHandle, task(payload)}, {abi.ExportHandle, task(payload)}})
		})
	}
}

// TestDifferentialSDKSamples runs the Extism Go SDK's own test plugins that this host can
// run (not those of Extism's HTTP, vars or files, which are off here, count_vowels
// among them, nor of host functions of their own) through both kernels, with the calls
// of the SDK's own tests.
func TestDifferentialSDKSamples(t *testing.T) {
	dir := filepath.Join(testutil.GoModCache(t), "github.com", "extism", "go-sdk@v1.7.1", "wasm")
	for _, tt := range []struct {
		file, config string
		calls        []diffCall
	}{
		{"hello.wasm", "", []diffCall{{"run_test", ""}}},
		{"config.wasm", "", []diffCall{{"run_test", ""}}},
		{"config.wasm", `{"thing":"1"}`, []diffCall{{"run_test", ""}}},
		{"fail.wasm", "", []diffCall{{"run_test", ""}, {"run_test", ""}}},
		{"input_offset.wasm", "", []diffCall{{"input_offset_length", "hello world"}}},
		{"alloc.wasm", "", []diffCall{{"run_test", ""}}},
		{"noop.wasm", "", []diffCall{{"run_test", ""}}},
		{"log.wasm", "", []diffCall{{"run_test", ""}}},
		{"replace.wasm", "", []diffCall{{"run_test", ""}, {"run_test", "hello world"}}},
	} {
		t.Run(tt.file+tt.config, func(t *testing.T) {
			wasm, err := os.ReadFile(filepath.Join(dir, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			differ(t, wasm, tt.config, tt.calls)
		})
	}
}

// differ makes calls of wasm, under configuration config, in one instance of each
// kernel and fails t where their outcomes, outputs or logs differ.
func differ(t *testing.T, wasm []byte, config string, calls []diffCall) {
	t.Helper()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	core := func() *hostfn.Core {
		b := memory.New(memory.Options{})
		t.Cleanup(func() { b.Close() })
		return hostfn.NewCore(b, validate.NewRegistry(nil), nil, log)
	}
	caller := func() *hostfn.Caller {
		plugin := hostfn.NewGrantee("d", hostfn.Access{
			KV: hostfn.Patterns{"*"}, Counters: hostfn.Patterns{"*"}, Locks: hostfn.Patterns{"*"},
			Pools:  map[string]hostfn.Roles{"as-pool": hostfn.RolePut | hostfn.RoleClaim | hostfn.RoleMarkBad},
			Queues: map[string]hostfn.Roles{"count": hostfn.RoleSubmit},
		}, json.RawMessage(config), hostfn.Limits{
			MaxPayload: 1024, MaxHostCalls: hostfn.DefaultMaxHostCalls, MaxReply: hostfn.DefaultMaxReply, MaxPoolList: hostfn.DefaultMaxPoolList,
		}, nil)
		return &hostfn.Caller{Plugin: plugin, Slot: "d/0"}
	}

	var hostLog, sdkLog testutil.LogBuffer
	rt, err := newRuntime(ctx, Params{MemoryLimitPages: 256, Core: core(), Log: log, Config: json.RawMessage(config)}, wasm, false)
	if err != nil {
		t.Fatalf("the host's kernel: %v", err)
	}
	t.Cleanup(func() { rt.Close(ctx) })
	in, err := rt.Instantiate(ctx, "d/0", caller(), &hostLog)
	if err != nil {
		t.Fatalf("the host's kernel: %v", err)
	}
	sdk := sdkInstance(t, wasm, config, core(), log, &sdkLog)
	sdkCaller := caller()

	for i, c := range calls {
		callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		got := hostOutcome(callCtx, in, c)
		want := sdkOutcome(hostfn.WithCaller(callCtx, sdkCaller), sdk, c)
		cancel()
		switch {
		case got != want:
			t.Errorf("call %d, %s(%q):\n the host's kernel: %s\n the SDK's:          %s", i, c.export, c.input, got, want)
		case got == "trap":
			// Every case is a call that returns: a trap on both sides compares nothing.
			t.Errorf("call %d, %s(%q) trapped through both kernels", i, c.export, c.input)
		default:
			t.Logf("call %d, %s(%q): %.200s", i, c.export, c.input, got)
		}
	}
	if hostLog.String() != sdkLog.String() {
		t.Errorf("the guest's log:\n the host's kernel: %q\n the SDK's:          %q", hostLog.String(), sdkLog.String())
	}
}

// hostOutcome calls c in the host's kernel: "ok <output>", "fail <rc> <message>" or
// "trap".
func hostOutcome(ctx context.Context, in *Instance, c diffCall) string {
	in.caller.Begin()
	fn := in.mod.ExportedFunction(c.export)
	if _, err := in.call(ctx, fn, c.export, []byte(c.input)); err != nil {
		return "trap"
	}
	rc := uint32(in.stack[0])
	if msg, ok := in.k.errorMessage(); ok {
		return fmt.Sprintf("fail %d %s", rc, msg)
	}
	if rc != 0 {
		return fmt.Sprintf("fail %d", rc)
	}
	out, err := in.k.outputBytes(c.export, abi.MaxRequest)
	if err != nil {
		return "bad output: " + err.Error()
	}
	return "ok " + string(out)
}

// sdkOutcome is hostOutcome through the SDK.
func sdkOutcome(ctx context.Context, p *extism.Plugin, c diffCall) string {
	rc, out, err := p.CallWithContext(ctx, c.export, []byte(c.input))
	if err != nil {
		// The SDK returns the guest's error_set message as its error, the same as a trap's.
		if msg := p.GetErrorWithContext(ctx); msg != "" && msg == err.Error() {
			return fmt.Sprintf("fail %d %s", rc, msg)
		}
		return "trap"
	}
	if rc != 0 {
		return fmt.Sprintf("fail %d", rc)
	}
	return "ok " + string(out)
}

// sdkInstance is wasm instantiated by the Extism Go SDK with WASI, under configuration
// config, with fleet's operations served by serve over core, logging to out as the host
// does.
func sdkInstance(t *testing.T, wasm []byte, config string, core *hostfn.Core, log *slog.Logger, out io.Writer) *extism.Plugin {
	t.Helper()
	ctx := context.Background()
	extism.SetLogLevel(extism.LogLevelInfo)
	var fns []extism.HostFunction
	for _, op := range userOps() {
		f := extism.NewHostFunctionWithStack(string(op), func(ctx context.Context, p *extism.CurrentPlugin, stack []uint64) {
			stack[0] = serve(ctx, core, log, sdkBlocks{ctx, p}, op, stack[0])
		}, []extism.ValueType{extism.ValueTypePTR}, []extism.ValueType{extism.ValueTypePTR})
		f.SetNamespace(UserModule)
		fns = append(fns, f)
	}
	compiled, err := extism.NewCompiledPlugin(ctx, extism.Manifest{
		Wasm:   []extism.Wasm{extism.WasmData{Data: wasm}},
		Memory: &extism.ManifestMemory{MaxPages: 256},
		Config: configMap(json.RawMessage(config)),
	}, extism.PluginConfig{RuntimeConfig: wazero.NewRuntimeConfig(), EnableWasi: true}, fns)
	if err != nil {
		t.Fatalf("the SDK: %v", err)
	}
	t.Cleanup(func() { compiled.Close(ctx) })
	p, err := compiled.Instance(ctx, extism.PluginInstanceConfig{ModuleConfig: wazero.NewModuleConfig()})
	if err != nil {
		t.Fatalf("the SDK: %v", err)
	}
	p.SetLogger(func(level extism.LogLevel, msg string) { fmt.Fprintf(out, "extism %s: %s\n", level, msg) })
	return p
}

// sdkBlocks is the SDK's kernel as the blocks that serve reads and writes.
type sdkBlocks struct {
	ctx context.Context
	p   *extism.CurrentPlugin
}

func (m sdkBlocks) block(offset uint64) ([]byte, bool) {
	n, err := m.p.LengthWithContext(m.ctx, offset)
	if err != nil || n == 0 || offset > 1<<32-1 || n > 1<<32-1 {
		return nil, false
	}
	return m.p.Memory().Read(uint32(offset), uint32(n))
}

func (m sdkBlocks) allocBytes(b []byte) uint64 {
	offset, err := m.p.AllocWithContext(m.ctx, uint64(len(b)))
	if err != nil || offset == 0 || offset > 1<<32-1 || !m.p.Memory().Write(uint32(offset), b) {
		return 0
	}
	return offset
}
