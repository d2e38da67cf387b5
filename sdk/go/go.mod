// dara's properties for Go programs (docs/properties.md). No requirements.
module dara.dev/sdk

go 1.19
