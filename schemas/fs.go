package schemas

import "embed"

// FS holds the JSON Schema (draft 2020-12) of every wire record, named
// <record>.v<N>.schema.json.
//
//go:embed jsonschema/*.json
var FS embed.FS
