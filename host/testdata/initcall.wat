;; _initialize makes a host call (counter_incr on "goguest:init") and traps unless it
;; is denied: the probe, granted nothing, is denied and passes; every slot's instance, granted
;; its type's counters, traps. A build that is admitted and yet cannot make an instance.
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
    ;; only the probe's denial, {"error":{"kind":"PermissionDenied", passes (its P is at
    ;; 16384 + 18): an answer of ok, or of any other error a loaded machine may give a
    ;; slot, traps, so that no slot instance ever comes up
    (if (i32.ne (i32.load8_u (i32.const 16402)) (i32.const 80))
      (then unreachable)))
  (func (export "fleet_handle") (param i32) (result i64) (i64.const {{.Packed 4096 18}}))
)
