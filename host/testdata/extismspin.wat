;; spin.wat over Extism: fleet_handle never returns; the call's deadline must kill the
;; instance. fleet_describe sets its output through Extism's kernel, as extismdone.wat's.
(module
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{{.Describe}}")
  (func (export "fleet_describe") (result i32) (local $b i64) (local $i i32)
    (local.set $b (call $alloc (i64.const {{.DescribeLen}})))
    (block $done (loop $more
      (br_if $done (i32.ge_u (local.get $i) (i32.const {{.DescribeLen}})))
      (call $store_u8 (i64.add (local.get $b) (i64.extend_i32_u (local.get $i)))
        (i32.load8_u (local.get $i)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $more)))
    (call $output_set (local.get $b) (i64.const {{.DescribeLen}}))
    (i32.const 0))
  (func (export "fleet_handle") (result i32)
    (loop $forever (br $forever))
    (i32.const 0))
)
