;; fleet_handle passes out-of-range pointers to a host function. Every call must answer
;; ResultFault (-1) and the instance must live on: it then returns done.
(module
  (import "fleet" "counter_incr" (func $incr (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{{.Describe}}")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (data (i32.const 4200) "{\"outcome\":\"fail\",\"reason\":\"no fault\"}")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const {{.DescribeLen}}))
  (func (export "fleet_handle") (param i32) (result i64)
    ;; request past the end of memory
    (if (i32.ne (call $incr (i32.const 65500) (i32.const 100) (i32.const 8192) (i32.const 100)) (i32.const -1))
      (then (return (i64.const {{.Packed 4200 38}}))))
    ;; request wrapping around 4 GiB
    (if (i32.ne (call $incr (i32.const -16) (i32.const 32) (i32.const 8192) (i32.const 100)) (i32.const -1))
      (then (return (i64.const {{.Packed 4200 38}}))))
    ;; reply buffer past the end of memory
    (if (i32.ne (call $incr (i32.const 0) (i32.const 2) (i32.const 65535) (i32.const 4096)) (i32.const -1))
      (then (return (i64.const {{.Packed 4200 38}}))))
    (i64.const {{.Packed 4096 18}}))
)
