module github.com/fleethost/fleet/abi

go 1.26.8
