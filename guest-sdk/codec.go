package fleet

import valuejson "github.com/segmentio/encoding/json"

// The plugin's own values (pool payloads and tags, KV values, task payloads, the config)
// are encoded and decoded with segmentio/encoding/json: a drop-in for
// encoding/json (the same struct tags, the same Marshaler and Unmarshaler interfaces, the
// same bytes out) that costs a wasm guest a fraction of encoding/json's time. See
// guest-sdk/RATIONALE.md, "Which JSON codec for the plugin's values?".

// marshalValue is json.Marshal of one of the plugin's values.
func marshalValue(v any) ([]byte, error) { return valuejson.Marshal(v) }

// unmarshalValue is json.Unmarshal into one of the plugin's values.
func unmarshalValue(b []byte, v any) error { return valuejson.Unmarshal(b, v) }
