module github.com/acme/platform/clients/go/contract

go 1.26.0

require (
	github.com/acme/platform/clients/go v0.0.0
	github.com/acme/platform/pkg v0.0.0
	github.com/acme/platform/pkg/testkit v0.0.0
)

require (
	github.com/getkin/kin-openapi v0.152.0 // indirect
	github.com/go-openapi/jsonpointer v0.23.2 // indirect
	github.com/go-openapi/swag/jsonname v0.26.1 // indirect
	github.com/kr/pretty v0.3.1 // indirect
	github.com/oasdiff/yaml v0.1.1 // indirect
	github.com/oasdiff/yaml3 v0.0.14 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	github.com/stretchr/testify v1.11.1 // indirect
	golang.org/x/text v0.42.0 // indirect
)

replace (
	github.com/acme/platform/clients/go => ../
	github.com/acme/platform/pkg => ../../../pkg
	github.com/acme/platform/pkg/testkit => ../../../pkg/testkit
)
