;; _initialize makes a host call (counter_incr on "goguest:init") and traps unless the
;; counter is then 1: the probe, granted nothing, is denied and passes; the first slot
;; instance, granted its type's counters, gets 1 and passes; every later one traps. A build
;; whose first slot comes up and whose second cannot.
(module
  (import "fleet" "counter_incr" (func $incr (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 0) "{{.Describe}}")
  (data (i32.const 4096) "{\"outcome\":\"done\"}")
  (data (i32.const 4400) "{\"name\":\"goguest:init\"}")
  (func (export "fleet_abi_version") (result i32) (i32.const 1))
  (func (export "fleet_input") (param i32) (result i32) (i32.const 8192))
  (func (export "fleet_describe") (result i64) (i64.const {{.DescribeLen}}))
  (func (export "_initialize")
    (drop (call $incr (i32.const 4400) (i32.const 23) (i32.const 16384) (i32.const 1024)))
    ;; the reply is {"ok":{"value":N}} on success: N's first digit is at 16384 + 15
    (if (i32.and
          (i32.eq (i32.load8_u (i32.const 16386)) (i32.const 111))
          (i32.ne (i32.load8_u (i32.const 16399)) (i32.const 49)))
      (then unreachable)))
  (func (export "fleet_handle") (param i32) (result i64) (i64.const {{.Packed 4096 18}}))
)
