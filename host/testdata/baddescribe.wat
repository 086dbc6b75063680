;; fleet_describe returns bytes that are not a describe document.
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"type\": 12")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const 11))
  (func (export "fleet_handle") (param i32) (result i64) (i64.const 0))
)
