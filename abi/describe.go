package abi

import (
	"encoding/json"
	"fmt"
)

// The modes of a plugin.
const (
	ModeBatch = "batch" // consumes a queue: the host calls fleet_handle once per task
	ModeLoop  = "loop"  // runs a loop: the host calls fleet_tick repeatedly
)

// Describe is the document a guest returns from fleet_describe: who it is and every
// contract it takes part in. Schemas are JSON Schema documents (the Go guest SDK generates
// them from Go types).
type Describe struct {
	ABIVersion int32  `json:"abi_version"`
	Type       string `json:"type"`    // the automation type, e.g. "scraper"
	Version    string `json:"version"` // the plugin's own version
	Mode       string `json:"mode"`    // ModeBatch or ModeLoop
	// Consumes is the queue a batch plugin takes tasks from; nil for a loop plugin.
	Consumes *QueueContract `json:"consumes,omitempty"`
	// Pools are the pools the plugin uses, with their schemas.
	Pools []PoolContract `json:"pools,omitempty"`
	// Submits are the queues the plugin submits tasks to.
	Submits []QueueContract `json:"submits,omitempty"`
	// ConfigSchema validates the plugin's configuration; empty means it takes none.
	ConfigSchema json.RawMessage `json:"config_schema,omitempty"`
}

// QueueContract is a named queue and the schema of its tasks' payloads.
type QueueContract struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload_schema"`
}

// PoolContract is a named pool and the schemas of its items' payloads and tags.
type PoolContract struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload_schema"`
	Tags    json.RawMessage `json:"tags_schema"`
}

// MaxVersionLen caps Describe.Version, in bytes: the version is shown in every load's
// log line, the API's plugin list and `fleet-host inspect`'s table, so a guest must not
// make it the size of its whole describe document. 128 holds any semver with build
// metadata.
const MaxVersionLen = 128

// Check verifies the shape of a describe document (not the schemas' meaning, which the
// host compiles): the version, the names, the mode and the contracts it requires.
func (d *Describe) Check() error {
	if err := CheckVersion(d.ABIVersion); err != nil {
		return err
	}
	if err := checkName("type", d.Type); err != nil {
		return err
	}
	if len(d.Version) > MaxVersionLen {
		return fmt.Errorf("abi: describe: plugin %q version is %d bytes, limit %d", d.Type, len(d.Version), MaxVersionLen)
	}
	switch d.Mode {
	case ModeBatch:
		if d.Consumes == nil {
			return fmt.Errorf("abi: describe: batch plugin %q consumes no queue", d.Type)
		}
	case ModeLoop:
		if d.Consumes != nil {
			return fmt.Errorf("abi: describe: loop plugin %q must not consume a queue (it consumes %q)", d.Type, d.Consumes.Name)
		}
	default:
		return fmt.Errorf("abi: describe: plugin %q has mode %q, want %q or %q", d.Type, d.Mode, ModeBatch, ModeLoop)
	}
	queues := map[string]bool{}
	if d.Consumes != nil {
		if err := d.Consumes.check("consumed queue"); err != nil {
			return err
		}
		queues[d.Consumes.Name] = true
	}
	for _, q := range d.Submits {
		if err := q.check("submitted queue"); err != nil {
			return err
		}
	}
	pools := map[string]bool{}
	for _, p := range d.Pools {
		if err := checkName("pool", p.Name); err != nil {
			return err
		}
		if pools[p.Name] {
			return fmt.Errorf("abi: describe: pool %q is declared twice", p.Name)
		}
		pools[p.Name] = true
		if err := checkSchema("pool "+p.Name+" payload", p.Payload); err != nil {
			return err
		}
		if err := checkSchema("pool "+p.Name+" tags", p.Tags); err != nil {
			return err
		}
	}
	if len(d.ConfigSchema) > 0 {
		if err := checkSchema("config", d.ConfigSchema); err != nil {
			return err
		}
	}
	return nil
}

func (q QueueContract) check(what string) error {
	if err := checkName(what, q.Name); err != nil {
		return err
	}
	return checkSchema(what+" "+q.Name+" payload", q.Payload)
}

// checkSchema requires a JSON object (or true); the host compiles it for real.
func checkSchema(what string, s json.RawMessage) error {
	var v any
	if len(s) == 0 {
		return fmt.Errorf("abi: describe: %s schema is missing", what)
	}
	if err := json.Unmarshal(s, &v); err != nil {
		return fmt.Errorf("abi: describe: %s schema is not JSON: %v", what, err)
	}
	switch v.(type) {
	case map[string]any, bool:
		return nil
	}
	return fmt.Errorf("abi: describe: %s schema is a %T, want an object", what, v)
}

// checkName applies the names rule of the primitives (1..200 bytes of letters, digits and
// -_.:/@=+) without importing them.
func checkName(what, name string) error {
	if name == "" || len(name) > 200 {
		return fmt.Errorf("abi: describe: %s name %q must be 1..200 bytes", what, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		switch c {
		case '-', '_', '.', ':', '/', '@', '=', '+':
			ok = true
		}
		if !ok {
			return fmt.Errorf("abi: describe: %s name %q has byte %q; allowed are letters, digits and -_.:/@=+", what, name, c)
		}
	}
	return nil
}
