module github.com/fleethost/fleet/guest-sdk

go 1.26.8

require (
	github.com/fleethost/fleet/abi v0.1.0
	github.com/invopop/jsonschema v0.14.0
	github.com/segmentio/encoding v0.5.4
)

require (
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/buger/jsonparser v1.1.2 // indirect
	github.com/pb33f/ordered-map/v2 v2.3.1 // indirect
	github.com/segmentio/asm v1.1.3 // indirect
	go.yaml.in/yaml/v4 v4.0.0-rc.2 // indirect
	golang.org/x/sys v0.0.0-20211110154304-99a53858aa08 // indirect
)

// The abi module of this repository, while developing. A replace here reaches only this
// module: a plugin's module that depends on the SDK gets the abi version required above,
// and needs a replace of its own until abi is published (README.md, section 0, "Start a
// plugin module of your own").
replace github.com/fleethost/fleet/abi => ../abi
