;; A guest that traps on every task (and every tick): the wasm `unreachable` instruction.
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{{.Describe}}")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const {{.DescribeLen}}))
  (func (export "fleet_handle") (param i32) (result i64) (unreachable))
  (func (export "fleet_tick") (param i32) (result i64) (unreachable))
)
