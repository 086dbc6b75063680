;; _initialize recurses without end: its call stack passes the host's limit, and the
;; plugin is refused at load with the words a slot's stack death has.
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{{.Describe}}")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (func $deeper (param i32) (result i32)
    (call $deeper (i32.add (local.get 0) (i32.const 1))))
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const {{.DescribeLen}}))
  (func (export "_initialize") (drop (call $deeper (i32.const 0))))
  (func (export "fleet_handle") (param i32) (result i64) (i64.const {{.Packed 4096 18}}))
)
