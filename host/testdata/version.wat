;; Built for ABI version 99: refused at load, naming both versions.
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{{.Describe}}")
  (func (export "fleet_abi_version") (result i32) (i32.const 99))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const {{.DescribeLen}}))
  (func (export "fleet_handle") (param i32) (result i64) (i64.const 0))
)
