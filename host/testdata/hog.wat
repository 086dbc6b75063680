;; fleet_handle grows its memory a page at a time until the host's limit refuses, then
;; traps: the instance dies, the slot makes a fresh one.
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{{.Describe}}")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const {{.DescribeLen}}))
  (func (export "fleet_handle") (param i32) (result i64)
    (loop $grow
      (br_if $grow (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
    unreachable)
)
