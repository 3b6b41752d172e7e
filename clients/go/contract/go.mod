module github.com/acme/platform/clients/go/contract

go 1.26.0

require (
	github.com/acme/platform/clients/go v0.0.0
	github.com/acme/platform/pkg v0.0.0
	github.com/acme/platform/pkg/testkit v0.0.0
)

require (
	github.com/bahlo/generic-list-go v0.2.0 // indirect
	github.com/basgys/goxml2json v1.1.1-0.20231018121955-e66ee54ceaad // indirect
	github.com/buger/jsonparser v1.1.2 // indirect
	github.com/go-openapi/jsonpointer v0.23.2 // indirect
	github.com/go-openapi/swag/jsonname v0.26.1 // indirect
	github.com/pb33f/jsonpath v0.8.2 // indirect
	github.com/pb33f/libopenapi v0.38.6 // indirect
	github.com/pb33f/libopenapi-validator v0.14.0 // indirect
	github.com/pb33f/ordered-map/v2 v2.3.1 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.2 // indirect
	go.yaml.in/yaml/v4 v4.0.0-rc.6 // indirect
	golang.org/x/net v0.59.0 // indirect
	golang.org/x/sync v0.23.0 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace (
	github.com/acme/platform/clients/go => ../
	github.com/acme/platform/pkg => ../../../pkg
	github.com/acme/platform/pkg/testkit => ../../../pkg/testkit
)
