;; fleet_handle asks for its config with reply_cap 0: the host keeps the reply and answers
;; its length; reply_fetch with a buffer one byte short keeps it again; with the full
;; buffer it copies it. Then it returns done, or fail if any step went wrong.
(module
  (import "fleet" "config_get" (func $config (param i32 i32 i32 i32) (result i32)))
  (import "fleet" "reply_fetch" (func $fetch (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{{.Describe}}")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (data (i32.const 4200) "{\"outcome\":\"fail\",\"reason\":\"no fetch\"}")
  (data (i32.const 4300) "{}")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const {{.DescribeLen}}))
  (func (export "fleet_handle") (param i32) (result i64)
    (local $n i32)
    (local.set $n (call $config (i32.const 4300) (i32.const 2) (i32.const 16384) (i32.const 0)))
    (if (i32.le_s (local.get $n) (i32.const 0))
      (then (return (i64.const {{.Packed 4200 38}}))))
    ;; one byte short: still kept, same length answered
    (if (i32.ne (call $fetch (i32.const 0) (i32.const 0) (i32.const 16384) (i32.sub (local.get $n) (i32.const 1))) (local.get $n))
      (then (return (i64.const {{.Packed 4200 38}}))))
    (if (i32.ne (call $fetch (i32.const 0) (i32.const 0) (i32.const 16384) (local.get $n)) (local.get $n))
      (then (return (i64.const {{.Packed 4200 38}}))))
    ;; the envelope starts {"ok"
    (if (i32.ne (i32.load8_u (i32.const 16386)) (i32.const 111))
      (then (return (i64.const {{.Packed 4200 38}}))))
    (i64.const {{.Packed 4096 18}}))
)
