;; done.wat over Extism: every task is done, every tick is done; fleet_describe, fleet_handle
;; and fleet_tick set their output from guest memory through Extism's kernel, as a PDK does.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{{.Describe}}")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (func $output (param $ptr i32) (param $len i32) (local $b i64) (local $i i32)
    (local.set $b (call $alloc (i64.extend_i32_u (local.get $len))))
    (block $done (loop $more
      (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
      (call $store_u8 (i64.add (local.get $b) (i64.extend_i32_u (local.get $i)))
        (i32.load8_u (i32.add (local.get $ptr) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $more)))
    (call $output_set (local.get $b) (i64.extend_i32_u (local.get $len))))
  (func (export "fleet_describe") (result i32) (call $output (i32.const 0) (i32.const {{.DescribeLen}})) (i32.const 0))
  (func (export "fleet_handle") (result i32) (call $output (i32.const 4096) (i32.const 18)) (i32.const 0))
  (func (export "fleet_tick") (result i32) (call $output (i32.const 4096) (i32.const 18)) (i32.const 0))
)
